// The element reads and output rounding the runtime's attention kernels share (the reference
// kernel, attention_ref.cu, and the single-key copy, single_key_attention.cu), so that a kernel
// that claims the reference's rounding has it by construction.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/runtime/attention.h"
#include "kernels/types.h"

namespace fxfuse::runtime::attention_io {

// Element i of `p` as fp32: BF16, F16, F32, or BOOL (1 or 0); 0 for other dtypes.
__device__ __forceinline__ float loadAs(const void* p, int64_t i, DType t) {
  switch (t) {
    case DType::BF16: return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(p)[i]);
    case DType::F16: return __half2float(reinterpret_cast<const __half*>(p)[i]);
    case DType::F32: return reinterpret_cast<const float*>(p)[i];
    case DType::BOOL: return reinterpret_cast<const unsigned char*>(p)[i] ? 1.0f : 0.0f;
    default: return 0.0f;
  }
}

// x rounded to a 16-bit dtype (round to nearest even), unchanged for others.
__device__ __forceinline__ float roundTo(float x, DType t) {
  if (t == DType::BF16) return __bfloat162float(__float2bfloat16_rn(x));
  if (t == DType::F16) return __half2float(__float2half_rn(x));
  return x;
}

// Output element i = o in p.out_dtype; FP8: fp8(clamp(roundTo(o, round_dtype) * inv_scale,
// ±448)) with inv_scale = 1 / *p.out_scale, NaN kept (attention_quant's rounding).
__device__ __forceinline__ void storeOutput(const AttentionParams& p, int64_t i, float o, float inv_scale) {
  switch (p.out_dtype) {
    case DType::BF16: reinterpret_cast<__nv_bfloat16*>(p.out)[i] = __float2bfloat16_rn(o); break;
    case DType::F16: reinterpret_cast<__half*>(p.out)[i] = __float2half_rn(o); break;
    case DType::F32: reinterpret_cast<float*>(p.out)[i] = o; break;
    case DType::F8E4M3FN: {
      float x = roundTo(o, p.round_dtype) * inv_scale;
      x = fminf(fmaxf(x, -kernels::kFp8E4m3Max), kernels::kFp8E4m3Max);  // NaN passes through fminf/fmaxf as the other operand: keep it
      if (o != o) x = o;
      reinterpret_cast<__nv_fp8_e4m3*>(p.out)[i] = __nv_fp8_e4m3(x);
      break;
    }
    default: break;
  }
}

}  // namespace fxfuse::runtime::attention_io
