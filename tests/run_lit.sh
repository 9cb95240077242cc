#!/usr/bin/env bash
# Runs one golden test file through LLVM 14's lit (tests/lit.cfg.py; see tests/lit.bzl).
# usage: run_lit.sh FXFUSE_BINARY TEST_FILE
set -euo pipefail
lit=/usr/lib/llvm-14/build/utils/lit/lit.py
if [[ ! -f "$lit" ]]; then
  echo "run_lit: $lit not found (apt-get install llvm-14-tools; tools/install_deps.sh)" >&2
  exit 1
fi
exec python3 "$lit" -v --param fxfuse="$1" "$2"
