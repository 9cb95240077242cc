#!/usr/bin/env bash
# Golden tests of `fxfuse diff` (text, JSON, exit codes, colour) and `fxfuse draw` (DOT text,
# rendering through Graphviz to SVG/PNG, side by side), checked with LLVM's FileCheck.
#   golden_test.sh FXFUSE
set -uo pipefail
FXFUSE=$(realpath "$1")
FILECHECK=${FILECHECK:-/usr/lib/llvm-14/bin/FileCheck}
D=tests/inspect
DATA=$D/data
T=${TEST_TMPDIR:-$(mktemp -d)}
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails + 1)); }
expect_rc() {  # expect_rc WANT NAME CMD...
  local want=$1 name=$2; shift 2
  "$@" >"$T/out" 2>"$T/err"; local rc=$?
  if [[ $rc -eq $want ]]; then ok "$name"; else bad "$name: exit $rc, want $want: $(head -3 "$T/err")"; fi
}
check() {  # check NAME CHECKFILE < input
  if "$FILECHECK" --dump-input=fail "$2"; then ok "$1"; else bad "$1"; fi
}
[[ -x $FILECHECK ]] || { echo "FileCheck not found at $FILECHECK (Debian llvm-14-tools)"; exit 1; }

# diff: renamed twin has no differences (exit 0); a compiled graph differs (exit 1).
expect_rc 0 "diff renamed twin: exit 0" "$FXFUSE" diff $DATA/fusion_before.fxg $DATA/fusion_before_renamed.fxg
grep -q "no differences" "$T/out" && ok "diff renamed twin: no differences" || bad "diff renamed twin: $(cat "$T/out")"
expect_rc 1 "diff before/after: exit 1" "$FXFUSE" diff $DATA/fusion_before_renamed.fxg $DATA/fusion_after.fxg --color=never
check "diff text" $D/diff_text.check <"$T/out"
expect_rc 1 "diff --json" "$FXFUSE" diff $DATA/fusion_before_renamed.fxg $DATA/fusion_after.fxg --json
check "diff json" $D/diff_json.check <"$T/out"
# Not a terminal: plain text by default; --color=always colours.
"$FXFUSE" diff $DATA/fusion_before.fxg $DATA/fusion_after.fxg >"$T/plain"
if grep -q $'\033' "$T/plain"; then bad "diff not on a terminal: escape codes"; else ok "diff plain off a terminal"; fi
"$FXFUSE" diff $DATA/fusion_before.fxg $DATA/fusion_after.fxg --color=always >"$T/color"
grep -q $'\033\[31m- ' "$T/color" && grep -q $'\033\[32m+ ' "$T/color" && ok "diff --color=always" || bad "diff --color=always"
# Bad input: one line, exit 2.
expect_rc 2 "diff missing file: exit 2" "$FXFUSE" diff $DATA/nope.fxg $DATA/fusion_after.fxg
expect_rc 2 "diff without B or passes: exit 2" "$FXFUSE" diff $DATA/fusion_after.fxg
expect_rc 2 "diff unknown pass: exit 2" "$FXFUSE" diff $DATA/fusion_before.fxg --after-passes=no-such-pass
grep -q "unknown pass 'no-such-pass'" "$T/err" && ok "unknown pass message" || bad "unknown pass message: $(cat "$T/err")"

# diff IN --after-passes (the acceptance criterion): on the vLLM-shaped FP8 Llama, exactly the
# fused sites (63 + 1 + 32 + 32) plus the canonicalized leftovers, nothing else.
expect_rc 1 "diff --after-passes llama32" "$FXFUSE" diff tests/data/vllm/vllm_llama32_fp8_custom.post_grad.fxg.json \
  --after-passes=default --color=never
"$FILECHECK" --dump-input=fail <(cat <<'CHK'
; CHECK: 193 rewritten, 0 removed, 0 added
; CHECK-NEXT: 63x {{.*}}-> fused_add_rms_norm_quant
; CHECK-NEXT: 1x auto_functionalized(_C.fused_add_rms_norm) -> fused_add_rms_norm
; CHECK-NEXT: 1x {{.*}}-> rms_norm_quant
; CHECK-NEXT: 32x {{.*}}auto_functionalized(_C.silu_and_mul){{.*}}-> silu_and_mul_quant
; CHECK-NEXT: 32x {{.*}}auto_functionalized(vllm.unified_attention_with_output){{.*}}-> attention_quant
; CHECK-NEXT: 64x vllm.all_reduce -> all_reduce
; CHECK-EMPTY:
CHK
) <"$T/out" && ok "llama32 fused sites" || bad "llama32 fused sites"

# draw: DOT text, --shapes, rendering.
expect_rc 0 "draw .dot" "$FXFUSE" draw $DATA/fusion_after.fxg -o "$T/g.dot"
check "draw dot" $D/draw_dot.check <"$T/g.dot"
expect_rc 0 "draw --shapes" "$FXFUSE" draw $DATA/fusion_after.fxg -o "$T/s.dot" --shapes
check "draw shapes" $D/draw_shapes.check <"$T/s.dot"
# The DOT renders with Graphviz's dot, directly and through fxfuse.
if dot -Tsvg "$T/g.dot" -o "$T/direct.svg" && grep -q "</svg>" "$T/direct.svg"; then ok "dot renders the DOT"; else bad "dot renders the DOT"; fi
expect_rc 0 "draw .svg" "$FXFUSE" draw $DATA/fusion_after.fxg -o "$T/g.svg"
grep -q "<svg" "$T/g.svg" && grep -q "fxfuse.rms_norm_quant" "$T/g.svg" && ok "svg content" || bad "svg content"
expect_rc 0 "draw .png --after-passes" "$FXFUSE" draw tests/data/vllm/vllm_llama32_fp8_custom.post_grad.fxg.json \
  -o "$T/l.png" --after-passes=default
[[ "$(head -c 4 "$T/l.png" | tail -c 3)" == "PNG" ]] && ok "png magic" || bad "png magic"
expect_rc 0 "draw --side-by-side" "$FXFUSE" draw tests/data/vllm/vllm_fusion_native_static_eps1e-5.post_grad.fxg.json \
  -o "$T/sbs.dot" --side-by-side
grep -q "subgraph cluster_before" "$T/sbs.dot" && grep -q "subgraph cluster_after" "$T/sbs.dot" &&
  grep -q 'removed #1' "$T/sbs.dot" && grep -q 'new #1' "$T/sbs.dot" && ok "side by side" || bad "side by side"
dot -Tsvg "$T/sbs.dot" -o "$T/sbs.svg" && ok "side by side renders" || bad "side by side renders"
# Repeated layers are collapsed on a real model.
expect_rc 0 "draw llama32 collapsed" "$FXFUSE" draw tests/data/vllm/vllm_llama32_fp8_custom.post_grad.fxg.json -o "$T/l.dot"
n=$(grep -c 'label=<' "$T/l.dot")
times=$(printf '\xc3\x97')  # "×" in UTF-8, whatever the locale
[[ $n -lt 150 ]] && grep -qF "${times}31" "$T/l.dot" && ok "llama32 collapsed ($n boxes)" || bad "llama32 collapsed ($n boxes)"
expect_rc 2 "draw bad extension" "$FXFUSE" draw $DATA/fusion_after.fxg -o "$T/x.bmpx"

if [[ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]]; then cp "$T"/*.svg "$T"/*.png "$TEST_UNDECLARED_OUTPUTS_DIR"/ 2>/dev/null; fi
echo "$fails failed"
[[ $fails -eq 0 ]]
