#!/bin/bash
# One device call (docs/benchmarks/attention.md): GPU tests, our benchmark, the torch SDPA
# baseline, two plans that pick the sm90 kernels (fxfuse run --compare-cpu) and ncu summaries of
# one prefill launch and one launch of each decode kernel. Run from the repository root on the
# GPU machine after unpacking stage_device.sh's archive into /tmp/attn:
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
# The paged kernel over dense decode caches (the runtime's route of one-token decode).
timeout 60 "$D/paged_attention_gpu_test" "paged attention over a dense*" >> "$OUT/gpu_test.log" 2>&1
echo "dense view gpu test rc $?" | tee -a "$M"
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
# One-token decode over a dense cache against the interpreter: the split-KV decode kernel, then
# the runtime's paged route (FXFUSE_DENSE_DECODE=paged).
for route in split paged; do
  for bind in "--bind s0=4 --bind s1=1000" "--bind s0=1 --bind s1=4099"; do
    echo "===== tests/plans/dense_decode.fxg $bind FXFUSE_DENSE_DECODE=$route" >> "$OUT/plan.log"
    FXFUSE_DENSE_DECODE=$route LD_LIBRARY_PATH=$D/lib timeout 60 "$D/fxfuse" run tests/plans/dense_decode.fxg \
      --device=cuda --compare-cpu --seed 1 $bind >> "$OUT/plan.log" 2>&1
    echo "plan dense_decode $bind $route rc $?" | tee -a "$M"
  done
done
if [[ $test_rc -ne 124 && $test_rc -ne 137 ]]; then
  for k in prefillKernel decodeKernel pagedAttentionMmaKernel; do
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
