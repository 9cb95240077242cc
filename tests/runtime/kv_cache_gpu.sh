#!/bin/bash
# Paged KV-cache plans on the GPU (H100/H200): the kernel test of kernels/runtime/paged_attention
# against its float64 reference, then kv-cache plans (`compile --kv-cache=...`) run with
# `fxfuse run PLAN --compare-cpu` on several serving batches (the CPU interpreter gets the same
# batch and inputs; the mutated caches are outputs and compared too), the graph path with the
# node-by-node proof, a CUDA-graph replay (`bench`), and the tiny whole-model decode graphs
# of examples/decode_step in both vLLM forms. Prints one line per check and
# "N passed, M failed" last; logs under $OUT (or a temp dir).
#   bazel build //:fxfuse //tests/kernels:paged_attention_gpu_test //tests/kernels:rotary_cache_write_gpu_test
#   tests/runtime/kv_cache_gpu.sh [FXFUSE] [PAGED_ATTENTION_GPU_TEST] [ROTARY_CACHE_WRITE_GPU_TEST]   # on the GPU
set -uo pipefail
cd "$(dirname "$0")/../.."
FXFUSE=${1:-bazel-bin/fxfuse}
KERNEL_TEST=${2:-bazel-bin/tests/kernels/paged_attention_gpu_test}
ROTARY_TEST=${3:-bazel-bin/tests/kernels/rotary_cache_write_gpu_test}
for b in "$FXFUSE" "$KERNEL_TEST" "$ROTARY_TEST"; do  # on the device: the bundle's wrappers, as device_run.sh passes them
  [[ -x $b ]] || { echo "kv_cache_gpu.sh: $b is not an executable (pass FXFUSE, PAGED_ATTENTION_GPU_TEST, ROTARY_CACHE_WRITE_GPU_TEST)"; exit 2; }
done
LOGDIR=${OUT:-$(mktemp -d)}
mkdir -p "$LOGDIR" || { echo "kv_cache_gpu.sh: cannot create the log directory $LOGDIR"; exit 2; }
tmp=$(mktemp -d)
passed=0; failed=0
check() {  # NAME COMMAND...: runs the command, logs it, counts it; returns 1 when it failed
  local name=$1; shift
  local log="$LOGDIR/kv_$(echo "$name" | tr -c 'A-Za-z0-9._-' '_').log"
  local start=$(date +%s)
  if "$@" > "$log" 2>&1; then
    echo "PASS $name ($(( $(date +%s) - start ))s)"; passed=$((passed + 1))
  else
    echo "FAIL $name (rc $?, $(( $(date +%s) - start ))s)"; failed=$((failed + 1)); tail -20 "$log" | cut -c1-300
    return 1
  fi
}

check "kernel test" "$KERNEL_TEST"
check "rotary cache-write kernel test" "$ROTARY_TEST"

# GRAPH|CACHE: a graph and the cache dtype it is served with.
SERVED=(tests/plans/paged_attention.fxg\|bf16
        tests/plans/paged_attention.fxg\|fp8
        tests/plans/paged_attention_rotary.fxg\|bf16
        tests/plans/paged_attention_rotary.fxg\|fp8
        tests/plans/paged_attention_rotary_other_heads.fxg\|bf16
        tests/data/vllm/vllm_attn_quant_custom.post_grad.fxg.json\|bf16
        tests/data/vllm/vllm_attn_quant_custom.post_grad.fxg.json\|fp8
        tests/data/vllm/vllm_attn_quant_native.post_grad.fxg.json\|fp8)
# Serving batches (the interpreter's kv batch options): its default (decode rows of varied,
# block-boundary contexts plus one prefill), decode-only, chunked prefill, prefill-only.
BATCHES=("" "--kv-query-len=1 --kv-context=33" "--kv-batch=3 --kv-query-len=2 --kv-context=40"
         "--kv-batch=1 --kv-query-len=8 --kv-context=8")
