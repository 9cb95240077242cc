#!/usr/bin/env bash
# `fxfuse run --device=cuda` on a machine without a CUDA driver must say exactly that, in one
# line, with exit code 2 (not the CUDA runtime's "driver version is insufficient"). On a
# machine with a driver and a Hopper GPU the run must succeed instead.
set -uo pipefail
FXFUSE="$1"; GRAPH="$2"
T="${TEST_TMPDIR:-$(mktemp -d)}"
"$FXFUSE" run "$GRAPH" --device=cuda >"$T/out" 2>"$T/err"; rc=$?
cat "$T/err"
if ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
  echo "a CUDA driver is installed: the run must pass"
  [[ $rc -eq 0 ]]; exit $?
fi
[[ $rc -eq 2 && $(wc -l <"$T/err") -eq 1 ]] && grep -qx "fxfuse: error: tests/plans/decoder_fp8.fxg: cannot run on the GPU: no CUDA driver found" "$T/err"
