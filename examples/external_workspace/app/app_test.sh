#!/bin/bash
# Runs the app: on a GPU machine it must succeed; without one it must exit 2 with a
# one-line "cannot run on the GPU" reason.
set -uo pipefail
out=$("$1" 2>&1); rc=$?
echo "$out"
if [[ $rc -eq 0 ]]; then grep -q "^app: ok" <<<"$out"; exit $?; fi
[[ $rc -eq 2 && $(wc -l <<<"$out") -eq 1 ]] && grep -q "cannot run on the GPU" <<<"$out"
