#!/bin/bash
# Runs the example: on a GPU machine it must succeed; without one it must exit 2 with a
# one-line "cannot run" reason (never crash).
set -uo pipefail
out=$("$1" 8 2>&1); rc=$?
echo "$out"
if [[ $rc -eq 0 ]]; then grep -q "decoder_example: ok" <<<"$out"; exit $?; fi
[[ $rc -eq 2 ]] && grep -q "cannot run on the GPU" <<<"$out"
