#!/usr/bin/env bash
# Runs a torch test script of this directory (TEST.py [FXFUSE]) with Debian's python3 and torch;
# fails, not skips, when torch is missing (tools/install_deps.sh installs it with
# FXFUSE_WITH_TORCH=1). FXFUSE, when given, is the fxfuse binary the test drives.
set -euo pipefail
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "torch is not importable by /usr/bin/python3: install python3-torch (FXFUSE_WITH_TORCH=1 tools/install_deps.sh)"
  exit 1
fi
[[ $# -ge 2 ]] && export FXFUSE="$2"
exec /usr/bin/python3 "examples/decode_step/$1" -v
