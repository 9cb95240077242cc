#!/bin/bash
# Everything the plans work runs on the H200, in one device call of at most ~5 minutes on GPU 0
# (logs into $OUT, six files; the device tool returns at most eight):
#   1. GPU parity: plan vs CPU interpreter, fused and unfused, on tests/plans and the torch
#      2.11 fixtures, JOBS at a time (a run whose outputs differ passes by its node-by-node
#      proof; every run's log is in parity_full.log)             -> parity.txt, parity_full.log
#   2. the build-time-compiled example (examples/decoder_fp8), and the Session replay
#      test (tests/runtime/session_replay_gpu_test) and the index checks (index_check_gpu_test) where the bundle has them -> misc.txt
#   3. optional: per-kernel times of the decoder-layer plan under ncu (NCU_TOKENS="8 64")
#                                                                 -> misc.txt
#   4. the decoder-layer benchmark at T in TOKENS: fxfuse (GEMM algorithms tuned) and
#      fxfuse-heuristic (--no-gemm-tune, the baseline of the tuning) vs torch eager and
#      torch.compile default, each per call and in a CUDA graph; max-autotune only when
#      MAX_AUTOTUNE_BUDGET > 0 (seconds; at T=1 only; docs/benchmarks/decoder_layer.md says why)
#                                                    -> bench.txt, decoder_layer.json, _table.md
# Budgets (seconds, env): PARITY_BUDGET=100, EXAMPLE_BUDGET=30, NCU_BUDGET=20 (per T),
# BENCH_BUDGET=140 (torch.compile stops starting new shapes 25 s before it),
# MAX_AUTOTUNE_BUDGET=0; JOBS=14, PARITY_TIMEOUT=60 (per run), TOKENS=1,8,64,512,4096;
# SKIP_PARITY=1 / SKIP_BENCH=1 leave those parts out.
# --describe prints the plan of parts and budgets and exits (no GPU, no bundle needed).
# Run tests/runtime/stage_device.sh here first; then, on the device:
#   bash tests/runtime/device_final.sh            (carry: [".device_rt"])
set -uo pipefail
PARITY_BUDGET=${PARITY_BUDGET:-100}
EXAMPLE_BUDGET=${EXAMPLE_BUDGET:-30}
NCU_BUDGET=${NCU_BUDGET:-20}
NCU_TOKENS=${NCU_TOKENS:-}
BENCH_BUDGET=${BENCH_BUDGET:-140}
MAX_AUTOTUNE_BUDGET=${MAX_AUTOTUNE_BUDGET:-0}
TOKENS=${TOKENS:-1,8,64,512,4096}
JOBS=${JOBS:-14}
PARITY_TIMEOUT=${PARITY_TIMEOUT:-60}
MODES=fxfuse,fxfuse-heuristic,eager,default
[[ $MAX_AUTOTUNE_BUDGET -gt 0 ]] && MODES+=,max-autotune
ncu_total=0
for _ in $NCU_TOKENS; do ncu_total=$((ncu_total + NCU_BUDGET)); done
TOTAL=$((10 + EXAMPLE_BUDGET + ncu_total))
[[ ${SKIP_PARITY:-0} == 1 ]] || TOTAL=$((TOTAL + PARITY_BUDGET + 15))
[[ ${SKIP_BENCH:-0} == 1 ]] || TOTAL=$((TOTAL + BENCH_BUDGET + MAX_AUTOTUNE_BUDGET))

# GRAPH::FLAGS entries run with those compile flags (gpu_parity.sh): the vLLM attention
# fixtures served from a paged KV cache (bf16 cache; FP8 cache with the FP8 output fusion).
KV_GRAPHS=(tests/data/vllm/vllm_attn_quant_custom.post_grad.fxg.json::--kv-cache=bf16
           tests/data/vllm/vllm_attn_quant_native.post_grad.fxg.json::--kv-cache=fp8)
