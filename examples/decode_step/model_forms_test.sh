#!/usr/bin/env bash
# The whole-model decode graphs (tools/fixtures/decode_model.py) in vLLM's two spellings compile to one plan:
#  1. tiny config, both forms, bf16 and FP8 caches: `verify` passes on a decode batch and on
#     the default mixed batch (the CPU interpreter runs the paged-attention semantics);
#  2. the plans of both forms are the same step for step, except node names and the one
#     rounding vLLM's spellings really differ in (the variance of the residual sum: the CUDA
#     kernel's rounded bf16 sum, forward_native's fp32 sum);
#  3. the Llama-3.1-8B (32 layers) and 70B (80 layers) shapes compile, both forms, into plans
#     with one paged attention, four FP8 GEMMs and no generated kernel per layer (the rotary
#     runs in the cache write, on the q/k/v columns of the matmul before it: qkv_views_check.py)
#     and every norm/activation fused with its quant.
#
#   examples/decode_step/model_forms_test.sh PATH/fxfuse
set -euo pipefail
fx=$(realpath "$1")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

gen() {  # config form [layers]
  python3 tools/fixtures/decode_model.py --config "$1" --form "$2" ${3:+--layers "$3"} > "$tmp/$1_$2.fxg"
}

# The plan text without what may differ between spellings: the source path, node names, and
# the residual-variance rounding (checked separately).
normalized_plan() {
  grep -v '^source: \|^ *nodes: ' "$1" | sed 's/"unrounded_sum"\|"rounded_sum"/"<variance>"/'
}

for form in custom native; do
  gen tiny $form
  for kv in bf16 fp8; do
    out=$("$fx" verify "$tmp/tiny_$form.fxg" --kv-cache=$kv --kv-batch 4 --kv-query-len 1 --kv-context 37 -q 2>&1) \
      || fail "verify tiny $form --kv-cache=$kv (decode batch): $out"
    [[ $out == *PASS* ]] || fail "verify tiny $form --kv-cache=$kv printed no PASS: $out"
  done
  out=$("$fx" verify "$tmp/tiny_$form.fxg" --kv-cache=bf16 -q 2>&1) || fail "verify tiny $form (mixed batch): $out"
  [[ $out == *PASS* ]] || fail "verify tiny $form (mixed batch) printed no PASS: $out"
  echo "ok: tiny $form verifies (bf16 and fp8 caches, decode and mixed batches)"
done

for config in tiny llama8b llama70b; do
  [[ -f $tmp/${config}_custom.fxg ]] || { gen $config custom; gen $config native; }
  for form in custom native; do
    "$fx" compile "$tmp/${config}_$form.fxg" --kv-cache=bf16 --emit=plan-text -o "$tmp/${config}_$form.plan.txt" -q \
      || fail "compile $config $form"
  done
  if ! diff <(normalized_plan "$tmp/${config}_custom.plan.txt") <(normalized_plan "$tmp/${config}_native.plan.txt") \
      > "$tmp/diff.txt"; then
    cut -c1-240 "$tmp/diff.txt" | head -20
    fail "$config: the custom-op and native forms compile to different plans"
  fi
  rounded=$(grep -c '"rounded_sum"' "$tmp/${config}_custom.plan.txt" || true)
  unrounded=$(grep -c '"unrounded_sum"' "$tmp/${config}_native.plan.txt" || true)
  layers=$(grep -c 'rt.paged_attention"' "$tmp/${config}_custom.plan.txt" || true)
  case $config in tiny) want=2 ;; llama8b) want=32 ;; llama70b) want=80 ;; esac
  [[ $layers == "$want" ]] || fail "$config: $layers paged-attention steps, want one per layer ($want)"
  # every fused add+norm of the model: two per layer (the first layer's first norm has no add)
  [[ $rounded == $((2 * want)) && $unrounded == $((2 * want)) ]] \
    || fail "$config: residual variance rounded_sum x$rounded (custom), unrounded_sum x$unrounded (native), want $((2 * want)) each"
  desc=$("$fx" run "$tmp/${config}_custom.plan.txt" --describe)
  fp8_gemms=$(grep -c 'matmul .* fp8 ' <<< "$desc" || true)
  quants=$(grep -cE 'lib\.rms_norm_quant_fp8|lib\.silu_and_mul' <<< "$desc" || true)
  [[ $fp8_gemms == $((4 * want)) ]] || fail "$config: $fp8_gemms FP8 GEMMs, want $((4 * want))"
  # FP8 quants: in every layer the two norms and SiLU-mul are fused with theirs; the
  # attention's output quant is fused into the paged attention
  [[ $quants == $((3 * want)) ]] || fail "$config: $quants fused norm/activation quant steps, want $((3 * want))"
  grep -q 'rt.paged_attention' <<< "$desc" || fail "$config: no paged attention step"
  # generated kernels: the embedding only. Every layer's rotary is folded into its cache write
  # (one rt.reshape_and_cache step with the rotary operands; the write-back of the rotated q and
  # k into qkv and the q/k/v views cost no kernel of their own)
  generated=$(grep -c '^step .* gen\.' <<< "$desc" || true)
  [[ $generated == 1 ]] || fail "$config: $generated generated kernels, want 1 (the embedding)"
  folded=$(grep -c 'rotary + reshape_and_cache' "$tmp/${config}_custom.plan.txt" || true)
  [[ $folded == "$want" ]] || fail "$config: $folded cache writes with the rotary folded in, want one per layer ($want)"
  # ... and each of them on the q, k and v columns of the matmul right before it, as the q/k/v
  # GEMM's rotary epilogue needs (docs/runtime.md "GEMM epilogues")
  python3 examples/decode_step/qkv_views_check.py "$tmp/${config}_custom.plan.txt" "$want" > "$tmp/views.txt" \
    || fail "$(cat "$tmp/views.txt")"
  ! grep -qE 'quant_fp8 |static_scaled_fp8_quant' <<< "$(grep -v 'lib\.' <<< "$desc")" \
    || fail "$config: an unfused FP8 quant step is left"
  echo "ok: $config: both forms, one plan ($want layers, $fp8_gemms FP8 GEMMs, $(grep -c '^step' <<< "$desc") steps)"
done
