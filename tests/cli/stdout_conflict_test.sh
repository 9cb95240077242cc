#!/usr/bin/env bash
# `compile -o - --report -` would print the graph and the JSON report to stdout back to back:
# it must be refused with one line on stderr, exit code 2, and nothing on stdout.
set -uo pipefail
FXFUSE="$1"; GRAPH="$2"
T="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
for args in "-o - --report -" "--report=- -o -" "--emit=plan-text -o - --report -"; do
  # shellcheck disable=SC2086
  "$FXFUSE" compile "$GRAPH" $args >"$T/out" 2>"$T/err"; rc=$?
  if [[ $rc -eq 2 && $(wc -l <"$T/err") -eq 1 && ! -s "$T/out" ]] && grep -q "stdout" "$T/err"; then
    echo "ok   compile $args: $(cat "$T/err")"
  else
    echo "FAIL compile $args: exit $rc, stderr:"; cat "$T/err"; echo "stdout bytes: $(wc -c <"$T/out")"; fails=$((fails+1))
  fi
done
# Each alone is fine.
"$FXFUSE" compile "$GRAPH" -o - -q >"$T/out" 2>"$T/err" || { echo "FAIL -o - alone"; fails=$((fails+1)); }
"$FXFUSE" compile "$GRAPH" --report - -q >"$T/out" 2>"$T/err" || { echo "FAIL --report - alone"; fails=$((fails+1)); }
echo "$fails failed"
[[ $fails -eq 0 ]]
