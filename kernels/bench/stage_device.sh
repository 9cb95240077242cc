#!/bin/bash
# Builds the GPU tests and the benchmark for sm_90a here and copies them into .device/ (git-
# ignored), which the device tool carries to the GPU machine (`carry: [".device"]`).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
TESTS="rms_norm_gpu_test quant_fp8_gpu_test rms_norm_quant_fp8_gpu_test silu_and_mul_gpu_test"
bazel build //kernels/... 
mkdir -p .device
for t in $TESTS; do cp -f "bazel-bin/kernels/$t" .device/; done
cp -f bazel-bin/kernels/bench/bench_kernels .device/
cp -f kernels/bench/device_tests.sh .device/
chmod u+w .device/*
ls -la .device
