// The epilogue arithmetic of fxfuse's small-M FP8 GEMMs (small_m_fp8_gemm.h), shared by the
// mma.sync kernel (M <= 16) and the wgmma kernel (M <= 64): bias reads and output rounding as
// fxfuse's interpreter does them (`scaledMmValues`: the scale product in f32, then acc * scale,
// then + bias, then the output dtype), and the gated-SiLU epilogue after that rounding.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/device/numeric.cuh"
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

// sum * scale (+ bias[n]) in f32, scale = scaleProduct(p), before the output rounding.
__device__ __forceinline__ float outputValue(const SmallMFp8GemmParams& p, int64_t n, float sum, float scale) {
  float v = __fmul_rn(sum, scale);
  if (p.bias) v = __fadd_rn(v, loadAsFloat(p.bias, n, p.bias_dtype));
  return v;
}

// out[token, n] = round(sum * scale (+ bias[n])).
__device__ __forceinline__ void storeOutput(const SmallMFp8GemmParams& p, int64_t token, int64_t n, float sum,
                                            float scale) {
  storeRounded(p.out, token * p.out_row_stride + n, outputValue(p, n, sum, scale), p.out_dtype);
}

// The gated-SiLU epilogue (small_m_fp8_gemm.h) of one gate/up pair of GEMM sums:
// fp8(round16(round16(silu(g)) * u) op scale), g and u rounded to out_dtype as the GEMM's output.
__device__ __forceinline__ uint8_t gatedSiluOutput(const SmallMFp8GemmParams& p, int64_t n_gate, float gate_sum,
                                                   float up_sum, float scale) {
  namespace kd = kernels::device;
  const SmallMFp8GatedSilu& e = p.gated_silu;
  const float g = outputValue(p, n_gate, gate_sum, scale), u = outputValue(p, n_gate + p.N / 2, up_sum, scale);
  const float h = p.out_dtype == DType::BF16 ? kd::SiluMul<__nv_bfloat16>(kd::Round16<__nv_bfloat16>(g),
                                                                           kd::Round16<__nv_bfloat16>(u))
                                             : kd::SiluMul<__half>(kd::Round16<__half>(g), kd::Round16<__half>(u));
  return kd::QuantizeToFp8(h, kd::ScaleOp::Make(*e.scale, e.divide));
}

}  // namespace fxfuse::runtime::small_m
