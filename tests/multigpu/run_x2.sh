#!/bin/bash
# The multi-GPU tests and benchmarks on 2 H200s of one host, in ONE device call that ends inside 7.5
# minutes whatever happens (every step under `timeout`, phases under deadlines), never waits
# on input; 7 files under $OUT (one folder down at most). Stage first (here):
# tests/multigpu/stage.sh; then on the device:
#   bash tests/multigpu/run_x2.sh                    (carry: [".device_mg"])
#   1. the machine: GPUs, `nvidia-smi topo -m`, peer access both ways, NVLink multicast off
#   2. TP=2 parity (tests/multigpu/parity.sh): `fxfuse run --world-size 2 --compare-cpu` on the
#      vLLM all-reduce fixtures (FP8, bf16) and the TP FP8 Llama with every way the fused
#      all-reduce steps run (--allreduce auto, oneshot, twoshot, nccl) plus the unfused plan
#      (NCCL Collective steps); each rank against its lockstep CPU reference, and where outputs
#      differ, the node-by-node proof on every rank (collectives on all ranks' GPU inputs)
#   3. error paths: a world size larger than the machine; a rank killed (exit 2, one line)
#   4. the kernel benchmark (kernels/allreduce/bench/run_multigpu.sh 2): tokens
#      {1..8192} x hidden {4096, 8192}, fused vs (a) NCCL + our norm vs (b) torch NCCL +
#      compiled norm, with what time is left
# Files: env.txt (machine, phase times), parity.txt (one line per run, error paths),
# parity_full.log (every run's output), bench.txt (benchmark console), allreduce/{fused_ws2.json,
# torch_ws2.json, allreduce_ws2.md}.
# Env: TOTAL_BUDGET (430 s: the whole script), PARITY_UNTIL (250 s after the start),
# PER_RUN_TIMEOUT (60 s). X2_DRY=1: a dry run on a machine without GPUs (bazel-bin/fxfuse,
# parity with --cpu-only, no kill test, no benchmark): checks this script's logic.
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/fxfuse_x2}
mkdir -p "$OUT"
START=$(date +%s)
TOTAL=${TOTAL_BUDGET:-430}
DRY=${X2_DRY:-0}
elapsed() { echo $(( $(date +%s) - START )); }
left() { echo $(( TOTAL - ($(date +%s) - START) )); }
phase() { echo "== $1 (at $(elapsed)s)" | tee -a "$OUT/env.txt"; }

if [[ $DRY == 1 ]]; then
  FXFUSE=${FXFUSE:-bazel-bin/fxfuse}; D=$(mktemp -d)
  echo "DRY RUN (X2_DRY=1): no GPU steps" | tee "$OUT/env.txt"
else
  : > "$OUT/env.txt"
  source tests/multigpu/unpack.sh >> "$OUT/env.txt" 2>&1  # exits 2 (message in env.txt) when it cannot
fi
echo "fxfuse: $FXFUSE; commit $(cat "${D}/COMMIT" 2>/dev/null || echo unknown)" | tee -a "$OUT/env.txt"

phase "1. machine"
{
  timeout 20 nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id,memory.used --format=csv
  echo "-- nvidia-smi topo -m"
  timeout 20 nvidia-smi topo -m
  echo "-- NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS"
  [[ $DRY == 1 ]] || timeout 45 python3 - <<'PY'
import torch
n = torch.cuda.device_count()
print("torch", torch.__version__, "GPUs", n)
for a in range(n):
    for b in range(n):
        if a != b:
            print(f"peer access {a} -> {b}: {torch.cuda.can_device_access_peer(a, b)}")
PY
} 2>&1 | tee -a "$OUT/env.txt"

phase "2. parity (world size 2)"
echo "== 2. parity (world size 2)" > "$OUT/parity.txt"
parity_until=$(( START + ${PARITY_UNTIL:-250} ))
cpu_only=0; [[ $DRY == 1 ]] && cpu_only=1
LOG="$OUT/parity_full.log" DEADLINE=$parity_until CPU_ONLY=$cpu_only PER_RUN_TIMEOUT=${PER_RUN_TIMEOUT:-60} \
  timeout -k 5 $(( parity_until - $(date +%s) + 10 )) bash tests/multigpu/parity.sh "$FXFUSE" 2 2>&1 | tee -a "$OUT/parity.txt"
