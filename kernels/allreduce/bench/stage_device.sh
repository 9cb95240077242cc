#!/bin/bash
# Builds the all-reduce GPU test and benchmark for sm_90a here and packs them with the scripts
# into .device_allreduce/ (git-ignored; add `/.device_allreduce/` to .git/info/exclude), which
# the device tool carries to the GPU machine (`carry: [".device_allreduce"]`); there:
#   mkdir -p /tmp/ar && tar -C /tmp/ar -xJf .device_allreduce/ar.tar.xz && /tmp/ar/device_run.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
bazel build //tests/kernels:all_reduce_rms_norm_gpu_test //kernels/allreduce/bench:bench_all_reduce_rms_norm
stage=$(mktemp -d)
cp -f bazel-bin/tests/kernels/all_reduce_rms_norm_gpu_test bazel-bin/kernels/allreduce/bench/bench_all_reduce_rms_norm \
  kernels/allreduce/bench/*.py kernels/allreduce/bench/*.sh "$stage/"
chmod u+w "$stage"/*
strip "$stage/all_reduce_rms_norm_gpu_test" "$stage/bench_all_reduce_rms_norm"
rm -rf .device_allreduce && mkdir -p .device_allreduce
tar -C "$stage" -cf - . | xz -T2 -6 > .device_allreduce/ar.tar.xz
rm -rf "$stage"
ls -la .device_allreduce
