#!/bin/bash
# Builds the attention GPU test, benchmark and fxfuse (plan-level checks) for sm_90a here and packs them (stripped, xz) into
# .device_attn/attn.tar.xz (git-ignored) for the device tool (`carry: [".device_attn"]`).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
bazel build //tests/kernels/attention:attention_gpu_test //kernels/attention:bench_attention //:fxfuse
stage=$(mktemp -d)
mkdir -p "$stage/lib"
cp -f bazel-bin/tests/kernels/attention/attention_gpu_test bazel-bin/kernels/attention/bench_attention bazel-bin/fxfuse "$stage/"
chmod u+w "$stage"/attention_gpu_test "$stage"/bench_attention "$stage"/fxfuse
strip "$stage"/attention_gpu_test "$stage"/bench_attention "$stage"/fxfuse
# fxfuse's non-system shared libraries (as tests/runtime/stage_device.sh does)
ldd bazel-bin/fxfuse | awk '/=>/ {print $3}' | grep -vE 'libc\.so|libm\.so|libstdc\+\+|libgcc_s|ld-linux|libpthread|libdl\.so|librt\.so' |
  while read -r l; do cp -L "$l" "$stage/lib/"; done
rm -rf .device_attn && mkdir -p .device_attn
tar -C "$stage" -cf - . | xz -T2 -6 > .device_attn/attn.tar.xz
rm -rf "$stage"
ls -la .device_attn
