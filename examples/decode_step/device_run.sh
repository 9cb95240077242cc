#!/bin/bash
# One device call for the decode-step measurements (issue #18, one H200): the paged KV-cache
# checks, then the whole-model decode benchmark of Llama-3.1-8B and 70B, fxfuse against torch.
#
#   tests/runtime/stage_device.sh                                   # here: builds and packs
#   device: carry [".device_rt"], run `OUT=$OUT examples/decode_step/device_run.sh`
#
# Budgets (seconds, env): KV_BUDGET=90, B8_BUDGET=260 (8B: fxfuse at batch 1, 8, 32, 64 x
# context 1k, 4k, then torch eager and torch.compile default, no torch point starts after the
# budget), B70_BUDGET=150 (70B at batch 1, 8 x 1k, fxfuse and torch.compile default),
# the A/B runs of AB_VARIANTS (below), B8FP8_BUDGET=60 (8B with an FP8 KV cache, fxfuse only;
# its table is in summary.txt). A budget of 0 leaves that part out; SKIP_GEMM_TESTS=1 the
# small-M GEMM tests (and its gated-SiLU epilogue's), SKIP_ATTENTION_TEST=1 the sm90 attention kernel test.
# TORCH_MODES_8B (default "eager,default"), B8_BATCHES (1,8,32,64), B8_CONTEXTS (1024,4096). PROFILE (default 10): per-step profile runs of each 8B point.
# ABLATE (default 0): replays of each 8B point without each step group (fxfuse bench --ablate).
# PERSISTENT_BUDGET (default 0): the persistent decode kernel against the plan (below).
# SPLIT_SWEEP (default empty): the plan's per-layer time under paged-attention split settings (below).
# Files that come back: summary.txt (the tables and the check lines), kv.txt, decode_*.json and
# decode_*.md of both models, logs.tgz, and stalls_*.txt / persistent.txt where those run.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
OUT=${OUT:-/tmp/decode_out}
mkdir -p "$OUT"
D=/tmp/fxrt
# shellcheck source=tests/runtime/device_bundle.sh
source tests/runtime/device_bundle.sh
unpack_bundle "$D" || { echo "no bundle: run tests/runtime/stage_device.sh" | tee "$OUT/summary.txt"; exit 2; }
export FXFUSE_CACHE_DIR=/tmp/fxfuse_kernel_cache
LOGS=$(mktemp -d)
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__)"
  echo "bundle built from:"; cat "$D/STAGED_FROM"
} > "$OUT/summary.txt" 2>&1

KV_BUDGET=${KV_BUDGET:-90}
if [[ $KV_BUDGET -gt 0 ]]; then
  OUT=$LOGS timeout "$KV_BUDGET" bash tests/runtime/kv_cache_gpu.sh "$D/fxfuse" "$D/paged_attention_gpu_test" "$D/rotary_cache_write_gpu_test" > "$OUT/kv.txt" 2>&1
  echo "kv checks: $(tail -1 "$OUT/kv.txt")" >> "$OUT/summary.txt"
fi
if [[ ${SKIP_GEMM_TESTS:-0} != 1 ]]; then
  timeout 300 "$D/small_m_fp8_gemm_gpu_test" > "$LOGS/small_m_fp8_gemm.txt" 2>&1
  echo "small-M FP8 GEMM test (rc $?): $(tail -2 "$LOGS/small_m_fp8_gemm.txt" | tr '\n' ' ')" >> "$OUT/summary.txt"
  timeout 300 "$D/small_m_fp8_gated_silu_gpu_test" > "$LOGS/small_m_fp8_gated_silu.txt" 2>&1
  echo "small-M FP8 GEMM gated-SiLU test (rc $?): $(tail -2 "$LOGS/small_m_fp8_gated_silu.txt" | tr '\n' ' ')" >> "$OUT/summary.txt"
fi
if [[ ${SKIP_ATTENTION_TEST:-0} != 1 && -e $D/attention_gpu_test ]]; then
  timeout 300 "$D/attention_gpu_test" > "$LOGS/attention_gpu_test.txt" 2>&1
  echo "attention kernel test (rc $?): $(tail -2 "$LOGS/attention_gpu_test.txt" | tr '\n' ' ')" >> "$OUT/summary.txt"
fi

