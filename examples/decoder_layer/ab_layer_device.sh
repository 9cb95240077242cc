#!/bin/bash
# One device call comparing two builds of fxfuse on the decoder layer (examples/decoder_layer,
# issue #18): the tree's fxfuse against an older one packed as fxfuse_old. In order of what a
# change must show first:
#   1. the GPU tests of the layer's runtime kernels that the bundle has (rotary cache write,
#      SiLU-and-mul, the small-M GEMM's gated-SiLU epilogue, RMSNorm [+ FP8]), and with ROW_SWEEP=1 the layer's
#      row kernels at T = 1, 8, 64 in every launch shape (bench_kernels --sweep) -> kernel_tests.txt
#   2. the layer's kernels under ncu at T in LAYER_TOKENS, fxfuse_old then fxfuse
#      (examples/decode_step/kernel_breakdown.py --layer-tokens, --torch-mode none)
#                                                              -> breakdown_old.txt, breakdown_new.txt
#   3. GPU parity of the new build (tests/runtime/device_final.sh, PARITY_BUDGET) and then, if
#      fewer than TABLE_AFTER seconds have gone, the decoder-layer table of the new build
#      against torch eager and torch.compile                   -> parity.txt, bench.txt, table.md
#
#   AB_BASELINE=/path/to/old/fxfuse tests/runtime/stage_device.sh   # here: builds and packs both
#   device: carry [".device_rt"], run `OUT=$OUT bash examples/decoder_layer/ab_layer_device.sh`
#
# Env: LAYER_TOKENS (64,4096), PARITY_BUDGET (100 s), TABLE_AFTER (300 s), TOKENS (the table's
# T, 1,8,64,512,4096), BENCH_BUDGET (140 s). Writes at most seven files to $OUT.
set -u
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-/tmp/ab_layer_out}
mkdir -p "$OUT"
t0=$(date +%s)
D=/tmp/fxrt
# shellcheck source=tests/runtime/device_bundle.sh
source tests/runtime/device_bundle.sh
unpack_bundle "$D" || { echo "no bundle: run AB_BASELINE=... tests/runtime/stage_device.sh" > "$OUT/kernel_tests.txt"; exit 2; }
[[ -x $D/fxfuse_old ]] || { echo "the bundle has no fxfuse_old: stage it with AB_BASELINE" > "$OUT/kernel_tests.txt"; exit 2; }
export FXFUSE_CACHE_DIR=/tmp/fxfuse_kernel_cache

{ echo "bundle built from:"; cat "$D/STAGED_FROM"; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader
  for t in rotary_cache_write_gpu_test silu_and_mul_gpu_test small_m_fp8_gated_silu_gpu_test rms_norm_gpu_test \
    rms_norm_quant_fp8_gpu_test; do
    [[ -x $D/$t ]] || continue
    timeout 120 "$D/$t" 2>&1 | tail -3; echo "$t exit ${PIPESTATUS[0]}"
  done
  if [[ ${ROW_SWEEP:-0} == 1 && -x $D/bench_kernels ]]; then
    timeout 90 "$D/bench_kernels" --kernels fused_add_rms_norm_quant_fp8_static,silu_and_mul_quant_fp8_static \
      --tokens 1,8,64 --hidden 4096,14336 --sweep; echo "bench_kernels exit $?"
  fi; } > "$OUT/kernel_tests.txt" 2>&1
grep exit "$OUT/kernel_tests.txt"

for side in old new; do
  bin=$D/fxfuse; [[ $side == old ]] && bin=$D/fxfuse_old
  mkdir -p "/tmp/breakdown_$side"
  timeout 150 python3 examples/decode_step/kernel_breakdown.py --fxfuse "$bin" --layer-tokens "${LAYER_TOKENS:-64,4096}" \
    --torch-mode none --out "/tmp/breakdown_$side" > "/tmp/breakdown_$side/log.txt" 2>&1
  echo "exit $?" >> "/tmp/breakdown_$side/log.txt"
  cat "/tmp/breakdown_$side/breakdown.txt" "/tmp/breakdown_$side/log.txt" > "$OUT/breakdown_$side.txt" 2>/dev/null
  echo "breakdown $side after $(( $(date +%s) - t0 ))s: $(tail -1 "/tmp/breakdown_$side/log.txt")"
done

skip_bench=0
[[ $(( $(date +%s) - t0 + ${PARITY_BUDGET:-100} )) -gt ${TABLE_AFTER:-300} ]] && skip_bench=1
mkdir -p /tmp/final_out
OUT=/tmp/final_out SKIP_BENCH=$skip_bench PARITY_BUDGET=${PARITY_BUDGET:-100} EXAMPLE_BUDGET=5 \
  TOKENS=${TOKENS:-1,8,64,512,4096} BENCH_BUDGET=${BENCH_BUDGET:-140} bash tests/runtime/device_final.sh > /dev/null 2>&1
cp /tmp/final_out/parity.txt "$OUT/parity.txt" 2>/dev/null
cp /tmp/final_out/bench.txt "$OUT/bench.txt" 2>/dev/null
cp /tmp/final_out/decoder_layer_table.md "$OUT/table.md" 2>/dev/null
cp /tmp/final_out/decoder_layer.json "$OUT/decoder_layer.json" 2>/dev/null
tail -1 "$OUT/parity.txt" 2>/dev/null
[[ $skip_bench == 1 ]] && echo "table skipped: past TABLE_AFTER"
cat "$OUT/table.md" 2>/dev/null
echo "ab_layer_device.sh done after $(( $(date +%s) - t0 ))s"
