// One home for how a value enters a paged KV cache (vLLM's reshape_and_cache_flash): the
// 16-bit value itself, or fp8_e4m3(satfinite(f32(x) / scale)). The cache write
// (cache_write.cu) and the small-M GEMM's rotary epilogue (small_m_fp8_gemm.cu) both store with it.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/device/numeric.cuh"
#include "proto/dtype.h"

namespace fxfuse::runtime {

// x (exactly representable in T: read from T or rounded to it) into element i of a cache of
// cache_dtype (T's own, or F8E4M3FN with its scale, [1] fp32 on the device).
template <typename T>
__device__ __forceinline__ void storeCache(void* cache, int64_t i, float x, DType cache_dtype, const float* scale) {
  if (cache_dtype == DType::F8E4M3FN)
    reinterpret_cast<__nv_fp8_storage_t*>(cache)[i] = __nv_cvt_float_to_fp8(x / *scale, __NV_SATFINITE, __NV_E4M3);
  else
    reinterpret_cast<T*>(cache)[i] = kernels::device::D16<T>::FromFloat(x);
}

}  // namespace fxfuse::runtime
