#!/bin/bash
# One device call: the small-M FP8 GEMM's L2 lead (SmallMFp8GemmParams::l2_lead_bytes, set for
# A/B runs by FXFUSE_SMALLM_L2_LEAD_MB) measured in the Llama-3.1-8B decode step and in the
# decoder layer, every setting interleaved with the others at each point.
#
#   SLIM=1 tests/runtime/stage_device.sh                      # here: builds and packs
#   device: carry [".device_rt"], run `OUT=$OUT examples/decode_step/l2_lead_ab.sh`
#
# Env: LEADS (MiB, default "0 12 24 48"; 0 = no lead), POINTS (batch x context, default
# "1x1024 8x1024 1x4096 8x4096"), REPS (default 2), LAYER_TOKENS (default "1 8"), LAYER_REPS (3).
# Writes $OUT/lead_ab.txt as it goes (one line per run: setting, point, median µs), the GPU
# tests of the lead first.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-/tmp/lead_out}
mkdir -p "$OUT"
D=/tmp/fxrt
# shellcheck source=tests/runtime/device_bundle.sh
source tests/runtime/device_bundle.sh
unpack_bundle "$D" || { echo "no bundle: run tests/runtime/stage_device.sh" | tee "$OUT/lead_ab.txt"; exit 2; }
export FXFUSE_CACHE_DIR=/tmp/fxfuse_kernel_cache
S=$OUT/lead_ab.txt
W=$(mktemp -d)
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "bundle built from:"; cat "$D/STAGED_FROM"
} > "$S" 2>&1
timeout 240 "$D/small_m_fp8_gemm_gpu_test" "small-M FP8 GEMM: the L2 lead before the grid wait" > "$W/t1.txt" 2>&1
echo "small-M GEMM lead test (rc $?): $(tail -2 "$W/t1.txt" | tr '\n' ' ')" >> "$S"
timeout 240 "$D/small_m_fp8_gated_silu_gpu_test" "gated-SiLU epilogue: with the L2 lead before the grid wait" > "$W/t2.txt" 2>&1
echo "gated-SiLU lead test (rc $?): $(tail -2 "$W/t2.txt" | tr '\n' ' ')" >> "$S"

median() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["median_us"])' "$1" 2>/dev/null || echo failed; }

python3 tools/fixtures/decode_model.py --config llama8b --form custom --layers 32 > "$W/p32.fxg"
"$D/fxfuse" compile "$W/p32.fxg" --kv-cache=bf16 --emit=plan -o "$W/p32.plan.pb" -q
for rep in $(seq "${REPS:-2}"); do
  for point in ${POINTS:-1x1024 8x1024 1x4096 8x4096}; do
    for lead in ${LEADS:-0 12 24 48}; do
      FXFUSE_SMALLM_L2_LEAD_MB=$lead timeout -k 10 120 "$D/fxfuse" bench "$W/p32.plan.pb" --kv-batch "${point%x*}" \
        --kv-query-len 1 --kv-context "${point#*x}" --iters 50 --quiet --json "$W/d.json" > /dev/null 2>> "$W/err.txt"
      echo "decode 8B $point lead ${lead} MiB rep $rep: $(median "$W/d.json") us" >> "$S"
      rm -f "$W/d.json"
    done
  done
done
"$D/fxfuse" compile examples/decoder_layer/llama8b_decoder_fp8.fxg --emit=plan -o "$W/layer.plan.pb" -q
for rep in $(seq "${LAYER_REPS:-3}"); do
  for t in ${LAYER_TOKENS:-1 8}; do
    for lead in ${LEADS:-0 12 24 48}; do
      FXFUSE_SMALLM_L2_LEAD_MB=$lead timeout -k 10 60 "$D/fxfuse" bench "$W/layer.plan.pb" --device=cuda --bind s0="$t" \
        --iters 300 --quiet --json "$W/l.json" > /dev/null 2>> "$W/err.txt"
      echo "layer T=$t lead ${lead} MiB rep $rep: $(median "$W/l.json") us" >> "$S"
      rm -f "$W/l.json"
    done
  done
done
tail -20 "$W/err.txt" > "$OUT/errors.txt"
cat "$S"
