#!/bin/bash
# Numeric check of every pass golden test (tests/passes/**/*.fxg): each graph of each file,
# run before and after the default pipeline in the CPU interpreter, must give the same
# outputs (fxfuse verify --all-graphs). A mismatch fails the test. A golden graph the
# interpreter cannot run (a type or shape its own ops contradict, e.g. a clone recorded with
# another dtype) is reported as a note: it is a defect of the golden file, not of a pass,
# and the files change under their owner; at most a quarter of the graphs may be skipped.
# Args: FXFUSE FILE...
set -u
FX="$1"; shift
fails=0; files=0; graphs=0; skipped=0
for f in "$@"; do
  files=$((files+1))
  out=$("$FX" verify "$f" --all-graphs --world-size=2 2>&1); rc=$?
  graphs=$((graphs + $(echo "$out" | grep -c '^graph @')))
  if echo "$out" | grep -q "MISMATCH"; then
    echo "FAIL: $f: outputs differ"; echo "$out" | grep -E "^graph @|MISMATCH" | sed 's/^/    /'; fails=$((fails+1)); continue
  fi
  base=$(basename "$f")
  bad=0
  # A graph that cannot be run: "@g: ERROR: ..." (several graphs) or "error: FILE: graph @g: ..."
  # (a one-graph file).
  while read -r line; do
    g=$(echo "$line" | sed -n -e 's/^ *@\([^:]*\): ERROR.*/\1/p' -e 's/.*error: .*graph @\([^:]*\): .*/\1/p')
    [ -z "$g" ] && continue
    echo "note: $base @$g cannot be run: ${line#*@$g: }"; skipped=$((skipped+1))
  done <<< "$(echo "$out" | grep -E ': ERROR:|error: .*graph @')"
  if [ "$rc" != 0 ] && [ "$rc" != 2 ]; then echo "FAIL: $f: exit $rc"; echo "$out" | tail -5; bad=1; fi
  if [ "$rc" = 2 ] && ! echo "$out" | grep -qE ': ERROR:|error: .*graph @'; then echo "FAIL: $f: $out" | tail -3; bad=1; fi
  fails=$((fails+bad))
done
echo "$files files, $graphs graphs, $skipped skipped"
if [ $((skipped * 4)) -gt "$graphs" ]; then echo "FAIL: too many graphs could not be run"; fails=$((fails+1)); fi
[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