bench() {  # CONFIG BUDGET ARGS... (budget 0: left out)
  local config=$1 budget=$2; shift 2
  [[ $budget -gt 0 ]] || return 0
  timeout "$budget" python3 examples/decode_step/bench_decode.py --fxfuse "$D/fxfuse" --config "$config" \
    --torch-budget $((budget - 60)) --out "$LOGS/$config" "$@" > "$LOGS/bench_$config.txt" 2>&1
  echo "== $config (rc $?)" >> "$OUT/summary.txt"
  cp "$LOGS/$config"/decode_*.json "$LOGS/$config"/decode_*.md "$OUT/" 2>/dev/null
  cat "$LOGS/$config"/decode_*.md >> "$OUT/summary.txt" 2>/dev/null || tail -5 "$LOGS/bench_$config.txt" >> "$OUT/summary.txt"
}
# Logit parity against torch on the same inputs (torch_parity.py): PARITY_RUNS, ';'-separated
# argument lists (default: the tiny model, then two full-width Llama-3.1-8B layers with a
# 8k vocabulary), PARITY_BUDGET s each.
PARITY_BUDGET=${PARITY_BUDGET:-150}
IFS=';' read -r -a parity_runs <<< "${PARITY_RUNS:---config tiny --batch 4 --context 300;--config llama8b --vocab 8192 --batch 4 --context 1024}"
[[ $PARITY_BUDGET -gt 0 ]] && for i in "${!parity_runs[@]}"; do
  # shellcheck disable=SC2086  # an argument list
  timeout "$PARITY_BUDGET" python3 examples/decode_step/torch_parity.py --fxfuse "$D/fxfuse" --layers 2 \
    ${parity_runs[$i]} --out "$LOGS/parity" > "$LOGS/parity_$i.txt" 2>&1
  echo "== logit parity: ${parity_runs[$i]} (rc $?)" >> "$OUT/summary.txt"
  tail -9 "$LOGS/parity_$i.txt" >> "$OUT/summary.txt"
done
cp "$LOGS"/parity/parity_*.json "$OUT/" 2>/dev/null
bench llama8b "${B8_BUDGET:-260}" --batches "${B8_BATCHES:-1,8,32,64}" --contexts "${B8_CONTEXTS:-1024,4096}" --iters 50 --profile "${PROFILE:-10}" \
  --ablate "${ABLATE:-0}" --torch-modes "${TORCH_MODES_8B:-eager,default}"
bench llama70b "${B70_BUDGET:-150}" --batches 1,8 --contexts 1024 --iters 20 --torch-modes default
# A/B of runtime variants, fxfuse only, 8B at AB_BATCHES x AB_CONTEXTS, AB_BUDGET s each (0:
# left out): AB_VARIANTS, ';'-separated lists of VAR=value words (default: programmatic
# dependent launch off, and the own small-M GEMM wherever it runs).
AB_BUDGET=${AB_BUDGET:-45}
IFS=';' read -r -a variants <<< "${AB_VARIANTS:-FXFUSE_PDL=0;FXFUSE_OWN_GEMM=always}"
[[ $AB_BUDGET -gt 0 ]] && for variant in "${variants[@]}"; do
  tag=$(echo "$variant" | tr ' =' '__')
  # shellcheck disable=SC2086  # the variant is a list of VAR=value words
  timeout "$AB_BUDGET" env $variant python3 examples/decode_step/bench_decode.py --fxfuse "$D/fxfuse" --config llama8b \
    --batches "${AB_BATCHES:-1,8}" --contexts "${AB_CONTEXTS:-1024}" --iters 50 --torch-modes none \
    --out "$LOGS/llama8b_$tag" > "$LOGS/bench_llama8b_$tag.txt" 2>&1
  echo "== llama8b with $variant (rc $?)" >> "$OUT/summary.txt"
  cat "$LOGS/llama8b_$tag"/decode_*.md >> "$OUT/summary.txt" 2>/dev/null || tail -5 "$LOGS/bench_llama8b_$tag.txt" >> "$OUT/summary.txt"
done
# FP8 KV cache (vLLM's kv_cache_dtype=fp8; the floor counts FP8 cache bytes): fxfuse only.
B8FP8_BUDGET=${B8FP8_BUDGET:-60}
if [[ $B8FP8_BUDGET -gt 0 ]]; then
  timeout "$B8FP8_BUDGET" python3 examples/decode_step/bench_decode.py --fxfuse "$D/fxfuse" --config llama8b \
    --kv-cache fp8 --batches 1,8,64 --contexts 1024,4096 --iters 50 --torch-modes none --out "$LOGS/llama8b_fp8" \
    > "$LOGS/bench_llama8b_fp8.txt" 2>&1
  echo "== llama8b, FP8 KV cache (rc $?)" >> "$OUT/summary.txt"
  cat "$LOGS/llama8b_fp8"/decode_*.md >> "$OUT/summary.txt" 2>/dev/null || tail -5 "$LOGS/bench_llama8b_fp8.txt" >> "$OUT/summary.txt"
