#!/usr/bin/env bash
# GPU half of the model zoo (docs/zoo.md): on an H200, runs every zoo graph's plan with
# `fxfuse run --device=cuda --compare-cpu` (plan parity against the CPU interpreter) and, for
# .pt2 archives that keep their weights, the plan on torch's input against torch's reference
# logits; also the CI commands, so one table has every column. Writes OUT/gpu_zoo.md (markdown
# table + summary + the command), OUT/gpu_zoo.json and OUT/gpu_zoo.txt (the console table).
#
#   tools/zoo/gpu_zoo.sh [FXFUSE] [ZOO_DIR] [OUT]
#     FXFUSE   default: bazel-bin/fxfuse, else fxfuse on PATH
#     ZOO_DIR  default: tests/data/zoo
#     OUT      default: $OUT, else /tmp/gpu_zoo
# Exit 0 when nothing crashed (refusals and mismatches are results, listed in the table);
# 1 when a graph crashed (signal, exit 3) or timed out; 2 on bad arguments.
set -u
here=$(cd "$(dirname "$0")" && pwd)
fxfuse=${1:-}
if [ -z "$fxfuse" ]; then
  if [ -x bazel-bin/fxfuse ]; then fxfuse=bazel-bin/fxfuse; else fxfuse=$(command -v fxfuse || true); fi
fi
zoo=${2:-tests/data/zoo}
out=${3:-${OUT:-/tmp/gpu_zoo}}
if [ -z "$fxfuse" ] || [ ! -x "$fxfuse" ]; then
  echo "gpu_zoo.sh: no fxfuse binary (give its path as the first argument)" >&2
  exit 2
fi
if [ ! -d "$zoo" ]; then
  echo "gpu_zoo.sh: $zoo: no such directory" >&2
  exit 2
fi
mkdir -p "$out" || exit 2
jobs=${GPU_ZOO_JOBS:-8}
commands=${GPU_ZOO_COMMANDS:-inspect,compile,plan,verify,explain,cpu_vs_torch,run,vs_torch}
cmdline="tools/zoo/gpu_zoo.sh $fxfuse $zoo \$OUT  (GPU_ZOO_JOBS=$jobs)"
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
gpu=${gpu:-no nvidia-smi}
echo "gpu_zoo: $zoo on $gpu"
PYTHONUNBUFFERED=1 python3 "$here/check_zoo.py" --fxfuse "$fxfuse" --dir "$zoo" --commands "$commands" \
  --jobs "$jobs" --timeout 300 --report-only --markdown "$out/gpu_zoo.table.md" --json "$out/gpu_zoo.json" \
  | tee "$out/gpu_zoo.txt"
rc=${PIPESTATUS[0]}
{
  echo "# Model zoo on the GPU"
  echo
  echo "Made by \`$cmdline\` on $(date -u +%Y-%m-%dT%H:%MZ) ($gpu)."
  echo "Columns: docs/zoo.md. \`n/a\`: the check does not apply (no weights in the file, no reference)."
  echo
  cat "$out/gpu_zoo.table.md"
  echo
  echo "## Reasons"
  echo
  sed -n '/^reasons:/,/^$/p' "$out/gpu_zoo.txt" | sed '1d' | sed 's/^  /- /'
} > "$out/gpu_zoo.md"
echo "gpu_zoo: wrote $out/gpu_zoo.md (exit $rc)"
exit "$rc"
