#!/bin/bash
# Tensor-parallel parity on the GPUs of one host (tag gpu, not run in CI): for each world size
# given, `fxfuse run --world-size N --compare-cpu` on the TP FP8 Llama graphs, every rank against
# its own lockstep CPU reference (all-reduce simulated: fp32 sum in rank order, one rounding),
# with each way the fused all-reduce steps can run (--allreduce auto, oneshot, twoshot, nccl),
# at a few token counts, plus the unfused plan (NCCL Collective steps). When a rank's outputs
# differ, every rank runs the node-by-node proof (collectives on all ranks' GPU inputs,
# docs/runtime.md "Parity at world size > 1"); the PASS line says how many ranks passed that
# way. An algorithm written ALGO+nodes runs with --check-nodes: the proof runs even when the
# outputs match, and the run passes only if every rank prints "node check (rank r of N):
# PROVEN" (the collective check on real GPU data). One line per run, "N passed, M failed, K skipped" last; full logs in $LOG.
#   tests/multigpu/parity.sh [FXFUSE] N...        e.g. tests/multigpu/parity.sh 2 4 8
# FXFUSE defaults to the staged binary (tests/multigpu/stage.sh, unpacked here), else
# bazel-bin/fxfuse. Env: RUNS, PER_RUN_TIMEOUT (90 s), LOG, DEADLINE (epoch seconds: runs
# that would end after it are skipped, so the summary always prints), CPU_ONLY=1 (every run
# with --cpu-only: lowering and the lockstep CPU reference, no GPU; tests this script here).
set -uo pipefail
cd "$(dirname "$0")/../.."
if [[ $# -gt 0 && ! "$1" =~ ^[0-9]+$ ]]; then FXFUSE="$1"; shift
elif [[ -f .device_mg/bundle.tar.xz ]]; then source tests/multigpu/unpack.sh
else FXFUSE=bazel-bin/fxfuse; fi
[[ $# -gt 0 ]] || { echo "usage: tests/multigpu/parity.sh [FXFUSE] N..."; exit 2; }
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LOG=${LOG:-/dev/null}
DEADLINE=${DEADLINE:-$(( $(date +%s) + 100000 ))}
extra=(); [[ "${CPU_ONLY:-0}" == 1 ]] && extra=(--cpu-only)
one_log=$(mktemp /tmp/mg_one.XXXXXX)
# Runs: "GRAPH|TOKENS|ALGOS|UNFUSED" (TOKENS "hint": the graph's own symbol hints; UNFUSED
# "-": no unfused run for that line), most important first (a DEADLINE skips the tail). The
# vLLM all-reduce fixtures (FP8 and bf16: the latter has bf16 matmuls only, no FP8 GEMM
# accumulation differences, the cleanest check of the reduction) and the TP FP8 Llama with
# every algorithm; the 32-layer fixture stays at its hint (its CPU reference is the slow part).
# Tolerances as tests/runtime/gpu_parity.sh (MISMATCH_FRAC 0.01).
ALL="auto oneshot twoshot nccl"
RUNS=${RUNS:-"tests/data/vllm/vllm_allreduce_fp8_custom.post_grad.fxg.json|1000|$ALL twoshot+nodes|unfused
tests/data/vllm/vllm_allreduce_custom.post_grad.fxg.json|300|$ALL oneshot+nodes|unfused
tests/plans/tp_llama_fp8.fxg|16|$ALL nccl+nodes|unfused
tests/plans/tp_llama_fp8.fxg|2048|$ALL|-
tests/data/vllm/vllm_allreduce_fp8_custom.post_grad.fxg.json|2|auto|-
tests/data/vllm/vllm_llama32_fp8_custom.post_grad.fxg.json|hint|auto|unfused"}
UNFUSED=functionalize,noop-elimination,complex-to-real,canonicalize-ops,canonicalize-norm,canonicalize-quant,canonicalize-activation,dce,cleanup
passed=0; failed=0; skipped=0
one() {  # one LABEL ARGS...   (env NEED_PROVEN=N: N ranks must print a PROVEN node check)
  local label="$1"; shift
  local start=$(date +%s) rc limit=${PER_RUN_TIMEOUT:-90}
  local left=$(( DEADLINE - start ))
  (( left < limit )) && limit=$left
  if (( left < 15 )); then echo "SKIP $label (${left}s left before the deadline)"; skipped=$((skipped + 1)); return; fi
  # The launcher's own --timeout-s stops hung ranks first (one line naming the rank); `timeout`
  # -k is the last resort.
  timeout -k 5 "$limit" "$FXFUSE" run "$@" "${extra[@]}" --compare-cpu --seed 1 --mismatch-frac "${MISMATCH_FRAC:-0.01}" \
    --timeout-s $(( limit - 5 )) < /dev/null > "$one_log" 2>&1
  rc=$?
  { echo "===== $label: $FXFUSE run $* ${extra[*]} (rc $rc, $(( $(date +%s) - start ))s)"; cat "$one_log"; } >> "$LOG"
  local by_nodes proven; by_nodes=$(grep -c 'compare-cpu: PASS (node-by-node)' "$one_log")
  proven=$(grep -cE 'node check \(rank [0-9]+ of [0-9]+\): PROVEN' "$one_log")
  if [[ $rc -eq 0 && "${CPU_ONLY:-0}" != 1 && $proven -lt ${NEED_PROVEN:-0} ]]; then
    echo "FAIL $label (node check PROVEN on $proven of ${NEED_PROVEN} ranks)"
    grep -E 'node check|beyond one rounding' "$one_log" | grep -v ' 0 beyond' | head -8 | cut -c1-300
    failed=$((failed + 1))
  elif [[ $rc -eq 0 ]]; then
    echo "PASS $label ($(( $(date +%s) - start ))s)$( ((by_nodes > 0)) && echo " [$by_nodes rank(s) by the node-by-node proof]") $(grep -m1 'fused all-reduce steps' "$one_log" | sed 's/.*: //')"
    passed=$((passed + 1))
  else
    echo "FAIL $label (rc $rc, $(( $(date +%s) - start ))s)"
    grep -E 'FAIL|error|not proven|beyond one rounding|compare-cpu' "$one_log" | grep -v ' 0 beyond' | head -8 | cut -c1-300
    failed=$((failed + 1))
  fi
}
# Every symbol of the graph bound to T (the token symbols of one batch are equal).
symbols() { "$FXFUSE" inspect "$1" 2>/dev/null | awk '/^symbols/ {f=1; next} f && /^  [a-z]/ {print $1; next} {f=0}'; }
for N in "$@"; do
  while IFS='|' read -r g tokens algos unfused; do
    [[ -z "$g" ]] && continue
    [[ -f "$g" ]] || { echo "skip $g (missing)"; continue; }
    syms=$(symbols "$g")
    for T in $tokens; do
      bind=()
      if [[ $T != hint ]]; then for s in $syms; do bind+=(--bind "$s=$T"); done; fi
      for a in $algos; do
        if [[ $a == *+nodes ]]; then
          NEED_PROVEN=$N one "ws$N $(basename "$g") T=$T allreduce=${a%+nodes} --check-nodes" "$g" --world-size "$N" \
            --allreduce "${a%+nodes}" --check-nodes "${bind[@]}"
        else
          one "ws$N $(basename "$g") T=$T allreduce=$a" "$g" --world-size "$N" --allreduce "$a" "${bind[@]}"
        fi
      done
    done
    [[ "$unfused" == "-" ]] || one "ws$N $(basename "$g") unfused (NCCL collectives)" "$g" --world-size "$N" --passes "$UNFUSED"
  done <<< "$RUNS"
done
rm -f "$one_log"
echo "$passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 && $passed -gt 0 ]]