fi
# Where the step's time goes, kernel by kernel, fxfuse and torch.compile default side by side
# (kernel_breakdown.py: ncu and torch.profiler; 4 layers): BREAKDOWN_POINTS (batch x context, default
# 32x1024,64x1024), BREAKDOWN_TORCH (torch.compile mode, default "default"; none: fxfuse only),
# BREAKDOWN_BUDGET s in all (default 0: left out).
BREAKDOWN_BUDGET=${BREAKDOWN_BUDGET:-0}
if [[ $BREAKDOWN_BUDGET -gt 0 ]]; then
  timeout "$BREAKDOWN_BUDGET" python3 examples/decode_step/kernel_breakdown.py --fxfuse "$D/fxfuse" \
    --points "${BREAKDOWN_POINTS:-32x1024,64x1024}" --torch-mode "${BREAKDOWN_TORCH:-default}" --out "$LOGS/breakdown" > "$LOGS/breakdown.txt" 2>&1
  echo "== kernel breakdown (rc $?)" >> "$OUT/summary.txt"
  cat "$LOGS/breakdown/breakdown.txt" >> "$OUT/summary.txt" 2>/dev/null || tail -20 "$LOGS/breakdown.txt" >> "$OUT/summary.txt"
  cp "$LOGS/breakdown/breakdown.json" "$OUT/" 2>/dev/null
