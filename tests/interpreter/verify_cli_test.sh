#!/bin/bash
# fxfuse verify through the CLI: exit codes 0 (match), 1 (mismatch), 2 (bad input);
# deliberately wrong rewrites (Gemma's x*(1+w) as x*w, a quant without its reciprocal, an
# output buffer never written) must fail; correct ones must pass.
# Args: FXFUSE DATA_DIR FIXTURES_DIR
set -u
FX="$1"; D="$2"; FIX="$3"
fails=0
expect() {  # expect RC DESCRIPTION -- command...
  local want="$1" what="$2"; shift 3
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAIL: $what: exit $rc, expected $want"; echo "$out" | sed 's/^/    /'; fails=$((fails+1))
  else
    echo "ok: $what (exit $rc)"
  fi
  LAST="$out"
}
expect 1 "gemma x*(1+w) rewritten as x*w" -- "$FX" verify "$D/gemma_ref.fxg" --against "$D/gemma_wrong.fxg"
expect 0 "gemma rewritten correctly" -- "$FX" verify "$D/gemma_ref.fxg" --against "$D/gemma_right.fxg"
expect 1 "quant with the reciprocal dropped" -- "$FX" verify "$D/quant_ref.fxg" --against "$D/quant_wrong.fxg"
expect 0 "quant canonicalized" -- "$FX" verify "$D/quant_ref.fxg" --against "$D/quant_canonical.fxg"
expect 0 "divide instead of reciprocal: within one FP8 step" -- "$FX" verify "$D/quant_ref.fxg" --against "$D/quant_divide.fxg"
expect 0 "an extra bf16 rounding before FP8: one step on a few elements" -- "$FX" verify "$D/quant_f32.fxg" --against "$D/quant_f32_via_bf16.fxg"
echo "$LAST" | grep -q "differ by <= 1 fp8 step" || { echo "FAIL: expected one-step FP8 differences"; fails=$((fails+1)); }
expect 1 "... rejected with --fp8-frac 0" -- "$FX" verify "$D/quant_f32.fxg" --against "$D/quant_f32_via_bf16.fxg" --fp8-frac 0
expect 1 "... rejected with --fp8-steps 0" -- "$FX" verify "$D/quant_f32.fxg" --against "$D/quant_f32_via_bf16.fxg" --fp8-steps 0
expect 1 "output buffer never written (NaN poison)" -- "$FX" verify "$D/quant_ref.fxg" --against "$D/unwritten.fxg"
echo "$LAST" | grep -q "NaN where the reference has numbers" || { echo "FAIL: no unwritten-memory note"; fails=$((fails+1)); }
expect 2 "shape contradiction" -- "$FX" verify "$D/contradiction.fxg" --against "$D/contradiction.fxg"
echo "$LAST" | grep -q "node 'weighted'" || { echo "FAIL: the error does not name the node"; fails=$((fails+1)); }
expect 2 "--bind of an unknown symbol" -- "$FX" verify "$D/quant_ref.fxg" --bind s9=3
expect 2 "malformed --bind" -- "$FX" verify "$D/quant_ref.fxg" --bind s0
expect 2 "missing file" -- "$FX" verify "$D/no_such_file.fxg"
expect 0 "--bind overrides the hint" -- "$FX" verify "$D/quant_ref.fxg" --against "$D/quant_canonical.fxg" --bind s0=37
echo "$LAST" | grep -q "s0=37 (--bind)" || { echo "FAIL: binding not reported"; fails=$((fails+1)); }
# Compile mode on real fixtures (default pipeline, and the all-reduce fusions at TP=2).
expect 0 "compile: vLLM native static FP8" -- "$FX" verify "$FIX/vllm/vllm_fusion_native_static_eps1e-5.post_grad.fxg.json"
expect 0 "compile: vLLM all-reduce FP8 at TP=2" -- "$FX" verify "$FIX/vllm/vllm_allreduce_fp8_custom.post_grad.fxg.json" --world-size=2
echo "$LAST" | grep -q "all_reduce_rms_norm_quant=3" || { echo "FAIL: expected 3 all_reduce_rms_norm_quant fusions"; fails=$((fails+1)); }
expect 0 "compile: named passes" -- "$FX" verify "$FIX/vllm/vllm_silu_quant_native.post_grad.fxg.json" --passes=functionalize,noop-elimination,canonicalize-ops,canonicalize-activation
if [ "$fails" != 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all verify CLI checks passed"