parity_rc=${PIPESTATUS[0]}

phase "3. error paths"
# More ranks than GPUs; a rank that dies (SIGKILL from outside) is reported by number and the
# other rank is stopped; both exit 2 with one line, nothing hangs.
{
  echo "-- world size 3 on 2 GPUs (expect exit 2: needs 3 GPUs)"
  timeout -k 5 30 "$FXFUSE" run tests/plans/tp_llama_fp8.fxg --world-size 3 < /dev/null; echo "exit $?"
  if [[ $DRY == 1 ]]; then
    echo "-- rank 1 killed: skipped (dry run)"
  else
    echo "-- rank 1 killed (expect exit 2: rank 1 was killed by signal 9)"
    ( timeout -k 5 45 "$FXFUSE" run tests/data/vllm/vllm_llama32_fp8_custom.post_grad.fxg.json --world-size 2 --compare-cpu \
        --timeout-s 40 < /dev/null; echo "exit $?" ) &
    job=$!
    pid=""
    for _ in $(seq 1 40); do  # up to 10 s for rank 1 to start
      pid=$(pgrep -f -- '--rank 1 --rendezvous' | head -1)
      [[ -n "$pid" ]] && break
      sleep 0.25
    done
    sleep 2  # into its run
    if [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null; then echo "killed rank 1 (pid $pid)"; else echo "rank 1 not found or already done"; fi
    wait "$job"
  fi
} 2>&1 | tee -a "$OUT/parity.txt" | tail -20

phase "4. all-reduce + RMSNorm benchmark (world size 2)"
echo "== 4. all-reduce + RMSNorm benchmark (world size 2)" > "$OUT/bench.txt"
if [[ $DRY == 1 ]]; then
  echo "skipped (dry run)" | tee -a "$OUT/bench.txt"
elif [[ -x "$D/allreduce_bench/run_multigpu.sh" || -f "$D/allreduce_bench/run_multigpu.sh" ]]; then
  budget=$(( $(left) - 5 ))
  # The C++ driver (fused and baseline (a)) first, at most a third of what is left; torch's
  # baseline (b) until 5 s before the end (its rows are printed as they come, so a cut still
  # leaves some), then the table.
  driver=$(( budget / 3 ))
  echo "budget ${budget}s (driver at most ${driver}s)" | tee -a "$OUT/bench.txt"
  if (( budget > 30 )); then
    mkdir -p "$D/allreduce" "$OUT/allreduce"
    OUT="$D/allreduce" DRIVER_TIMEOUT=$driver BENCH_DEADLINE=$(( $(date +%s) + budget - 5 )) \
      timeout -k 5 "$budget" bash "$D/allreduce_bench/run_multigpu.sh" 2 "$D/allreduce_bench" < /dev/null 2>&1 | tee -a "$OUT/bench.txt" | tail -40
    # torch cut by its deadline: its rows so far (printed as JSON lines) into the table.
    if [[ ! -s "$D/allreduce/torch_ws2.json" && -s "$D/allreduce/fused_ws2.json" ]] && grep -q '^{' "$D/allreduce/torch_ws2.log" 2>/dev/null; then
      echo "torch baseline cut: $(grep -c '^{' "$D/allreduce/torch_ws2.log") rows kept" | tee -a "$OUT/bench.txt"
      timeout 20 python3 -c 'import json, sys; print(json.dumps([json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]))' \
        "$D/allreduce/torch_ws2.log" > "$D/allreduce/torch_ws2.json"
      timeout 20 python3 "$D/allreduce_bench/make_table.py" "$D/allreduce/fused_ws2.json" "$D/allreduce/torch_ws2.json" \
        > "$D/allreduce/allreduce_ws2.md" 2>> "$OUT/bench.txt" && cat "$D/allreduce/allreduce_ws2.md" >> "$OUT/bench.txt"
    fi
    for f in fused_ws2.json torch_ws2.json allreduce_ws2.md; do
      [[ -s "$D/allreduce/$f" ]] && cp "$D/allreduce/$f" "$OUT/allreduce/"
    done
  else
    echo "skipped: no time left" | tee -a "$OUT/bench.txt"
  fi
else
  echo "not staged (kernels/allreduce/bench missing when tests/multigpu/stage.sh ran)" | tee -a "$OUT/bench.txt"
fi
phase "done; parity exit $parity_rc"
exit $parity_rc