fi
# Stall reasons of the step's kernels under ncu (a 2-layer 8B plan, the first STALL_KERNELS
# launches of the timed replays, each kernel alone): STALL_POINTS (batch x context,
# comma-separated; empty: left out) -> stalls_<point>.txt.
if [[ -n ${STALL_POINTS:-} ]]; then
  NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  python3 tools/fixtures/decode_model.py --config llama8b --form custom --layers 2 > "$LOGS/l2.fxg"
  "$D/fxfuse" compile "$LOGS/l2.fxg" --kv-cache=bf16 --emit=plan -o "$LOGS/l2.plan.pb" -q
  for point in ${STALL_POINTS//,/ }; do
    timeout 200 "$NCU" --profile-from-start off --clock-control none --section SpeedOfLight --section WarpStateStats \
      --section InstructionStats --section LaunchStats --section Occupancy \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" -c "${STALL_KERNELS:-10}" \
      "$D/fxfuse" bench "$LOGS/l2.plan.pb" --kv-batch "${point%x*}" --kv-query-len 1 --kv-context "${point#*x}" \
      --iters 1 --warmup 2 > "$OUT/stalls_$point.txt" 2>&1
    echo "ncu stalls $point (rc $?)" >> "$OUT/summary.txt"
  done
fi
# The plan's time per decoder layer at one point: 2- and 32-layer 8B plans (compiled once per
# cache format), (T32 - T2) / 30 so that the embedding, final norm and LM head cancel; one JSON
# line with `label` (the environment it ran under, for the sweeps below).
plan_per_layer() {
  local kv=$1 batch=$2 ctx=$3 label=${4:-default} layers
  for layers in 2 32; do
    if [[ ! -s $LOGS/p${layers}_$kv.plan.pb ]]; then
      python3 tools/fixtures/decode_model.py --config llama8b --form custom --layers $layers > "$LOGS/p$layers.fxg"
      "$D/fxfuse" compile "$LOGS/p$layers.fxg" --kv-cache="$kv" --emit=plan -o "$LOGS/p${layers}_$kv.plan.pb" -q
    fi
    timeout -k 10 120 "$D/fxfuse" bench "$LOGS/p${layers}_$kv.plan.pb" --kv-batch "$batch" --kv-query-len 1 \
      --kv-context "$ctx" --iters 50 --quiet --json "$LOGS/p${layers}_${kv}_${batch}x$ctx.json" > /dev/null
  done
  python3 -c 'import json, sys
a, b = (json.load(open(f))["median_us"] for f in sys.argv[1:3])
print(json.dumps({"plan_batch": int(sys.argv[3]), "context": int(sys.argv[4]), "kv_cache": sys.argv[5], "env": sys.argv[6],
                  "plan_2_layers_us": a, "plan_32_layers_us": b, "plan_per_layer_us": round((b - a) / 30, 2)}))' \
    "$LOGS/p2_${kv}_${batch}x$ctx.json" "$LOGS/p32_${kv}_${batch}x$ctx.json" "$batch" "$ctx" "$kv" "$label"
}

# The persistent decode kernel (persistent_layer_bench.cu) against the plan, per layer:
# PERSISTENT_BUDGET s for its timed points (default 0: left out). Its check against the CPU first,
# then PERSISTENT_BATCHES x PERSISTENT_CONTEXTS (default 1,8 x 1024,4096) for each cache format
# of PERSISTENT_KV (default bf16,fp8; PERSISTENT_BUDGET s each), the same at 1 x 1k
# without each phase (PERSISTENT_SKIPS, see the bench's --skip), and the plan's
# per-layer time at the same points from 2- and 32-layer 8B plans, (T32 - T2) / 30, so that the
# embedding, final norm and LM head cancel -> persistent.txt, its JSON lines in summary.txt.
PERSISTENT_BUDGET=${PERSISTENT_BUDGET:-0}
if [[ $PERSISTENT_BUDGET -gt 0 ]]; then
  p_batches=${PERSISTENT_BATCHES:-1,8} p_contexts=${PERSISTENT_CONTEXTS:-1024,4096} p_kv=${PERSISTENT_KV-bf16,fp8}
  {
    timeout -k 10 180 "$D/persistent_layer_bench" --check
    echo "persistent check rc $?"
    for kv in ${p_kv//,/ }; do
      timeout -k 10 "$PERSISTENT_BUDGET" "$D/persistent_layer_bench" --batch "$p_batches" --context "$p_contexts" --kv "$kv"
      echo "persistent bench $kv rc $?"
    done
    # What each phase costs inside it: PERSISTENT_SKIPS, ';'-separated --skip lists at 1 x 1k.
    IFS=';' read -ra p_skips <<< "${PERSISTENT_SKIPS-attention;norm;barrier;attention,norm,barrier}"
    for skip in "${p_skips[@]}"; do
      timeout -k 10 60 "$D/persistent_layer_bench" --batch 1 --context 1024 --skip "$skip"
      echo "persistent skip $skip rc $?"
    done
    for kv in ${p_kv//,/ }; do
      for batch in ${p_batches//,/ }; do
        for ctx in ${p_contexts//,/ }; do plan_per_layer "$kv" "$batch" "$ctx"; done
      done
    done
  } > "$OUT/persistent.txt" 2>&1
  { echo "== persistent decode kernel against the plan"; grep -E '^\{|^check|relative RMS|FAIL|rc [0-9]' "$OUT/persistent.txt"; } >> "$OUT/summary.txt"
fi
# A/B of the paged attention's split plan inside the plan (per-layer time, plan_per_layer):
# SPLIT_SWEEP, ';'-separated environments (e.g. "FXFUSE_PAGED_WARPS_PER_SM=1;FXFUSE_PAGED_MMA=0";
# "default" is the unchanged plan) at SPLIT_POINTS (batch x context, default 1x1024,1x4096,8x1024)
# with a bf16 cache -> split_sweep.txt, its lines in summary.txt.
if [[ -n ${SPLIT_SWEEP:-} ]]; then
  IFS=';' read -ra sweep_envs <<< "$SPLIT_SWEEP"
  SPLIT_POINTS=${SPLIT_POINTS:-1x1024,1x4096,8x1024}
  {
    for env_spec in "${sweep_envs[@]}"; do
      for point in ${SPLIT_POINTS//,/ }; do
        # shellcheck disable=SC2086  # env_spec is a list of NAME=VALUE words
        ( [[ $env_spec == default ]] || export $env_spec; plan_per_layer bf16 "${point%x*}" "${point#*x}" "$env_spec" )
      done
    done
  } > "$OUT/split_sweep.txt" 2>&1
  { echo "== paged attention split sweep"; grep -E '^\{' "$OUT/split_sweep.txt"; } >> "$OUT/summary.txt"
fi
tar -C "$LOGS" --exclude=parity --exclude="*.plan.pb" --exclude="*.fxg" -czf "$OUT/logs.tgz" . 2>/dev/null
cat "$OUT/summary.txt"