GRAPHS=(tests/plans/*.fxg tests/data/vllm/*.post_grad.fxg.json tests/data/hf/*.post_grad.fxg.json
        tests/data/hf/*.core_aten.fxg.json tests/data/hf/*.train_ir.pt2 "${KV_GRAPHS[@]}")
if [[ ${1:-} == --describe ]]; then
  n=0
  for f in "${GRAPHS[@]}"; do [[ -e ${f%%::*} ]] && n=$((n + 1)); done
  echo "parity: $n graphs x {fused, unfused}, $JOBS at a time, ${PARITY_TIMEOUT}s per run, budget ${PARITY_BUDGET}s$([[ ${SKIP_PARITY:-0} == 1 ]] && echo ' (skipped)')"
  echo "example: decoder_example 64, budget ${EXAMPLE_BUDGET}s"
  echo "ncu: T in {${NCU_TOKENS:-none}}, ${NCU_BUDGET}s each"
  echo "bench: T in {$TOKENS}, modes $MODES, budget $((BENCH_BUDGET + MAX_AUTOTUNE_BUDGET))s$([[ ${SKIP_BENCH:-0} == 1 ]] && echo ' (skipped)')"
  echo "worst case total: ${TOTAL}s (+ unpacking)"
  exit 0
fi

OUT=${OUT:-/tmp/fxfuse_out}
mkdir -p "$OUT"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}   # GPU 0 of whatever machine
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s)
D=/tmp/fxrt
# shellcheck source=tests/runtime/device_bundle.sh
source tests/runtime/device_bundle.sh
unpack_bundle "$D" || { echo "no bundle: run tests/runtime/stage_device.sh first" | tee "$OUT/misc.txt"; exit 2; }
export FXFUSE_CACHE_DIR=/tmp/fxfuse_kernel_cache
{
  echo "== environment"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
  echo "bundle built from:"; cat "$D/STAGED_FROM" 2>/dev/null
  "$D/fxfuse" run tests/plans/decoder_fp8.fxg --describe | tail -3
} 2>&1 | tee "$OUT/misc.txt"

if [[ ${SKIP_PARITY:-0} != 1 ]]; then
  echo "== parity" | tee "$OUT/parity.txt"
  # Runs not started by the deadline are reported as skipped; the outer timeout is a backstop.
  JOBS=$JOBS PARITY_TIMEOUT=$PARITY_TIMEOUT PARITY_DEADLINE=$(( $(date +%s) + PARITY_BUDGET )) LOG="$OUT/parity_full.log" \
    timeout "$((PARITY_BUDGET + 15))" bash tests/runtime/gpu_parity.sh "$D/fxfuse" "${GRAPHS[@]}" 2>&1 | tee -a "$OUT/parity.txt"
  echo "parity exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 ))s" | tee -a "$OUT/parity.txt"
fi

echo "== example" | tee -a "$OUT/misc.txt"
timeout "$EXAMPLE_BUDGET" "$D/decoder_example" 64 2>&1 | tee -a "$OUT/misc.txt"
echo "example exit ${PIPESTATUS[0]}" >> "$OUT/misc.txt"
if [[ -x $D/session_replay_gpu_test ]]; then  # Session::replay after inputs change
  timeout 60 "$D/session_replay_gpu_test" 2>&1 | tail -3 | tee -a "$OUT/misc.txt"
  echo "session replay test exit ${PIPESTATUS[0]}" >> "$OUT/misc.txt"
fi
if [[ -x $D/index_check_gpu_test ]]; then  # a bad index read refused naming the node
  timeout 60 "$D/index_check_gpu_test" 2>&1 | tail -3 | tee -a "$OUT/misc.txt"
  echo "index check test exit ${PIPESTATUS[0]}" >> "$OUT/misc.txt"
fi

# Where the layer's time goes: each kernel of the plan once under ncu (duration only).
if [[ -n $NCU_TOKENS ]]; then
  echo "== kernel times" | tee -a "$OUT/misc.txt"
  "$D/fxfuse" compile examples/decoder_layer/llama8b_decoder_fp8.fxg --emit=plan -o /tmp/layer.plan.pb -q
  for T in $NCU_TOKENS; do
    echo "-- T=$T" >> "$OUT/misc.txt"
    timeout "$NCU_BUDGET" "$(command -v ncu || echo /usr/local/cuda/bin/ncu)" --metrics gpu__time_duration.sum --csv \
      "$D/fxfuse" bench /tmp/layer.plan.pb --device=cuda --bind "s0=$T" --iters 1 --warmup 1 --no-graph 2>&1 |
      grep -E '^"' >> "$OUT/misc.txt"
  done
fi
if [[ ${SKIP_BENCH:-0} != 1 ]]; then
  echo "== bench (after $(( $(date +%s) - t0 ))s)" | tee "$OUT/bench.txt"
  extra=()
  [[ $MAX_AUTOTUNE_BUDGET -gt 0 ]] && extra=(--max-autotune-tokens 1)
  PYTHONUNBUFFERED=1 TORCHINDUCTOR_COMPILE_THREADS=16 timeout "$((BENCH_BUDGET + MAX_AUTOTUNE_BUDGET))" \
    python3 examples/decoder_layer/bench_decoder_layer.py --fxfuse "$D/fxfuse" --out "$OUT" --tokens "$TOKENS" \
    --modes "$MODES" --deadline-s "$((BENCH_BUDGET + MAX_AUTOTUNE_BUDGET - 25))" "${extra[@]}" 2>&1 | tee -a "$OUT/bench.txt"
  cat "$OUT/decoder_layer_table.md" 2>/dev/null
fi
echo "device_final.sh done after $(( $(date +%s) - t0 ))s" | tee -a "$OUT/misc.txt"
