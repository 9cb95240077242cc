#!/bin/bash
# Runs every GPU test binary in .device/ on the GPU machine, in parallel (the fused test split by
# test case), and prints one summary line per process. Logs go to $OUT/gpu_tests.log.
# Exit status: 0 when all passed.
set -uo pipefail
cd "$(dirname "$0")"
LOG="${OUT:-/tmp}/gpu_tests.log"
: > "$LOG"
declare -A runs=(
  [rms_norm]="./rms_norm_gpu_test"
  [quant_fp8]="./quant_fp8_gpu_test"
  [fused_static]="./rms_norm_quant_fp8_gpu_test 'rms_norm + static*'"
  [fused_per_token]="./rms_norm_quant_fp8_gpu_test 'rms_norm + dynamic per-token*'"
  [fused_per_group]="./rms_norm_quant_fp8_gpu_test 'rms_norm + per-group*'"
  [fused_options]="./rms_norm_quant_fp8_gpu_test 'fused kernels*'"
  [silu_and_mul]="./silu_and_mul_gpu_test"
)
start=$(date +%s)
for name in "${!runs[@]}"; do
  (eval "${runs[$name]} --durations yes" > "/tmp/gpu_test_$name.log" 2>&1; echo $? > "/tmp/gpu_test_$name.rc") &
done
wait
status=0
for name in $(echo "${!runs[@]}" | tr ' ' '\n' | sort); do
  rc=$(cat "/tmp/gpu_test_$name.rc")
  summary=$(grep -E "All tests passed|test cases:" "/tmp/gpu_test_$name.log" | tail -n 1)
  echo "[$name] rc=$rc $summary"
  { echo "===== $name (rc=$rc)"; cat "/tmp/gpu_test_$name.log"; } >> "$LOG"
  [ "$rc" = "0" ] || status=1
done
echo "GPU tests: $([ $status = 0 ] && echo PASSED || echo FAILED) in $(( $(date +%s) - start )) s"
exit $status
