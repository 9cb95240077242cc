#!/bin/bash
# One device call comparing two builds of fxfuse on the 8B decode step (issue #18): the tree's
# fxfuse against an older one packed as fxfuse_old, after the paged KV-cache checks of the new
# one, and optionally ncu of the paged attention kernel alone under each.
#
#   AB_BASELINE=/path/to/old/fxfuse tests/runtime/stage_device.sh   # here: builds and packs both
#   device: carry [".device_rt"], run `OUT=$OUT examples/decode_step/ab_builds.sh`
#
# Env: KV_BUDGET (s, default 150; 0 skips the checks), BENCH_BUDGET (s per build, default 120),
# BATCHES (1,8,32,64), CONTEXTS (1024,4096), BINS (the order of the runs, default
# "fxfuse fxfuse_old"; an entry "fxfuse@FXFUSE_X=0,FXFUSE_Y=1" runs that build with those variables set),
# NCU_POINTS (batch x context, comma-separated; empty: no ncu), NCU_BINS.
# Writes summary.txt (every run's table), kv.txt, <run>.json (@, = and , as _) and
# ncu_<bin>_<point>.txt to $OUT.
set -u
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-/tmp/ab_out}
mkdir -p "$OUT"
D=/tmp/fxrt
# shellcheck source=tests/runtime/device_bundle.sh
source tests/runtime/device_bundle.sh
unpack_bundle "$D" || { echo "no bundle: run AB_BASELINE=... tests/runtime/stage_device.sh" > "$OUT/summary.txt"; exit 2; }
export FXFUSE_CACHE_DIR=/tmp/fxfuse_kernel_cache
{ echo "bundle built from:"; cat "$D/STAGED_FROM"; } > "$OUT/summary.txt"
if [[ ${KV_BUDGET:-150} -gt 0 ]]; then
  mkdir -p /tmp/kvlogs
  OUT=/tmp/kvlogs timeout "${KV_BUDGET:-150}" bash tests/runtime/kv_cache_gpu.sh "$D/fxfuse" "$D/paged_attention_gpu_test" \
    "$D/rotary_cache_write_gpu_test" > "$OUT/kv.txt" 2>&1
  echo "kv checks (rc $?): $(tail -1 "$OUT/kv.txt")" >> "$OUT/summary.txt"
fi
for run in ${BINS:-fxfuse fxfuse_old}; do
  bin=${run%%@*} env_setting=()  # "fxfuse@FXFUSE_X=0,FXFUSE_Y=1": that build with those variables
  [[ $run == *@* ]] && IFS=, read -r -a env_setting <<< "${run#*@}"
  tag=${run//[@=,]/_}
  rm -rf "/tmp/ab_$tag"
  timeout "${BENCH_BUDGET:-120}" env "${env_setting[@]}" python3 examples/decode_step/bench_decode.py --fxfuse "$D/$bin" \
    --config llama8b --batches "${BATCHES:-1,8,32,64}" --contexts "${CONTEXTS:-1024,4096}" --iters 50 \
    --torch-modes none --copy-rate 4.1e12 --out "/tmp/ab_$tag" > "/tmp/ab_$tag.txt" 2>&1
  echo "== $run (rc $?)" >> "$OUT/summary.txt"
  cat /tmp/ab_"$tag"/decode_*.md >> "$OUT/summary.txt" 2>/dev/null || tail -5 "/tmp/ab_$tag.txt" >> "$OUT/summary.txt"
  cp /tmp/ab_"$tag"/decode_*.json "$OUT/$tag.json" 2>/dev/null
done
# ncu of the paged attention kernel alone (a 2-layer plan, the first launch) under each build.
if [[ -n ${NCU_POINTS:-} ]]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  python3 tools/fixtures/decode_model.py --config llama8b --form custom --layers 2 > /tmp/ab_2layers.fxg
  for bin in ${NCU_BINS:-fxfuse fxfuse_old}; do
    "$D/$bin" compile /tmp/ab_2layers.fxg --kv-cache=bf16 --emit=plan -o "/tmp/ab_2layers_$bin.plan.pb" -q
    for point in ${NCU_POINTS//,/ }; do
      timeout 120 "$NCU" --profile-from-start off --clock-control none --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section InstructionStats --section Occupancy \
        -k regex:pagedAttention -c 1 "$D/$bin" bench "/tmp/ab_2layers_$bin.plan.pb" --kv-batch "${point%x*}" \
        --kv-query-len 1 --kv-context "${point#*x}" --iters 3 > "$OUT/ncu_${bin}_$point.txt" 2>&1
      echo "ncu $bin $point (rc $?)" >> "$OUT/summary.txt"
    done
  done
fi
