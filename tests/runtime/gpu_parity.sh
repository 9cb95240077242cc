#!/bin/bash
# GPU parity (tag gpu): every graph given is compiled, lowered and run on the GPU with
# seeded inputs, and its outputs are compared with the CPU interpreter's on the same inputs
# (`fxfuse run --compare-cpu`): fused (the default pipeline) and unfused (canonicalization
# only, no fusion pass). Graph files: .fxg, .fxg.json, .core_aten.pt2, .train_ir.pt2 (others
# are skipped). A run whose outputs differ passes only if `fxfuse run` proves, node by node,
# that every kernel is within one rounding step on its own inputs (docs/runtime.md "Parity").
# A graph marked `// PARITY: refused` is a refusal test: it passes when the run exits 2 with
# one "lowering:" line (the GPU path refuses it as the compiler does).
# Compile flags of a run: a `// PARITY-FLAGS: --kv-cache=bf16` line in the graph, or a
# `GRAPH::FLAGS` argument (`x.fxg.json::--kv-cache=fp8`: flags separated by spaces). With
# --kv-cache, the unfused variant runs the kv-cache pass too (it adds the plan's inputs).
# Environment of a run: a `// PARITY-ENV: FXFUSE_OWN_GEMM=always` line (VAR=value words).
# Runs JOBS at a time. Prints one line per run and "N passed, M failed, K skipped" last.
# PARITY_DEADLINE (epoch seconds): runs that would start after it are skipped (SKIP, counted
# as failures) and no run outlives it, so a time-boxed caller still gets every status line.
#   tests/runtime/gpu_parity.sh FXFUSE GRAPH...
#   (env: JOBS=8, LOG=file, PARITY_TIMEOUT=120, PARITY_DEADLINE, MISMATCH_FRAC=0.01)
set -uo pipefail
FXFUSE="$1"; shift
JOBS=${JOBS:-8}
LOG=${LOG:-/dev/null}
UNFUSED=functionalize,noop-elimination,complex-to-real,canonicalize-ops,canonicalize-norm,canonicalize-quant,canonicalize-activation,dce,cleanup
runs=()
for f in "$@"; do
  case "${f%%::*}" in
    *.fxg|*.fxg.json|*.core_aten.pt2|*.train_ir.pt2) runs+=("$f|fused" "$f|unfused") ;;
  esac
done
set -- "${runs[@]}"
tmp=$(mktemp -d)
export FXFUSE tmp UNFUSED
run_one() {
  f="${1%|*}"; variant="${1##*|}"; key=$(echo "$1" | tr '/| =:' '_____')
  flags=()
  if [[ $f == *::* ]]; then read -ra flags <<< "${f#*::}"; f="${f%%::*}"
  else read -ra flags <<< "$(sed -n 's|^// PARITY-FLAGS: *||p' "$f" 2>/dev/null | head -1)"; fi
  unfused=$UNFUSED
  [[ " ${flags[*]:-} " == *" --kv-cache="* ]] && unfused="${UNFUSED%,cleanup},kv-cache,cleanup"
  extra=("${flags[@]}")
  [[ $variant == unfused ]] && extra+=(--passes "$unfused")
  start=$(date +%s)
  limit=${PARITY_TIMEOUT:-120}
  if [[ -n ${PARITY_DEADLINE:-} ]]; then
    left=$(( PARITY_DEADLINE - start ))
    if (( left <= 0 )); then echo "SKIP $f $variant (time budget)" > "$tmp/$key.status"; return; fi
    (( left < limit )) && limit=$left
  fi
  read -ra run_env <<< "$(sed -n 's|^// PARITY-ENV: *||p' "$f" 2>/dev/null | head -1)"
  timeout "$limit" env "${run_env[@]}" "$FXFUSE" run "$f" --device=cuda --compare-cpu --seed 1 --mismatch-frac "${MISMATCH_FRAC:-0.01}" "${extra[@]}" > "$tmp/$key.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  if grep -q '^// PARITY: refused' "$f"; then
    if [[ $rc -eq 2 ]] && [[ $(grep -c 'lowering:' "$tmp/$key.log") -eq 1 ]]; then
      echo "PASS $f $variant (refused as expected, ${secs}s)"
    else
      echo "FAIL $f $variant (rc $rc, expected one refusal line and rc 2, ${secs}s)"
    fi > "$tmp/$key.status"
  elif [[ $rc -eq 0 ]]; then echo "PASS $f $variant (${secs}s)"; else echo "FAIL $f $variant (rc $rc, ${secs}s)"; fi > "$tmp/$key.status"
}
export -f run_one
printf '%s\n' "$@" | xargs -P "$JOBS" -I{} bash -c 'run_one "$@"' _ {}
passed=0; failed=0; skipped=0
for f in "$@"; do
  key=$(echo "$f" | tr '/| =:' '_____')
  cat "$tmp/$key.status" 2>/dev/null || echo "FAIL $f (no status)"
  { echo "===== $f"; cat "$tmp/$key.log" 2>/dev/null; } >> "$LOG"
  if grep -q '^PASS' "$tmp/$key.status"; then passed=$((passed + 1))
  elif grep -q '^SKIP' "$tmp/$key.status"; then skipped=$((skipped + 1))
  else failed=$((failed + 1)); tail -14 "$tmp/$key.log" | cut -c1-400; fi
done
rm -rf "$tmp"
echo "$passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 && $skipped -eq 0 ]]
