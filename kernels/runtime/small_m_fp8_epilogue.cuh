// The epilogue arithmetic of fxfuse's small-M FP8 GEMMs (small_m_fp8_gemm.h), shared by the
// mma.sync kernel (M <= 16) and the wgmma kernel (M <= 64): bias reads and output rounding as
// fxfuse's interpreter does them (`scaledMmValues`: the scale product in f32, then acc * scale,
// then + bias, then the output dtype), and the gated-SiLU and rotary + KV-cache epilogues after
// that rounding.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/device/numeric.cuh"
#include "kernels/runtime/kv_cache_store.cuh"
#include "kernels/runtime/rotary.cuh"
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

// The rotary + KV-cache epilogue (small_m_fp8_gemm.h) of one rotary pair of GEMM sums: output
// columns n and n + E/2 of `token`, n in the first half of its head. Both are rounded to T as
// the GEMM's output; then, as the cache write does (cache_write.cu): a q head is rotated (in
// place in `out`, or into query_out with `out` raw), a k head rotated into key_cache, a v head
// copied into value_cache, k and v staying raw in `out`; a token without a slot (-1, or outside
// the cache) is left out of the caches.
template <typename T>
__device__ __forceinline__ void storeRotaryPairAs(const SmallMFp8GemmParams& p, int64_t token, int64_t position,
                                                  int64_t slot, int64_t n, float first, float second, float scale) {
  using kernels::device::D16;
  using kernels::device::Round16;
  const ReshapeAndCacheParams& c = p.rotary.cache;
  const int64_t head_size = c.head_size, half = head_size / 2, head = n / head_size;
  const int pair = static_cast<int>(n % head_size);  // rotary pair k: elements k, k + E/2
  const float x1 = Round16<T>(outputValue(p, n, first, scale));
  const float x2 = Round16<T>(outputValue(p, n + half, second, scale));
  const bool rotated = head < c.heads_q + c.heads_kv;
  float2 y = make_float2(x1, x2);
  if (rotated) {
    const float2 cs = rotary::cosSin<T>(c.cos_sin_cache, c.cos_sin_dtype, c.cos_sin_rows, c.cos_sin_stride,
                                        c.rotary_dim, position, pair);
    y = rotary::rotatePair<T>(x1, x2, cs);
  }
  T* row = reinterpret_cast<T*>(p.out) + token * p.out_row_stride;
  const bool query_in_place = head < c.heads_q && !c.query_out;
  row[n] = D16<T>::FromFloat(query_in_place ? y.x : x1);
  row[n + half] = D16<T>::FromFloat(query_in_place ? y.y : x2);
  if (head < c.heads_q) {
    if (c.query_out) {
      T* q = reinterpret_cast<T*>(c.query_out) + token * c.query_out_stride[0] + head * c.query_out_stride[1];
      q[pair] = D16<T>::FromFloat(y.x);
      q[pair + half] = D16<T>::FromFloat(y.y);
    }
    return;
  }
  if (slot < 0 || slot >= c.num_blocks * c.block_size) return;
  const bool key = rotated;
  const int64_t kv_head = head - c.heads_q - (key ? 0 : c.heads_kv);
  const int64_t at = (slot * c.heads_kv + kv_head) * head_size + pair;
  storeCache<T>(key ? c.key_cache : c.value_cache, at, y.x, c.cache_dtype, key ? c.k_scale : c.v_scale);
  storeCache<T>(key ? c.key_cache : c.value_cache, at + half, y.y, c.cache_dtype, key ? c.k_scale : c.v_scale);
}

__device__ __forceinline__ void storeRotaryPair(const SmallMFp8GemmParams& p, int64_t token, int64_t position,
                                                int64_t slot, int64_t n, float first, float second, float scale) {
  if (p.out_dtype == DType::BF16) storeRotaryPairAs<__nv_bfloat16>(p, token, position, slot, n, first, second, scale);
  else storeRotaryPairAs<__half>(p, token, position, slot, n, first, second, scale);
}

}  // namespace fxfuse::runtime::small_m
