#!/bin/bash
# Builds what the multi-GPU runs need for sm_90a here and packs it into .device_mg/bundle.tar.xz
# (git-ignored through .git/info/exclude), which the device tool carries (`carry: [".device_mg"]`):
# fxfuse, the all-reduce benchmark driver (kernels/allreduce/bench, when it exists) with its
# scripts, and the shared libraries a bare CUDA image lacks (OpenBLAS, libzip, simdjson, ...).
# tests/multigpu/run_x2.sh (and parity.sh) unpack it on the device.
#   tests/multigpu/stage.sh
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.device_mg/' .git/info/exclude 2>/dev/null || echo '/.device_mg/' >> .git/info/exclude
targets=(//:fxfuse)
have_bench=0
if [[ -f kernels/allreduce/bench/BUILD ]] && grep -q 'bench_all_reduce_rms_norm' kernels/allreduce/bench/BUILD; then
  targets+=(//kernels/allreduce/bench:bench_all_reduce_rms_norm)
  have_bench=1
fi
bazel build "${targets[@]}"
bin=$(bazel info bazel-bin)
stage=$(mktemp -d)
mkdir -p "$stage/lib" "$stage/allreduce_bench"
cp -f "$bin/fxfuse" "$stage/"
if [[ $have_bench == 1 ]]; then
  cp -f "$bin/kernels/allreduce/bench/bench_all_reduce_rms_norm" kernels/allreduce/bench/*.py \
    kernels/allreduce/bench/*.sh "$stage/allreduce_bench/"
fi
# What was staged: the commit, and whether the tree had uncommitted changes then.
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (+ uncommitted changes)')" > "$stage/COMMIT"
chmod -R u+w "$stage"
strip "$stage/fxfuse"
[[ $have_bench == 1 ]] && strip "$stage/allreduce_bench/bench_all_reduce_rms_norm"
# Non-system shared libraries (glibc, libstdc++ and libgcc come from the image).
ldd "$bin/fxfuse" | awk '/=>/ {print $3}' | grep -vE 'libc\.so|libm\.so|libstdc\+\+|libgcc_s|ld-linux|libpthread|libdl\.so|librt\.so' |
  while read -r l; do cp -L "$l" "$stage/lib/"; done
rm -rf .device_mg && mkdir -p .device_mg
tar -C "$stage" -cf - . | xz -T2 -6 > .device_mg/bundle.tar.xz
rm -rf "$stage"
ls -la .device_mg
