// vLLM's rotary_embedding with the rounding of fxfuse's generated rotary (compiler/lowering/
// codegen.cc emitRotary): cos and sin rounded to the model dtype T, each product rounded, then
// the sum. One home for that rounding: the cache write (cache_write.cu) and the attention that
// rotates its own query and keys (short_attention.cu) both rotate with these.
#pragma once

#include <cstdint>

#include "kernels/device/numeric.cuh"
#include "proto/dtype.h"

namespace fxfuse::runtime::rotary {

// Element i of a cos | sin table of dtype t (BF16, F16 or F32) as fp32.
__device__ __forceinline__ float tableValue(const void* table, int64_t i, DType t) {
  if (t == DType::F32) return reinterpret_cast<const float*>(table)[i];
  if (t == DType::BF16)
    return kernels::device::D16<__nv_bfloat16>::ToFloat(reinterpret_cast<const __nv_bfloat16*>(table)[i]);
  return kernels::device::D16<__half>::ToFloat(reinterpret_cast<const __half*>(table)[i]);
}

// Asks L2 for the table row of `pos` (its cos | sin, rotary_dim elements), one prefetch per
// 128-byte line, so that the loads of cosSin after it hit L2 instead of DRAM. A hint only:
// nothing is read, and a position off the table asks for nothing.
__device__ __forceinline__ void prefetchTableRow(const void* table, DType table_dtype, int64_t rows, int64_t stride,
                                                 int64_t rotary_dim, int64_t pos) {
  if (pos < 0 || pos >= rows) return;
  const int64_t elem_bytes = table_dtype == DType::F32 ? 4 : 2;
  const char* row = static_cast<const char*>(table) + pos * stride * elem_bytes;
  const int64_t bytes = rotary_dim * elem_bytes;
  for (int64_t b = 0; b < bytes; b += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(row + b));
  asm volatile("prefetch.global.L2 [%0];" ::"l"(row + bytes - 1));  // the row's last line, where it starts mid-line
}

// cos and sin of rotary pair k at position `pos` of a [rows, rotary_dim] table (cos | sin, row
// stride `stride`), rounded to T; 1 and 0 off the table (that token is left unrotated).
template <typename T>
__device__ __forceinline__ float2 cosSin(const void* table, DType table_dtype, int64_t rows, int64_t stride,
                                         int64_t rotary_dim, int64_t pos, int k) {
  if (pos < 0 || pos >= rows) return make_float2(1.0f, 0.0f);
  const int64_t i = pos * stride + k;
  return make_float2(kernels::device::Round16<T>(tableValue(table, i, table_dtype)),
                     kernels::device::Round16<T>(tableValue(table, i + rotary_dim / 2, table_dtype)));
}

// The two elements of rotary pair k in a head: the halves' k-th (neox) or elements 2k, 2k + 1.
__device__ __forceinline__ int2 pairElements(bool neox, int64_t rotary_dim, int k) {
  return neox ? make_int2(k, k + static_cast<int>(rotary_dim / 2)) : make_int2(2 * k, 2 * k + 1);
}

// (x1, x2) rotated by (cos, sin): round(round(x1 c) - round(x2 s)), round(round(x2 c) + round(x1 s)).
template <typename T>
__device__ __forceinline__ float2 rotatePair(float x1, float x2, float2 cs) {
  using kernels::device::Round16;
  const float a = Round16<T>(__fmul_rn(x1, cs.x)), b = Round16<T>(__fmul_rn(x2, cs.y));
  const float c = Round16<T>(__fmul_rn(x2, cs.x)), d = Round16<T>(__fmul_rn(x1, cs.y));
  return make_float2(Round16<T>(__fsub_rn(a, b)), Round16<T>(__fadd_rn(c, d)));
}

}  // namespace fxfuse::runtime::rotary
