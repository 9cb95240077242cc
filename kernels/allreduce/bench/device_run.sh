#!/bin/bash
# One device call on a single H200 (see docs/allreduce.md): the GPU test of the fused kernels on
# simulated ranks, the benchmark on 2, 4 and 8 simulated ranks, and the world-size-1 run of the
# multi-GPU benchmark (C++ driver with NCCL + the PyTorch baseline). Logs and JSON in $OUT.
set -uo pipefail
cd "$(dirname "$0")"
OUT="${OUT:-/tmp/allreduce_out}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
start=$(date +%s)
[ "${SKIP_TEST:-0}" = 1 ] || timeout "${TEST_TIMEOUT:-150}" ./all_reduce_rms_norm_gpu_test --durations yes > "$OUT/gpu_test.log" 2>&1
echo "GPU test rc=$? in $(( $(date +%s) - start )) s: $(grep -E 'All tests passed|test cases' "$OUT/gpu_test.log" | tail -n 1)"
[ "${TEST_ONLY:-0}" = 1 ] && exit 0
for n in ${SIM_RANKS:-2 4 8}; do
  s=$(date +%s)
  timeout 60 ./bench_all_reduce_rms_norm --sim-ranks "$n" --reps 20 --out "$OUT/sim_ws$n.json" \
    --markdown "$OUT/sim_ws$n.md" > "$OUT/sim_ws$n.log" 2>&1
  echo "sim $n rc=$? in $(( $(date +%s) - s )) s"
done
python3 make_table.py "$OUT"/sim_ws*.json > "$OUT/simulated.md" 2>> "$OUT/make_table.log"
s=$(date +%s)
OUT="$OUT" BENCH_ARGS="--reps 20" TORCH_ARGS="--reps 20" timeout "${WS1_TIMEOUT:-150}" ./run_multigpu.sh 1 . > "$OUT/ws1.log" 2>&1
echo "world size 1 rc=$? in $(( $(date +%s) - s )) s"
tail -n 40 "$OUT/ws1.log"
# Few files come back from the device tool: everything also in one archive.
tar -C "$OUT" -czf /tmp/allreduce_results.tar.gz --exclude results.tar.gz . && mv /tmp/allreduce_results.tar.gz "$OUT/results.tar.gz"
