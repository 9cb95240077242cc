#!/bin/bash
# One device call (docs/benchmarks/attention.md): GPU tests, our benchmark, the torch SDPA
# baseline and ncu summaries of one prefill and one decode launch. Run from the repository root
# on the GPU machine after unpacking stage_device.sh's archive into /tmp/attn:
#   mkdir -p /tmp/attn && tar -C /tmp/attn -xJf .device_attn/attn.tar.xz && kernels/attention/bench/device_run.sh
# Logs go to $OUT; a short summary is printed last.
set -uo pipefail
D=/tmp/attn
OUT=${OUT:-/tmp/attn_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$OUT/gpu.txt" 2>&1
timeout 90 "$D/attention_gpu_test" > "$OUT/gpu_test.log" 2>&1
test_rc=$?
echo "gpu test rc $test_rc" | tee "$OUT/summary.txt"
if [[ $test_rc -ne 124 && $test_rc -ne 137 ]]; then
  timeout 120 "$D/bench_attention" ${BENCH_ARGS:-} > "$OUT/bench_ours.jsonl" 2> "$OUT/bench_ours.err"
  echo "bench rc $?" | tee -a "$OUT/summary.txt"
fi
timeout 150 python3 kernels/attention/bench/bench_torch_sdpa.py ${BENCH_ARGS:-} > "$OUT/bench_torch.jsonl" 2> "$OUT/bench_torch.err"
echo "torch rc $?" | tee -a "$OUT/summary.txt"
if [[ $test_rc -ne 124 && $test_rc -ne 137 ]]; then
  timeout 75 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis -k regex:"prefillKernel|decodeKernel" -c 2 \
    "$D/bench_attention" --profile > "$OUT/ncu.txt" 2>&1
  echo "ncu rc $?" | tee -a "$OUT/summary.txt"
fi
tail -n 4 "$OUT/gpu_test.log"
grep -E "FAILED|failed|passed" "$OUT/gpu_test.log" | head -n 20
cat "$OUT/bench_ours.jsonl" 2>/dev/null | cut -c1-160
tail -n 3 "$OUT/bench_ours.err" "$OUT/bench_torch.err" 2>/dev/null
