// The row-norm epilogue of the small-M FP8 GEMM (small_m_fp8_gemm.h, SmallMFp8RowNorm): the
// RMSNorm + FP8 quant step after an o/down projection, run by the GEMM's last CTA.
//
//   before (two kernels)                          after (one kernel)
//   GEMM ─► y ─┐                                  GEMM: every CTA stores its tiles of y, then
//   residual ──┴► rms_norm_quant ─► x (FP8)             arrives; the last CTA to arrive reads all
//                 residual <- round16(y + r)            of y and does the norm: x, residual
//
// The next kernel's wait on this grid now covers the norm, so the chain loses a grid boundary.
// The sum of squares follows the row kernel's partition (virtual thread t of norm_threads holds
// vectors t + i * norm_threads, then the warp butterfly, then the per-warp partials in order),
// with every token's virtual warps spread over the CTA's warps, so the bits are the chain's.
#pragma once

#include <cstdint>

#include "kernels/device/numeric.cuh"
#include "kernels/device/reduce.cuh"
#include "kernels/runtime/small_m_fp8_gemm.h"

namespace fxfuse::runtime::small_m {

namespace kd = kernels::device;

// Vector c (8 elements) of row `token` as the norm sees it: y (+ residual), the sum rounded to
// T unless the variance is of the unrounded sum. L2 reads: other CTAs wrote y.
template <typename T>
__device__ __forceinline__ void normSource(const SmallMFp8GemmParams& p, int64_t token, int c, float (&v)[8]) {
  const SmallMFp8RowNorm& q = p.row_norm;
  const uint4* y = reinterpret_cast<const uint4*>(static_cast<const T*>(p.out) + token * p.out_row_stride);
  kd::Unpack8<T>(__ldcg(y + c), v);
  if (!q.residual) return;
  const uint4* r = reinterpret_cast<const uint4*>(static_cast<const T*>(q.residual) + token * q.residual_row_stride);
  float rf[8];
  kd::Unpack8<T>(__ldcg(r + c), rf);
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] += rf[j];
  if (!q.residual_unrounded) kd::Unpack8<T>(kd::Pack8<T>(v), v);
}

// The per-virtual-warp sums of squares of every row into partials[token * virtual warps + vw].
template <typename T>
__device__ void rowSquareSums(const SmallMFp8GemmParams& p, float* partials) {
  const SmallMFp8RowNorm& q = p.row_norm;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int virtual_warps = q.norm_threads / 32, vecs = static_cast<int>(p.N / 8);
  for (int item = warp; item < p.M * virtual_warps; item += warps) {
    const int64_t token = item / virtual_warps;
    const int vt = item % virtual_warps * 32 + lane;
    float sum_sq = 0.0f;
    for (int i = 0; i < q.norm_vecs_per_thread; ++i) {
      const int c = i * q.norm_threads + vt;
      float v[8] = {};
      if (c < vecs) normSource<T>(p, token, c, v);
#pragma unroll
      for (int j = 0; j < 8; ++j) sum_sq += v[j] * v[j];
    }
    sum_sq = kd::WarpAllReduce(sum_sq, kd::SumOp());
    if (lane == 0) partials[item] = sum_sq;
  }
}

// The epilogue proper, in the last CTA: the rows' 1/rms, then x and the residual.
template <typename T>
__device__ void normalizeRows(const SmallMFp8GemmParams& p, float* partials, float* inv) {
  const SmallMFp8RowNorm& q = p.row_norm;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int virtual_warps = q.norm_threads / 32, vecs = static_cast<int>(p.N / 8);
  rowSquareSums<T>(p, partials);
  __syncthreads();
  for (int64_t token = warp; token < p.M; token += warps) {  // BlockAllReduce's last step, per row
    const float* row = partials + token * virtual_warps;
    const float total = kd::WarpAllReduce(lane < virtual_warps ? row[lane] : kd::SumOp::kIdentity, kd::SumOp());
    if (lane == 0) inv[token] = rsqrtf(total / static_cast<float>(p.N) + q.epsilon);
  }
  __syncthreads();
  const kd::ScaleOp op = kd::ScaleOp::Make(*q.scale, q.divide);
  const uint4* weight = static_cast<const uint4*>(q.weight);
  for (int64_t e = threadIdx.x; e < p.M * vecs; e += blockDim.x) {
    const int64_t token = e / vecs;
    const int c = static_cast<int>(e % vecs);
    float s[8];
    normSource<T>(p, token, c, s);
    if (q.residual) {  // round16(y + r), whichever sum the variance took
      const uint4* y = reinterpret_cast<const uint4*>(static_cast<const T*>(p.out) + token * p.out_row_stride);
      uint4* r = reinterpret_cast<uint4*>(static_cast<T*>(q.residual) + token * q.residual_row_stride);
      float a[8], b[8];
      kd::Unpack8<T>(__ldcg(y + c), a);
      kd::Unpack8<T>(__ldcg(r + c), b);
#pragma unroll
      for (int j = 0; j < 8; ++j) a[j] += b[j];
      r[c] = kd::Pack8<T>(a);
    }
    const uint4 n = weight ? kd::NormalizeWeighted8<T>(s, inv[token], __ldg(weight + c))
                           : kd::NormalizeUnweighted8<T>(s, inv[token]);
    *reinterpret_cast<uint2*>(static_cast<uint8_t*>(q.out) + token * q.out_row_stride + c * 8) =
        kd::QuantizePackedToFp8x8<T>(n, op);
  }
}

// Every CTA calls it after storing its outputs; the last to arrive normalizes every row and
// re-arms the counter. `scratch` is shared memory for M * 32 + M floats.
__device__ __forceinline__ void rowNormByLastCta(const SmallMFp8GemmParams& p, float* scratch) {
  __shared__ int last;
  __syncthreads();  // the CTA's stores are issued
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(p.row_norm.arrivals, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  float* inv = scratch + p.M * 32;
  if (p.out_dtype == DType::BF16) normalizeRows<__nv_bfloat16>(p, scratch, inv);
  else normalizeRows<__half>(p, scratch, inv);
  if (threadIdx.x == 0) *p.row_norm.arrivals = 0u;
}

}  // namespace fxfuse::runtime::small_m