for entry in "${SERVED[@]}"; do
  g=${entry%|*}; cache=${entry#*|}
  plan="$tmp/$(basename "$g").$cache.plan.pb"
  check "compile $g --kv-cache=$cache" "$FXFUSE" compile "$g" --kv-cache="$cache" --emit=plan -o "$plan" -q || continue
  for b in "${BATCHES[@]}"; do
    # shellcheck disable=SC2086
    check "run plan $(basename "$g") $cache ${b:-default batch}" "$FXFUSE" run "$plan" --compare-cpu --seed 1 --strict $b
  done
  check "run graph $(basename "$g") $cache (node proof when outputs differ)" \
    "$FXFUSE" run "$g" --kv-cache="$cache" --compare-cpu --seed 2
  check "bench $(basename "$g") $cache (CUDA graph replay)" "$FXFUSE" bench "$plan" --warmup 2 --iters 20
done
# The whole tiny Llama model (tools/fixtures/decode_model.py) in both of vLLM's forms:
# decode batches whose 300-token contexts the paged attention splits into chunks, FP8 and
# bf16 caches, and the default mixed batch (the FP8 GEMMs round differently from the CPU, so
# the node proof decides), then a CUDA-graph decode step of 8 sequences over 1000 tokens.
for form in custom native; do
  g="$tmp/tiny_$form.fxg"
  python3 tools/fixtures/decode_model.py --config tiny --form "$form" > "$g" || { failed=$((failed + 1)); continue; }
  for cache in bf16 fp8; do
    check "run tiny model ($form) $cache decode 4x300" \
      "$FXFUSE" run "$g" --kv-cache="$cache" --compare-cpu --kv-batch 4 --kv-query-len 1 --kv-context 300
  done
  check "run tiny model ($form) bf16 default batch" "$FXFUSE" run "$g" --kv-cache=bf16 --compare-cpu
  # The own small-M GEMMs everywhere, so the gate/up GEMMs take their SiLU steps and the q/k/v
  # GEMMs their rotary cache writes as epilogues (docs/runtime.md "GEMM epilogues"): the run
  # must say it fused them and still agree, with both caches.
  for cache in bf16 fp8; do
    check "run tiny model ($form) $cache decode 4x300 with GEMM epilogues" bash -c \
      'out=$(FXFUSE_OWN_GEMM=always FXFUSE_GEMM_EPILOGUE=all "$0" run "$1" --kv-cache="$2" --compare-cpu --kv-batch 4 --kv-query-len 1 \
         --kv-context 300 2>&1); rc=$?; echo "$out"; [[ $rc -eq 0 ]] &&
       grep -q "^GEMM epilogues .*: 2 SiLU.*, 2 rotary cache writes" <<< "$out"' \
      "$FXFUSE" "$g" "$cache"
  done
  check "bench tiny model ($form) decode 8x1000" \
    "$FXFUSE" bench "$g" --kv-cache=bf16 --kv-batch 8 --kv-query-len 1 --kv-context 1000 --warmup 2 --iters 20
  # What-if timing: every step in exactly one left-out group, each replay without a group timed.
  check "bench --ablate tiny model ($form) decode 8x1000" bash -c \
    '"$0" bench "$1" --kv-cache=bf16 --kv-batch 8 --kv-query-len 1 --kv-context 1000 --warmup 2 --iters 10 \
       --ablate 5 --json "$2" && "$0" compile "$1" --kv-cache=bf16 --emit=plan-text -o "$2.plan.txt" -q &&
     python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
steps = open(sys.argv[2]).read().count(\"\nsteps {\") + open(sys.argv[2]).read().startswith(\"steps {\")
a = r[\"ablation\"]
rows = a[\"groups\"]
assert sum(x[\"steps\"] for x in rows) == steps, (steps, rows)
assert all(0 < x[\"without_us\"] < 10 * r[\"median_us\"] for x in rows), rows
assert 0 < a[\"before_us\"] < 10 * r[\"median_us\"] and 0 < a[\"after_us\"] < 10 * r[\"median_us\"], a
assert any(x[\"what\"] == \"rt.paged_attention\" and x[\"steps\"] == 2 for x in rows), rows
print(len(rows), \"groups,\", steps, \"steps\")
" "$2" "$2.plan.txt"' "$FXFUSE" "$g" "$tmp/ablate_$form.json"
done
rm -rf "$tmp"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
