#!/usr/bin/env bash
# Runs the exporter's torch 1.13 tests end to end: trace with make_fx + functionalize,
# write fxfuse JSON, then `fxfuse inspect --json` on every written file and on the torch
# 2.11 fixtures, comparing op counts with the traced graphs. torch must be importable
# (tools/install_deps.sh installs Debian's python3-torch when FXFUSE_WITH_TORCH=1).
set -euo pipefail
FXFUSE="$(pwd)/$1"
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "torch is not importable by /usr/bin/python3: install python3-torch (FXFUSE_WITH_TORCH=1 tools/install_deps.sh)"
  exit 1
fi
exec /usr/bin/python3 tests/exporter/test_exporter_113.py --inspect-cmd "$FXFUSE inspect {} --json" --fixtures
