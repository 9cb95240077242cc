#!/bin/bash
# One device call: runtime settings (environment variables) A/B'd in the Llama-3.1-8B decode step
# and in the decoder layer (examples/decoder_layer), every setting interleaved with the others at
# each point, plus the small-M GEMMs back to back under each setting (weight_stream_bench).
#
#   SLIM=1 tests/runtime/stage_device.sh                      # here: builds and packs
#   device: carry [".device_rt"], run `VARIANTS="default;FXFUSE_X=1" OUT=$OUT examples/decode_step/env_ab.sh`
#
# Env: VARIANTS (';'-separated lists of NAME=value words; "default" = none; "build=NAME" = the
# bundle's binary NAME instead of fxfuse, e.g. build=fxfuse_old packed by `AB_BASELINE=...
# tests/runtime/stage_device.sh`, on plans it compiles itself: two builds interleaved), TESTS (binaries of the
# bundle run first, space-separated, e.g. "small_m_fp8_gemm_gpu_test"), POINTS (batch x context,
# default "1x1024 8x1024 1x4096"; empty: no step runs), REPS (default 2), LAYER_TOKENS (default
# "1 8"; empty: no layer runs), LAYER_REPS (2),
# STREAM_SHAPES (weight_stream_bench's shapes argument, default 8b; empty: left out), TIMELINE
# (N: every step and layer bench also records N replays with `--timeline N` and its summary, with
# the repeating unit's table, follows the run's line; default none), BUNDLE_DIR (where the
# bundle unpacks, default /tmp/fxrt).
# Writes $OUT/env_ab.txt as it goes: one line per run (setting, point, median µs), and at the end
# the A/B table of env_ab_summary.py (each setting's mean and its difference from the first).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-/tmp/env_ab_out}
mkdir -p "$OUT"
D=${BUNDLE_DIR:-/tmp/fxrt}  # where the bundle unpacks
# shellcheck source=tests/runtime/device_bundle.sh
source tests/runtime/device_bundle.sh
unpack_bundle "$D" || { echo "no bundle: run tests/runtime/stage_device.sh" | tee "$OUT/env_ab.txt"; exit 2; }
export FXFUSE_CACHE_DIR=/tmp/fxfuse_kernel_cache
S=$OUT/env_ab.txt
W=$(mktemp -d)
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "bundle built from:"; cat "$D/STAGED_FROM"
} > "$S" 2>&1
for t in ${TESTS:-}; do
  timeout 240 "$D/$t" > "$W/$t.txt" 2>&1
  echo "$t (rc $?): $(tail -2 "$W/$t.txt" | tr '\n' ' ')" >> "$S"
done
IFS=';' read -r -a variants <<< "${VARIANTS:-default}"
# Runs "$@" under variant $1 (its NAME=value words exported in a subshell; none for a build).
under() {
  local v=$1; shift
  # shellcheck disable=SC2086,SC2163  # the variant is a list of NAME=value words
  ( [[ $v == default || $v == build=* ]] || export $v; "$@" )
}
# The fxfuse binary variant $1 runs: the bundle's fxfuse, or NAME for "build=NAME".
bin_of() { if [[ $1 == build=* ]]; then echo "$D/${1#build=}"; else echo "$D/fxfuse"; fi; }
# The plan of graph $2 (a name under $W) that variant $1's binary compiled (once per binary),
# with compile flags $3...: prints its path.
plan_of() {
  local bin graph=$2 plan; bin=$(bin_of "$1"); shift 2
  plan="$W/${graph%.*}_$(basename "$bin").plan.pb"
  [[ -s $plan ]] || "$bin" compile "$W/$graph" "$@" --emit=plan -o "$plan" -q
  echo "$plan"
}
median() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["median_us"])' "$1" 2>/dev/null || echo failed; }
timeline=()
[[ -n ${TIMELINE:-} ]] && timeline=(--timeline "$TIMELINE")
# The timeline summary of the last bench (its stdout in $W/out.txt), when TIMELINE is set.
timeline_of_last() { [[ -z ${TIMELINE:-} ]] || sed -n '/^timeline (/,$p' "$W/out.txt" >> "$S"; }

if [[ -n ${STREAM_SHAPES-8b} ]]; then
  for v in "${variants[@]}"; do
    [[ $v == build=* ]] && continue  # one stream benchmark in the bundle
    echo "== weight_stream_bench ${STREAM_SHAPES-8b} 1,8 under $v" >> "$S"
    under "$v" timeout 120 "$D/weight_stream_bench" "${STREAM_SHAPES-8b}" 1,8 >> "$S" 2>&1
  done
fi
python3 tools/fixtures/decode_model.py --config llama8b --form custom --layers 32 > "$W/p32.fxg"
cp examples/decoder_layer/llama8b_decoder_fp8.fxg "$W/layer.fxg"
for rep in $(seq "${REPS:-2}"); do
  for point in ${POINTS-1x1024 8x1024 1x4096}; do
    for v in "${variants[@]}"; do
      under "$v" timeout -k 10 120 "$(bin_of "$v")" bench "$(plan_of "$v" p32.fxg --kv-cache=bf16)" --kv-batch "${point%x*}" --kv-query-len 1 \
        --kv-context "${point#*x}" --iters 50 --quiet --json "$W/d.json" "${timeline[@]}" > "$W/out.txt" 2>> "$W/err.txt"
      echo "decode 8B $point [$v] rep $rep: $(median "$W/d.json") us" >> "$S"
      timeline_of_last
      rm -f "$W/d.json"
    done
  done
done
for rep in $(seq "${LAYER_REPS:-2}"); do
  for t in ${LAYER_TOKENS-1 8}; do
    for v in "${variants[@]}"; do
      under "$v" timeout -k 10 60 "$(bin_of "$v")" bench "$(plan_of "$v" layer.fxg)" --device=cuda --bind s0="$t" --iters 300 \
        --quiet --json "$W/l.json" "${timeline[@]}" > "$W/out.txt" 2>> "$W/err.txt"
      echo "layer T=$t [$v] rep $rep: $(median "$W/l.json") us" >> "$S"
      timeline_of_last
      rm -f "$W/l.json"
    done
  done
done
tail -20 "$W/err.txt" > "$OUT/errors.txt"
{ echo; echo "## A/B table (examples/decode_step/env_ab_summary.py)"; python3 examples/decode_step/env_ab_summary.py "$S"; } >> "$S" 2>&1
cat "$S"
