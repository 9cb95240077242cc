#!/bin/bash
# Builds the attention GPU test and benchmark for sm_90a here and packs them (stripped, xz) into
# .device_attn/attn.tar.xz (git-ignored) for the device tool (`carry: [".device_attn"]`).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
bazel build //kernels/attention:attention_gpu_test //kernels/attention:bench_attention
stage=$(mktemp -d)
cp -f bazel-bin/kernels/attention/attention_gpu_test bazel-bin/kernels/attention/bench_attention "$stage/"
chmod u+w "$stage"/*
strip "$stage"/*
rm -rf .device_attn && mkdir -p .device_attn
tar -C "$stage" -cf - . | xz -T2 -6 > .device_attn/attn.tar.xz
rm -rf "$stage"
ls -la .device_attn
