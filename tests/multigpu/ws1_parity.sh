#!/bin/bash
# World size 1 on one GPU (tag gpu): the TP FP8 Llama graphs run through `fxfuse run
# --world-size 1 --compare-cpu` (all-reduces are identities), and the graphs compiled at world
# size 2 (fused all_reduce_rms_norm[_quant] nodes) run at world size 1, where every
# FusedAllReduceNorm step is add + norm + quant: through the fused kernels (--allreduce auto)
# and through the fallback path (--allreduce nccl: the single-GPU fused norm kernels).
# Tolerances as tests/runtime/gpu_parity.sh (--mismatch-frac 0.01: FP8 GEMMs on Hopper
# accumulate with less than fp32 precision, see docs/runtime.md).
#   tests/multigpu/ws1_parity.sh FXFUSE GRAPH...
set -uo pipefail
FXFUSE="$1"; shift
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
check() {  # check LABEL ARGS...
  local label="$1"; shift
  if timeout 120 "$FXFUSE" run "$@" --compare-cpu --seed 3 --mismatch-frac "${MISMATCH_FRAC:-0.01}" > "$tmp/log" 2>&1; then
    echo "PASS $label $(grep -m1 'fused all-reduce steps' "$tmp/log" | sed 's/.*: /[/; s/$/]/')"
    passed=$((passed + 1))
  else
    echo "FAIL $label"; tail -8 "$tmp/log" | cut -c1-300
    failed=$((failed + 1))
  fi
}
for g in "$@"; do
  name=$(basename "$g")
  check "$name ws1" "$g" --world-size 1
  "$FXFUSE" compile "$g" --world-size 2 -o "$tmp/fused.fxg" -q || { echo "FAIL $name: compile at ws2"; failed=$((failed + 1)); continue; }
  if ! grep -q all_reduce_rms_norm "$tmp/fused.fxg"; then echo "FAIL $name: no fused all-reduce at ws2"; failed=$((failed + 1)); continue; fi
  for a in auto nccl; do
    for T in 2 16 300; do check "$name fused-at-ws2 run at ws1 allreduce=$a T=$T" "$tmp/fused.fxg" --world-size 1 --allreduce "$a" \
      $("$FXFUSE" inspect "$tmp/fused.fxg" | awk -v T=$T '/^symbols/ {f=1; next} f && /^  [a-z]/ {printf "--bind %s=%s ", $1, T; next} {f=0}'); done
  done
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
