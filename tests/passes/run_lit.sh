#!/usr/bin/env bash
# Runs the RUN lines of one golden test file (see tests/passes/lit.bzl).
# usage: run_lit.sh FXFUSE_BINARY TEST_FILE
set -euo pipefail
fxfuse="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
file="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
dir="$(dirname "$file")"
llvm=/usr/lib/llvm-14/bin
if [[ ! -x "$llvm/FileCheck" ]]; then
  echo "run_lit: $llvm/FileCheck not found (apt-get install llvm-14-tools; tools/install_deps.sh)" >&2
  exit 1
fi
root="$PWD"
data="$root/tests/data"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"

runs=()
cur=""
while IFS= read -r line; do
  if [[ "$line" =~ ^[[:space:]]*(//|#)[[:space:]]*RUN:[[:space:]]?(.*)$ ]]; then
    part="${BASH_REMATCH[2]}"
    if [[ "$part" == *\\ ]]; then
      cur+="${part%\\} "
      continue
    fi
    runs+=("$cur$part")
    cur=""
  fi
done < "$file"
if ((${#runs[@]} == 0)); then
  echo "run_lit: $file has no RUN lines" >&2
  exit 1
fi
n=0
for cmd in "${runs[@]}"; do
  n=$((n + 1))
  cmd="${cmd//%fxfuse/$fxfuse}"
  cmd="${cmd//%data/$data}"
  cmd="${cmd//%s/$file}"
  cmd="${cmd//%S/$dir}"
  cmd="${cmd//%t/$tmp/t$n}"
  cmd="$(sed -E "s#(^|[|;&( ])FileCheck #\1$llvm/FileCheck #g; s#(^|[|;&( ])not #\1$llvm/not #g" <<<"$cmd")"
  echo "RUN[$n]: $cmd"
  if ! bash -o pipefail -c "$cmd"; then
    echo "run_lit: RUN line $n failed: $file" >&2
    exit 1
  fi
done
echo "run_lit: ${#runs[@]} RUN line(s) passed"
