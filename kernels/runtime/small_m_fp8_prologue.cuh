// The prologues of the small-M FP8 GEMM (small_m_fp8_gemm.h, SmallMFp8Prologue): the step that
// writes the GEMM's FP8 activations runs inside the GEMM, so the decode chain loses a launch
// and a dependent round trip through memory per fused pair.
//
//   before (two kernels)                          after (one kernel)
//   input ─┐                                      input ─┐
//   resid ─┴► rms_norm_quant ─► x (fp8) ─► GEMM   resid ─┴► [every CTA: RMSNorm + quant of all
//                                                            rows into shared memory] ─► K loop
//   gate|up ─► silu_and_mul_quant ─► x ─► GEMM    gate|up ─► [each warp: SiLU·mul + quant of its
//                                                            K step, in registers] ─► K loop
//
// Both compute x with the library kernels' helpers (kernels/device/numeric.cuh) and rounding
// points; the norm adds its sum of squares in the row kernel's partition
// (RmsNormQuantFp8RowPartition: virtual thread t of `norm_threads` holds vectors t + i *
// norm_threads), so x is the same bits as the unfused chain's and so is the GEMM's output.
// The norm's in-place residual update is written by the last CTA to have read the residual
// (an arrival counter), after every CTA's reads.
#pragma once

#include <cstdint>

#include "kernels/device/numeric.cuh"
#include "kernels/device/reduce.cuh"
#include "kernels/runtime/small_m_fp8_gemm.h"

namespace fxfuse::runtime::small_m {

namespace kd = kernels::device;

// Bytes per row of the norm prologue's FP8 activations in shared memory: K rounded up to 128
// plus 64, so a quarter-warp's 16-byte reads at (token g, K offset 16 t) fall on distinct banks.
__host__ __device__ constexpr int64_t normActivationStride(int64_t K) { return (K + 127) / 128 * 128 + 64; }

// The values the norm normalizes, vector c (8 elements) of a row: input (+ residual), the sum
// rounded to T unless the variance is of the unrounded sum. Zero past the row.
template <typename T>
__device__ __forceinline__ void normSource(const uint4* in, const uint4* res, bool unrounded, bool valid, int c,
                                           float (&v)[8]) {
  const uint4 x = valid ? in[c] : make_uint4(0, 0, 0, 0);
  kd::Unpack8<T>(x, v);
  if (!res) return;
  float r[8];
  kd::Unpack8<T>(valid ? res[c] : make_uint4(0, 0, 0, 0), r);
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] += r[j];
  if (!unrounded) kd::Unpack8<T>(kd::Pack8<T>(v), v);
}

template <typename T>
__device__ __forceinline__ const uint4* rowVectors(const void* base, int64_t row, int64_t stride) {
  return reinterpret_cast<const uint4*>(static_cast<const T*>(base) + row * stride);
}

// x[token][k] = fp8(RMSNorm(row token) op scale) for tokens < M into shared memory (rows of
// `stride` bytes). Every thread of the CTA calls it; `partials` is __shared__ float[32].
template <typename T>
__device__ void normalizeRowsIntoShared(const SmallMFp8PrologueParams& q, int64_t M, int64_t K, uint8_t* x,
                                        int64_t stride, float* partials) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int virtual_threads = q.norm_threads, virtual_warps = q.norm_threads / 32;
  const int vecs = static_cast<int>(K / 8);
  const kd::ScaleOp op = kd::ScaleOp::Make(*q.scale, q.divide);
  const uint4* weight = static_cast<const uint4*>(q.weight);
  for (int64_t token = 0; token < M; ++token) {
    const uint4* in = rowVectors<T>(q.input, token, q.input_row_stride);
    const uint4* res = q.residual ? rowVectors<T>(q.residual, token, q.residual_row_stride) : nullptr;
    // Each virtual warp's sum as the row kernel's warp adds it: per thread over its vectors in
    // order, then the butterfly.
    for (int vw = warp; vw < virtual_warps; vw += warps) {
      const int vt = vw * 32 + lane;
      float sum_sq = 0.0f;
      for (int i = 0; i < q.norm_vecs_per_thread; ++i) {
        const int c = i * virtual_threads + vt;
        float v[8];
        normSource<T>(in, res, q.residual_unrounded, c < vecs, c, v);
#pragma unroll
        for (int j = 0; j < 8; ++j) sum_sq += v[j] * v[j];
      }
      sum_sq = kd::WarpAllReduce(sum_sq, kd::SumOp());
      if (lane == 0) partials[vw] = sum_sq;
    }
    __syncthreads();
    const float total = kd::WarpAllReduce(lane < virtual_warps ? partials[lane] : kd::SumOp::kIdentity, kd::SumOp());
    const float inv = rsqrtf(total / static_cast<float>(K) + q.epsilon);
    for (int c = threadIdx.x; c < vecs; c += blockDim.x) {
      float s[8];
      normSource<T>(in, res, q.residual_unrounded, true, c, s);
      const uint4 n = weight ? kd::NormalizeWeighted8<T>(s, inv, __ldg(weight + c)) : kd::NormalizeUnweighted8<T>(s, inv);
      *reinterpret_cast<uint2*>(x + token * stride + c * 8) = kd::QuantizePackedToFp8x8<T>(n, op);
    }
    __syncthreads();  // the partials are the next row's
  }
}

