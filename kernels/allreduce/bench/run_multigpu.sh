#!/bin/bash
# The whole all-reduce + RMSNorm kernel benchmark for one world size, in one go, on
# a machine with N GPUs of one host (also runs at N = 1): the fused kernels and baseline (a)
# (NCCL all-reduce + our fused add-norm kernel) from the C++ driver, baseline (b) (PyTorch NCCL
# all-reduce + torch.compile'd norm) from the Python script, merged into one markdown table.
# NVLink multicast stays off. Results go to $OUT (default /tmp/allreduce_bench).
#
#   kernels/allreduce/bench/run_multigpu.sh N [BIN_DIR]
#
# BIN_DIR holds bench_all_reduce_rms_norm (default: bazel-bin/kernels/allreduce/bench). Extra
# driver options through BENCH_ARGS (e.g. BENCH_ARGS="--tokens 1,8 --reps 10"); time limits of the
# two parts through DRIVER_TIMEOUT and TORCH_TIMEOUT (seconds, 900 each), or BENCH_DEADLINE
# (epoch seconds): the torch part then ends 5 s before it, leaving time for the table.
set -uo pipefail
N="${1:?usage: run_multigpu.sh N [BIN_DIR]}"
HERE="$(cd "$(dirname "$0")" && pwd)"
BIN="${2:-$HERE/../../../bazel-bin/kernels/allreduce/bench}"
OUT="${OUT:-/tmp/allreduce_bench}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# NCCL for the C++ driver: the toolkit's, else the one of the PyTorch wheels.
if [ -z "${FXFUSE_NCCL_LIB:-}" ]; then
  FXFUSE_NCCL_LIB=$(timeout 30 python3 - <<'PY' 2>/dev/null
import glob, site, sys
for d in site.getsitepackages() + [site.getusersitepackages()]:
    for f in glob.glob(d + "/nvidia/nccl/lib/libnccl.so*") + glob.glob(d + "/nvidia/*/lib/libnccl.so*"):
        print(f); sys.exit(0)
PY
  )
  export FXFUSE_NCCL_LIB
fi
echo "world size $N, NCCL ${FXFUSE_NCCL_LIB:-from the loader path}, results in $OUT"
timeout 20 nvidia-smi topo -m > "$OUT/topology_ws$N.txt" 2>&1
status=0
timeout -k 5 "${DRIVER_TIMEOUT:-900}" "$BIN/bench_all_reduce_rms_norm" --world-size "$N" ${BENCH_ARGS:-} --out "$OUT/fused_ws$N.json" \
  --markdown "$OUT/fused_ws$N.md" 2>&1 | tee "$OUT/fused_ws$N.log" || status=1
torch_timeout=${TORCH_TIMEOUT:-900}
[ -n "${BENCH_DEADLINE:-}" ] && torch_timeout=$(( BENCH_DEADLINE - $(date +%s) - 5 ))
[ "$torch_timeout" -lt 1 ] && torch_timeout=1
timeout -k 5 "$torch_timeout" python3 "$HERE/bench_torch_baseline.py" --world-size "$N" ${TORCH_ARGS:-} --out "$OUT/torch_ws$N.json" \
  2>&1 | tee "$OUT/torch_ws$N.log" || status=1
inputs="$OUT/fused_ws$N.json"
[ -s "$OUT/torch_ws$N.json" ] && inputs="$inputs $OUT/torch_ws$N.json"
python3 "$HERE/make_table.py" $inputs > "$OUT/allreduce_ws$N.md" && cat "$OUT/allreduce_ws$N.md"
exit $status
