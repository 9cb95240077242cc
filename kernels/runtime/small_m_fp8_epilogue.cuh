// The epilogue arithmetic of fxfuse's small-M FP8 GEMMs (small_m_fp8_gemm.h), shared by the
// mma.sync kernel (M <= 16) and the wgmma kernel (M <= 64): bias reads and output rounding as
// fxfuse's interpreter does them (`scaledMmValues`: the scale product in f32, then acc * scale,
// then + bias, then the output dtype).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/runtime/small_m_fp8_gemm.h"

namespace fxfuse::runtime::small_m {

__device__ __forceinline__ float loadAsFloat(const void* p, int64_t i, DType t) {
  if (t == DType::BF16) return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(p)[i]);
  if (t == DType::F16) return __half2float(reinterpret_cast<const __half*>(p)[i]);
  return reinterpret_cast<const float*>(p)[i];
}

__device__ __forceinline__ void storeRounded(void* p, int64_t i, float v, DType t) {
  if (t == DType::BF16) reinterpret_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else if (t == DType::F16) reinterpret_cast<__half*>(p)[i] = __float2half_rn(v);
  else reinterpret_cast<float*>(p)[i] = v;
}

// scale_x * scale_w, rounded to f32 once.
__device__ __forceinline__ float scaleProduct(const SmallMFp8GemmParams& p) { return __fmul_rn(*p.scale_x, *p.scale_w); }

// out[token, n] = round(sum * scale (+ bias[n])) with scale = scaleProduct(p).
__device__ __forceinline__ void storeOutput(const SmallMFp8GemmParams& p, int64_t token, int64_t n, float sum,
                                            float scale) {
  float v = __fmul_rn(sum, scale);
  if (p.bias) v = __fadd_rn(v, loadAsFloat(p.bias, n, p.bias_dtype));
  storeRounded(p.out, token * p.out_row_stride + n, v, p.out_dtype);
}

}  // namespace fxfuse::runtime::small_m
