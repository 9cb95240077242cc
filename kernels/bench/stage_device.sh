#!/bin/bash
# Builds the GPU tests and the benchmark for sm_90a here and packs them (stripped, xz) into
# .device/device.tar.xz (git-ignored), which the device tool carries to the GPU machine
# (`carry: [".device"]`); unpack there with
#   mkdir -p /tmp/d && tar -C /tmp/d -xJf .device/device.tar.xz
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
TESTS="rms_norm_gpu_test quant_fp8_gpu_test rms_norm_quant_fp8_gpu_test silu_and_mul_gpu_test"
bazel build //kernels/...
stage=$(mktemp -d)
for t in $TESTS; do cp -f "bazel-bin/tests/kernels/$t" "$stage/"; done
cp -f bazel-bin/kernels/bench/bench_kernels kernels/bench/device_tests.sh "$stage/"
chmod u+w "$stage"/*
strip "$stage"/*_test "$stage"/bench_kernels
rm -rf .device && mkdir -p .device
tar -C "$stage" -cf - . | xz -T2 -6 > .device/device.tar.xz
rm -rf "$stage"
ls -la .device
