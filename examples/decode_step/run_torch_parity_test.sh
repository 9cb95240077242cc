#!/usr/bin/env bash
# Runs torch_parity_test.py with Debian's python3 and torch against fxfuse ($1); fails, not
# skips, when torch is missing (tools/install_deps.sh installs it with FXFUSE_WITH_TORCH=1).
set -euo pipefail
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "torch is not importable by /usr/bin/python3: install python3-torch (FXFUSE_WITH_TORCH=1 tools/install_deps.sh)"
  exit 1
fi
FXFUSE="$1" exec /usr/bin/python3 examples/decode_step/torch_parity_test.py -v
