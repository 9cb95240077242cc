#!/usr/bin/env bash
# Builds the fxfuse CLI and installs it as PREFIX/bin/fxfuse, so `fxfuse ...` works from any
# directory (relative paths then mean what they say, with no `bazel run` in between).
#
#   tools/install.sh [PREFIX]       # default PREFIX: $HOME/.local
#
# FXFUSE_BINARY=path skips the build and installs that binary (tests use it).
set -euo pipefail
prefix="${1:-$HOME/.local}"
cd "$(dirname "$0")/.."
binary="${FXFUSE_BINARY:-}"
if [[ -z "$binary" ]]; then
  echo "install: bazel build //:fxfuse"
  bazel build //:fxfuse
  binary="$(bazel info bazel-bin)/fxfuse"
fi
[[ -x "$binary" ]] || { echo "install: error: $binary is not an executable" >&2; exit 2; }
mkdir -p "$prefix/bin"
install -m 0755 "$binary" "$prefix/bin/fxfuse.tmp~"
mv -f "$prefix/bin/fxfuse.tmp~" "$prefix/bin/fxfuse"
echo "install: $prefix/bin/fxfuse"
case ":$PATH:" in
  *":$prefix/bin:"*) ;;
  *) echo "install: $prefix/bin is not on PATH; add it, e.g.: export PATH=\"$prefix/bin:\$PATH\"" ;;
esac