// After every CTA has read the residual (this one included: call it after the prologue's last
// barrier), the last CTA to arrive writes residual = round16(input + residual) and re-arms the
// counter for the next launch.
template <typename T>
__device__ void arriveAndUpdateResidual(const SmallMFp8PrologueParams& q, int64_t M, int64_t K) {
  __shared__ int last;
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(q.arrivals, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int vecs = static_cast<int>(K / 8);
  for (int64_t token = 0; token < M; ++token) {
    const uint4* in = rowVectors<T>(q.input, token, q.input_row_stride);
    uint4* res = const_cast<uint4*>(rowVectors<T>(q.residual, token, q.residual_row_stride));
    for (int c = threadIdx.x; c < vecs; c += blockDim.x) {
      float v[8], r[8];
      kd::Unpack8<T>(in[c], v);
      kd::Unpack8<T>(res[c], r);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] += r[j];
      res[c] = kd::Pack8<T>(v);
    }
  }
  if (threadIdx.x == 0) *q.arrivals = 0u;
}

// The SiLU prologue's operands of one K step for lane (g, t): token g's gate and up at K
// offsets t*16 and 64 + t*16, 16 elements each (two 16-byte vectors).
struct SiluStepOperands {
  uint4 gate[2][2], up[2][2];
};

template <typename T>
__device__ __forceinline__ void loadSiluStep(const SmallMFp8GemmParams& p, int64_t step, int64_t step_bytes,
                                             SiluStepOperands& o) {
  const int lane = threadIdx.x & 31, g = lane / 4, t = lane % 4;
  const SmallMFp8PrologueParams& q = p.prologue;
  const T* row = static_cast<const T*>(q.input) + g * q.input_row_stride;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t k = step * step_bytes + h * 64 + t * 16;
    const bool valid = g < p.M && k < p.K;
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      o.gate[h][v] = valid ? *reinterpret_cast<const uint4*>(row + k + 8 * v) : make_uint4(0, 0, 0, 0);
      o.up[h][v] = valid ? *reinterpret_cast<const uint4*>(row + p.K + k + 8 * v) : make_uint4(0, 0, 0, 0);
    }
  }
}

// The step's FP8 activations from its SiLU operands: x[h] holds the 16 bytes at K offset
// h*64 + t*16 (lowest byte first), as the FP8 read would.
template <typename T>
__device__ __forceinline__ void siluStepToFp8(const SiluStepOperands& o, const kd::ScaleOp& op, uint4 (&x)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint2 lo = kd::QuantizePackedToFp8x8<T>(kd::SiluMulPacked8<T>(o.gate[h][0], o.up[h][0]), op);
    const uint2 hi = kd::QuantizePackedToFp8x8<T>(kd::SiluMulPacked8<T>(o.gate[h][1], o.up[h][1]), op);
    x[h] = make_uint4(lo.x, lo.y, hi.x, hi.y);
  }
}

}  // namespace fxfuse::runtime::small_m
