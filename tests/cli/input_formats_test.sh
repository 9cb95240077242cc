#!/usr/bin/env bash
# Inputs are recognized by content, whatever their names: launch plans written as plan.txt,
# plan.pb, x.bin (text and binary), graphs under misleading names (a .pt2 archive, a
# protobuf module and a .fxg as .bin/.txt/.plan.pb). A file in no known format is refused with
# one line that names it and the formats tried; a plan given where a graph is needed says so.
set -uo pipefail
FXFUSE="$1"; GRAPH="$2"; PT2="$3"
T="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; [[ -f "$T/err" ]] && cat "$T/err"; fails=$((fails+1)); }

# Plans under any name, text or binary.
for spec in "plan-text plan.txt" "plan plan.pb" "plan x.bin" "plan-text x.bin.2" "plan plan.txt.bin"; do
  read -r emit name <<<"$spec"
  "$FXFUSE" compile "$GRAPH" -q --emit="$emit" -o "$T/$name" 2>"$T/err" || { bad "compile --emit=$emit -o $name"; continue; }
  if "$FXFUSE" run "$T/$name" --describe >"$T/out" 2>"$T/err" && grep -q "^launches" "$T/out"; then
    ok "run --describe on a $emit named $name"
  else
    bad "run --describe on a $emit named $name"
  fi
done
# A text plan named like a binary one, and the reverse.
"$FXFUSE" compile "$GRAPH" -q --emit=plan-text -o "$T/text.plan.pb" 2>"$T/err"
"$FXFUSE" run "$T/text.plan.pb" --describe >"$T/out" 2>"$T/err" && ok "text plan named .plan.pb" || bad "text plan named .plan.pb"
"$FXFUSE" compile "$GRAPH" -q --emit=plan -o "$T/binary.plan.txt" 2>"$T/err"
"$FXFUSE" run "$T/binary.plan.txt" --describe >"$T/out" 2>"$T/err" && ok "binary plan named .plan.txt" || bad "binary plan named .plan.txt"

# Graphs under any name.
cp "$PT2" "$T/archive.bin"
cp "$GRAPH" "$T/graph.txt"
cp "$GRAPH" "$T/graph.plan.pb"
"$FXFUSE" convert "$GRAPH" -o "$T/module.pb" 2>"$T/err" && cp "$T/module.pb" "$T/module.dat"
"$FXFUSE" convert "$GRAPH" -o "$T/module.json" 2>"$T/err" && cp "$T/module.json" "$T/module.txt"
for f in archive.bin graph.txt graph.plan.pb module.dat module.txt; do
  if "$FXFUSE" inspect "$T/$f" >"$T/out" 2>"$T/err"; then ok "inspect $f"; else bad "inspect $f"; fi
done
# A graph named like a plan runs as a graph (compiled and lowered first).
"$FXFUSE" run "$T/graph.plan.pb" --describe >"$T/out" 2>"$T/err" && grep -q "^launches" "$T/out" \
  && ok "run --describe on a graph named .plan.pb" || bad "run --describe on a graph named .plan.pb"

# Unrecognized content: one line, exit 2, names the file and every format tried.
printf 'hello, this is not a graph\n' >"$T/notes.fxg"
"$FXFUSE" inspect "$T/notes.fxg" >/dev/null 2>"$T/err"; rc=$?
if [[ $rc -eq 2 && $(wc -l <"$T/err") -eq 1 ]] && grep -q "notes.fxg: unrecognized input format (tried: torch.export archive (zip), gzip, fxfuse JSON, torch.export JSON, .fxg text, FX readable text, launch plan text, launch plan protobuf, fxfuse protobuf module)" "$T/err"; then
  ok "unrecognized format: $(cat "$T/err")"
else
  bad "unrecognized format (exit $rc)"
fi
"$FXFUSE" run "$T/notes.fxg" --describe >/dev/null 2>"$T/err"; rc=$?
[[ $rc -eq 2 && $(wc -l <"$T/err") -eq 1 ]] && grep -q "unrecognized input format (tried:" "$T/err" \
  && ok "run: unrecognized format" || bad "run: unrecognized format (exit $rc)"
# A plan where a graph is needed.
"$FXFUSE" convert "$T/plan.txt" -o "$T/y.fxg" >/dev/null 2>"$T/err"; rc=$?
[[ $rc -eq 2 && $(wc -l <"$T/err") -eq 1 ]] && grep -q "plan.txt: is a launch plan" "$T/err" \
  && ok "plan given to convert: $(cat "$T/err")" || bad "plan given to convert (exit $rc)"
# A graph where a plan is needed.
"$FXFUSE" embed "$GRAPH" --name x --cu "$T/x.cu" --cc "$T/x.cc" --header "$T/x.h" >/dev/null 2>"$T/err"; rc=$?
[[ $rc -eq 2 && $(wc -l <"$T/err") -eq 1 ]] && grep -q "not a launch plan: it is .fxg text" "$T/err" \
  && ok "graph given to embed: $(cat "$T/err")" || bad "graph given to embed (exit $rc)"
echo "$fails failed"
[[ $fails -eq 0 ]]
