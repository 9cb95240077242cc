#!/bin/bash
# Issue #10 on a machine with 2 H200s of one host, in ONE device call, inside 8 minutes; every
# log under $OUT. Stage first (here): tests/multigpu/stage.sh; then on the device:
#   bash tests/multigpu/run_x2.sh                    (carry: [".device_mg"])
#   1. the machine: GPUs, `nvidia-smi topo -m`, peer access both ways, NVLink multicast off
#   2. TP=2 parity: `fxfuse run --world-size 2 --compare-cpu` on the TP FP8 Llama graphs, each
#      rank against its lockstep CPU reference, with the fused kernels forced (oneshot,
#      twoshot), the thresholds table (auto) and the NCCL fallback forced (nccl), plus the
#      unfused plan (NCCL collective steps) and the error paths (a rank killed, a world size
#      larger than the machine)
#   3. the kernel benchmark of issue #10 (kernels/allreduce/bench/run_multigpu.sh 2), when staged
# Budgets (seconds, env): PARITY_BUDGET (220), BENCH_BUDGET (200); about 19 parity runs of 5-10 s.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/fxfuse_x2}
mkdir -p "$OUT"
START=$(date +%s)
source tests/multigpu/unpack.sh
echo "fxfuse: $FXFUSE" | tee "$OUT/env.txt"

echo "== 1. machine" | tee -a "$OUT/env.txt"
{
  nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id --format=csv
  echo "-- nvidia-smi topo -m"
  nvidia-smi topo -m
  echo "-- NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS"
  timeout 60 python3 - <<'PY'
import torch
n = torch.cuda.device_count()
print("torch", torch.__version__, "GPUs", n)
for a in range(n):
    for b in range(n):
        if a != b:
            print(f"peer access {a} -> {b}: {torch.cuda.can_device_access_peer(a, b)}")
PY
} 2>&1 | tee -a "$OUT/env.txt"

echo "== 2. parity (world size 2)" | tee "$OUT/parity.txt"
LOG="$OUT/parity_full.log" PER_RUN_TIMEOUT=${PER_RUN_TIMEOUT:-60} timeout "${PARITY_BUDGET:-220}" \
  bash tests/multigpu/parity.sh "$FXFUSE" 2 2>&1 | tee -a "$OUT/parity.txt"
parity_rc=${PIPESTATUS[0]}
# Error paths: more ranks than GPUs; a rank that dies (SIGKILL from outside) is reported by
# number and the other rank is stopped; both exit 2 with one line, nothing hangs.
{
  echo "-- world size 3 on 2 GPUs (expect exit 2: needs 3 GPUs)"
  timeout 60 "$FXFUSE" run tests/plans/tp_llama_fp8.fxg --world-size 3; echo "exit $?"
  echo "-- rank 1 killed (expect exit 2: rank 1 was killed by signal 9)"
  ( timeout 60 "$FXFUSE" run tests/data/vllm/vllm_llama32_fp8_custom.post_grad.fxg.json --world-size 2 --compare-cpu --timeout-s 50; echo "exit $?" ) &
  sleep 5
  pid=$(pgrep -f -- '--rank 1 --rendezvous' | head -1); [[ -n "$pid" ]] && kill -9 "$pid" && echo "killed rank 1 (pid $pid)"
  wait
} 2>&1 | tee -a "$OUT/parity.txt" | tail -20

echo "== 3. all-reduce + RMSNorm benchmark (world size 2)" | tee "$OUT/bench.txt"
if [[ -x "$D/allreduce_bench/run_multigpu.sh" ]]; then
  left=$(( 460 - ($(date +%s) - START) ))
  budget=${BENCH_BUDGET:-200}; (( left < budget )) && budget=$left
  echo "budget ${budget}s" | tee -a "$OUT/bench.txt"
  OUT="$OUT/allreduce" timeout "$budget" bash "$D/allreduce_bench/run_multigpu.sh" 2 "$D/allreduce_bench" 2>&1 | tee -a "$OUT/bench.txt" | tail -40
else
  echo "not staged (kernels/allreduce/bench missing when tests/multigpu/stage.sh ran)" | tee -a "$OUT/bench.txt"
fi
echo "== done in $(( $(date +%s) - START ))s; parity exit $parity_rc" | tee -a "$OUT/env.txt"
exit $parity_rc
