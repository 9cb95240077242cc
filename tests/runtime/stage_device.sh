#!/bin/bash
# Builds fxfuse, the build-time example and the GPU tests of the runtime's kernels (paged
# attention, rotary cache write, small-M GEMM and its gated-SiLU and rotary epilogues, SiLU-and-mul, RMSNorm
# with and without FP8 quant, single-key and short attention, attention) and of
# Session::replay (session_replay_gpu_test) and of the index checks (index_check_gpu_test) for sm_90a here and
# packs them, with the shared libraries they need that a bare CUDA image may lack (OpenBLAS,
# libzip, simdjson and their dependencies), into .device_rt/bundle.tar.xz (git-ignored via .git/info/exclude), which the
# device tool carries (`carry: [".device_rt"]`). tests/runtime/device_final.sh unpacks it there.
# SLIM=1 leaves decoder_example out (device_final.sh then skips the example) and packs with
# xz -9 with a 128 MiB dictionary (two fxfuse binaries share most of their bytes, which a
# dictionary larger than one binary finds): the bundle and the tracked files must fit the
# device tool's 64 MiB carry together.
# AB_BASELINE=path/to/an/older/fxfuse packs that binary as fxfuse_old for
# examples/decode_step/ab_builds.sh and, to stay within the carry, only the paged, rotary,
# small-M GEMM, SiLU-and-mul, RMSNorm and replay GPU tests (implies SLIM=1). The bundle also holds
# examples/decode_step/paged_read_bench, cluster_residency_probe, persistent_layer_bench and weight_stream_bench.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.device_rt/' .git/info/exclude 2>/dev/null || echo '/.device_rt/' >> .git/info/exclude
bazel build //:fxfuse //examples/decoder_fp8:decoder_example //tests/kernels:paged_attention_gpu_test \
  //tests/kernels:small_m_fp8_gemm_gpu_test //tests/kernels:small_m_fp8_gated_silu_gpu_test \
  //tests/kernels:small_m_fp8_rotary_cache_gpu_test \
  //tests/kernels:rotary_cache_write_gpu_test //tests/kernels:silu_and_mul_gpu_test \
  //tests/kernels:rms_norm_gpu_test //tests/kernels:rms_norm_quant_fp8_gpu_test \
  //tests/kernels:single_key_attention_gpu_test //tests/kernels:short_attention_gpu_test //tests/kernels/attention:attention_gpu_test //examples/decode_step:paged_read_bench \
  //examples/decode_step:cluster_residency_probe //examples/decode_step:persistent_layer_bench //examples/decode_step:weight_stream_bench \
  //tests/runtime:session_replay_gpu_test //tests/runtime:index_check_gpu_test //kernels/bench:bench_kernels
bin=$(bazel info bazel-bin)
stage=$(mktemp -d)
mkdir -p "$stage/lib"
tests=(paged_attention_gpu_test small_m_fp8_gemm_gpu_test small_m_fp8_gated_silu_gpu_test small_m_fp8_rotary_cache_gpu_test
  rotary_cache_write_gpu_test
  silu_and_mul_gpu_test rms_norm_gpu_test rms_norm_quant_fp8_gpu_test single_key_attention_gpu_test
  short_attention_gpu_test attention/attention_gpu_test)
bins=(fxfuse)
if [[ -n ${AB_BASELINE:-} ]]; then
  SLIM=1
  tests=(paged_attention_gpu_test rotary_cache_write_gpu_test small_m_fp8_gemm_gpu_test small_m_fp8_rotary_cache_gpu_test
    silu_and_mul_gpu_test
    rms_norm_gpu_test rms_norm_quant_fp8_gpu_test)
  cp -f "$AB_BASELINE" "$stage/fxfuse_old"
  bins+=(fxfuse_old)
fi
[[ ${SLIM:-0} == 1 ]] || bins+=(decoder_example)
cp -f "$bin/fxfuse" "${tests[@]/#/$bin/tests/kernels/}" "$bin/examples/decode_step/paged_read_bench" \
  "$bin/examples/decode_step/cluster_residency_probe" "$bin/examples/decode_step/persistent_layer_bench" "$bin/examples/decode_step/weight_stream_bench" "$stage/"
cp -f "$bin/tests/runtime/session_replay_gpu_test" "$bin/tests/runtime/index_check_gpu_test" "$stage/"  # the runtime's own GPU tests (tests/runtime)
cp -f "$bin/kernels/bench/bench_kernels" "$stage/"  # the row kernels' benchmark (docs/kernels.md)
bins+=(bench_kernels)
tests+=(session_replay_gpu_test index_check_gpu_test)
[[ ${SLIM:-0} == 1 ]] || cp -f "$bin/examples/decoder_fp8/decoder_example" "$stage/"
tests=("${tests[@]##*/}")
chmod u+w "${bins[@]/#/$stage/}" "${tests[@]/#/$stage/}"
strip "${bins[@]/#/$stage/}" "${tests[@]/#/$stage/}"
# Non-system shared libraries (glibc, libstdc++ and libgcc come from the image).
ldd "$bin/fxfuse" | awk '/=>/ {print $3}' | grep -vE 'libc\.so|libm\.so|libstdc\+\+|libgcc_s|ld-linux|libpthread|libdl\.so|librt\.so' |
  while read -r l; do cp -L "$l" "$stage/lib/"; done
# CUPTI for `fxfuse bench --timeline` (opened with dlopen, so ldd does not list it): the
# device's toolkit or torch may lack it or carry an older one.
cp -L /usr/local/cuda/lib64/libcupti.so.13 "$stage/lib/"
# What was built: the commit and whether the tree had uncommitted changes (device_final.sh prints it).
{ git log -1 --format='commit %h %s'; git status --short --untracked-files=no | sed 's/^/  modified: /'; } > "$stage/STAGED_FROM"
rm -rf .device_rt && mkdir -p .device_rt
tar -C "$stage" -cf - . | xz -T2 "$([[ ${SLIM:-0} == 1 ]] && echo --lzma2=preset=9e,dict=128MiB || echo -6)" > .device_rt/bundle.tar.xz
rm -rf "$stage"
ls -la .device_rt
