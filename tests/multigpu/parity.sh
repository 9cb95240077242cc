#!/bin/bash
# Tensor-parallel parity on the GPUs of one host (tag gpu, not run in CI): for each world size
# given, `fxfuse run --world-size N --compare-cpu` on the TP FP8 Llama graphs, every rank against
# its own lockstep CPU reference (all-reduce simulated: fp32 sum in rank order, one rounding),
# with each way the fused all-reduce steps can run (--allreduce auto, oneshot, twoshot, nccl),
# at a few token counts, plus the unfused plan (NCCL Collective steps). One line per run,
# "N passed, M failed" last; full logs in $LOG.
#   tests/multigpu/parity.sh [FXFUSE] N...        e.g. tests/multigpu/parity.sh 2 4 8
# FXFUSE defaults to the staged binary (tests/multigpu/stage.sh, unpacked here), else
# bazel-bin/fxfuse. Env: GRAPHS, TOKENS ("16 300 2048"), ALGOS, PER_RUN_TIMEOUT (90 s), LOG.
set -uo pipefail
cd "$(dirname "$0")/../.."
if [[ $# -gt 0 && ! "$1" =~ ^[0-9]+$ ]]; then FXFUSE="$1"; shift
elif [[ -f .device_mg/bundle.tar.xz ]]; then source tests/multigpu/unpack.sh
else FXFUSE=bazel-bin/fxfuse; fi
[[ $# -gt 0 ]] || { echo "usage: tests/multigpu/parity.sh [FXFUSE] N..."; exit 2; }
export NCCL_NVLS_ENABLE=0
LOG=${LOG:-/dev/null}
# Runs: "GRAPH|TOKENS|ALGOS" (TOKENS "hint": the graph's own symbol hints). The 32-layer
# fixture stays at its hint: its CPU reference is the slow part. vllm_allreduce_custom has bf16
# matmuls only (no FP8 GEMM accumulation differences): the cleanest check of the reduction.
# Tolerances as tests/runtime/gpu_parity.sh (MISMATCH_FRAC 0.01).
RUNS=${RUNS:-"tests/plans/tp_llama_fp8.fxg|16 2048|auto oneshot twoshot nccl
tests/data/vllm/vllm_allreduce_fp8_custom.post_grad.fxg.json|2 1000|auto nccl
tests/data/vllm/vllm_allreduce_custom.post_grad.fxg.json|300|auto nccl
tests/data/vllm/vllm_llama32_fp8_custom.post_grad.fxg.json|hint|auto"}
UNFUSED=functionalize,noop-elimination,canonicalize-ops,canonicalize-norm,canonicalize-quant,canonicalize-activation,dce,cleanup
passed=0; failed=0
one() {  # one LABEL ARGS...
  local label="$1"; shift
  local start=$(date +%s) rc
  timeout "${PER_RUN_TIMEOUT:-90}" "$FXFUSE" run "$@" --compare-cpu --seed 1 --mismatch-frac "${MISMATCH_FRAC:-0.01}" --timeout-s $(( ${PER_RUN_TIMEOUT:-90} - 5 )) < /dev/null > /tmp/mg_one.log 2>&1
  rc=$?
  { echo "===== $label: $FXFUSE run $*"; cat /tmp/mg_one.log; } >> "$LOG"
  if [[ $rc -eq 0 ]]; then
    echo "PASS $label ($(( $(date +%s) - start ))s) $(grep -m1 'fused all-reduce steps' /tmp/mg_one.log | sed 's/.*: //')"
    passed=$((passed + 1))
  else
    echo "FAIL $label (rc $rc, $(( $(date +%s) - start ))s)"; grep -E 'FAIL|error' /tmp/mg_one.log | head -6 | cut -c1-300
    failed=$((failed + 1))
  fi
}
# Every symbol of the graph bound to T (the token symbols of one batch are equal).
symbols() { "$FXFUSE" inspect "$1" 2>/dev/null | awk '/^symbols/ {f=1; next} f && /^  [a-z]/ {print $1; next} {f=0}'; }
for N in "$@"; do
  while IFS='|' read -r g tokens algos; do
    [[ -z "$g" ]] && continue
    [[ -f "$g" ]] || { echo "skip $g (missing)"; continue; }
    syms=$(symbols "$g")
    for T in $tokens; do
      bind=()
      if [[ $T != hint ]]; then for s in $syms; do bind+=(--bind "$s=$T"); done; fi
      for a in $algos; do one "ws$N $(basename "$g") T=$T allreduce=$a" "$g" --world-size "$N" --allreduce "$a" "${bind[@]}"; done
    done
    one "ws$N $(basename "$g") unfused (NCCL collectives)" "$g" --world-size "$N" --passes "$UNFUSED"
  done <<< "$RUNS"
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
