#!/bin/bash
# Builds the attention GPU tests (the sm90 kernels, and the paged kernel over a dense cache's
# view), the benchmark and fxfuse (plan-level checks) for sm_90a here and packs them (stripped,
# xz) into .device_attn/attn.tar.xz (git-ignored) for the device tool (`carry: [".device_attn"]`).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
bazel build //tests/kernels/attention:attention_gpu_test //tests/kernels:paged_attention_gpu_test \
  //kernels/attention:bench_attention //:fxfuse
stage=$(mktemp -d)
mkdir -p "$stage/lib"
bins=(tests/kernels/attention/attention_gpu_test tests/kernels/paged_attention_gpu_test kernels/attention/bench_attention fxfuse)
for b in "${bins[@]}"; do
  cp -f "bazel-bin/$b" "$stage/"
  chmod u+w "$stage/$(basename "$b")"
  strip "$stage/$(basename "$b")"
done
# fxfuse's non-system shared libraries (as tests/runtime/stage_device.sh does)
ldd bazel-bin/fxfuse | awk '/=>/ {print $3}' | grep -vE 'libc\.so|libm\.so|libstdc\+\+|libgcc_s|ld-linux|libpthread|libdl\.so|librt\.so' |
  while read -r l; do cp -L "$l" "$stage/lib/"; done
rm -rf .device_attn && mkdir -p .device_attn
tar -C "$stage" -cf - . | xz -T2 -6 > .device_attn/attn.tar.xz
rm -rf "$stage"
ls -la .device_attn
