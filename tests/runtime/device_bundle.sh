# Sourced by the device-side scripts (device_final.sh, examples/decode_step/device_run.sh and
# ab_builds.sh): unpack_bundle DIR unpacks .device_rt/bundle.tar.xz (tests/runtime/stage_device.sh)
# into DIR and wraps each binary of the bundle so that it finds the carried shared libraries
# (DIR/lib) without them leaking into python/torch. Returns non-zero when there is no bundle.
# shellcheck shell=bash

unpack_bundle() {
  local dir=$1 b
  mkdir -p "$dir" || return 1
  tar -C "$dir" -xJf .device_rt/bundle.tar.xz || return 1
  for b in fxfuse fxfuse_old bench_kernels decoder_example paged_attention_gpu_test small_m_fp8_gemm_gpu_test \
    small_m_fp8_gated_silu_gpu_test small_m_fp8_rotary_cache_gpu_test rotary_cache_write_gpu_test silu_and_mul_gpu_test attention_gpu_test \
    rms_norm_gpu_test rms_norm_quant_fp8_gpu_test single_key_attention_gpu_test short_attention_gpu_test \
    session_replay_gpu_test index_check_gpu_test; do
    [[ -e $dir/$b ]] || continue
    mv "$dir/$b" "$dir/$b.bin"
    # shellcheck disable=SC2016  # LD_LIBRARY_PATH expands in the wrapper, not here
    printf '#!/bin/bash\nexport LD_LIBRARY_PATH=%s/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\nexec %s/%s.bin "$@"\n' \
      "$dir" "$dir" "$b" > "$dir/$b"
    chmod +x "$dir/$b"
  done
}
