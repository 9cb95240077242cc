#!/bin/bash
# One device call (docs/benchmarks/attention.md): GPU tests, our benchmark, the torch SDPA
# baseline, two plans that pick the sm90 kernels (fxfuse run --compare-cpu) and ncu summaries of
# one prefill and one decode launch. Run from the repository root on the GPU machine after
# unpacking stage_device.sh's archive into /tmp/attn:
#   mkdir -p /tmp/attn && tar -C /tmp/attn -xJf .device_attn/attn.tar.xz && kernels/attention/bench/device_run.sh
# Six files go to $OUT; a short summary is printed last.
set -uo pipefail
D=/tmp/attn
OUT=${OUT:-/tmp/attn_out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
M="$OUT/misc.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$M" 2>&1
timeout 90 "$D/attention_gpu_test" > "$OUT/gpu_test.log" 2>&1
test_rc=$?
echo "gpu test rc $test_rc" | tee -a "$M"
if [[ $test_rc -ne 124 && $test_rc -ne 137 ]]; then
  timeout 120 "$D/bench_attention" > "$OUT/bench_ours.jsonl" 2>> "$M"
  echo "bench rc $?" | tee -a "$M"
fi
timeout 150 python3 kernels/attention/bench/bench_torch_sdpa.py > "$OUT/bench_torch.jsonl" 2>> "$M"
echo "torch rc $?" | tee -a "$M"
# Plans that pick the sm90 kernels, against the CPU interpreter (s0 = 300: several tiles).
for g in tests/plans/attention_select.fxg tests/plans/decoder_fp8.fxg; do
  echo "===== $g" >> "$OUT/plan.log"
  LD_LIBRARY_PATH=$D/lib timeout 60 "$D/fxfuse" run "$g" --device=cuda --compare-cpu --seed 1 --bind s0=300 \
    >> "$OUT/plan.log" 2>&1
  echo "plan $g rc $?" | tee -a "$M"
done
if [[ $test_rc -ne 124 && $test_rc -ne 137 ]]; then
  for k in prefillKernel decodeKernel; do
    timeout 60 ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats -k regex:$k -c 1 \
      "$D/bench_attention" --profile >> "$OUT/ncu.txt" 2>&1
    echo "ncu $k rc $?" | tee -a "$M"
  done
fi
grep -E "passed|failed" "$OUT/gpu_test.log" | tail -n 3
grep -B3 -A12 "FAILED" "$OUT/gpu_test.log" | head -n 40
tail -n 8 "$OUT/plan.log" | cut -c1-300
cut -c1-150 "$OUT/bench_ours.jsonl" 2>/dev/null
