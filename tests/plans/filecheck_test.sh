#!/bin/bash
# Golden plan tests: runs every `// RUN:` line of each .fxg given (FileCheck style; %s is the
# file, `fxfuse` the binary under test) and fails on the first failing pipeline.
set -uo pipefail
FXFUSE="$1"; shift
FILECHECK=${FILECHECK:-/usr/lib/llvm-14/bin/FileCheck}
export PATH="$(dirname "$FILECHECK"):$PATH"
bin_dir=$(mktemp -d)
ln -s "$(realpath "$FXFUSE")" "$bin_dir/fxfuse"
export PATH="$bin_dir:$PATH"
failed=0; ran=0
for f in "$@"; do
  while IFS= read -r line; do
    cmd=${line#*RUN: }
    cmd=${cmd//%s/$f}
    ran=$((ran + 1))
    if ! bash -c "set -o pipefail; $cmd" > /tmp/fc_out.$$ 2>&1; then
      echo "FAIL: $f: $cmd"; head -c 3000 /tmp/fc_out.$$; echo; failed=$((failed + 1))
    fi
  done < <(grep -E '^// RUN: ' "$f")
done
rm -rf "$bin_dir" /tmp/fc_out.$$
echo "$ran RUN lines, $failed failed"
[[ $ran -gt 0 && $failed -eq 0 ]]
