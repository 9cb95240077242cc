// Warp and CTA all-reductions (sum, max). Butterfly shuffles leave the same bits in every lane
// (a + b == b + a exactly), and every warp re-reduces the per-warp partials in the same order,
// so all threads get the identical value and a kernel's result depends only on its block size.
#ifndef FXFUSE_KERNELS_DEVICE_REDUCE_CUH_
#define FXFUSE_KERNELS_DEVICE_REDUCE_CUH_

namespace fxfuse::kernels::device {

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
  static constexpr float kIdentity = 0.0f;
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
  static constexpr float kIdentity = 0.0f;  // used for absolute values only
};

template <typename Op>
__device__ __forceinline__ float WarpAllReduce(float v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// All-reduce within aligned groups of `width` lanes (width a power of two <= 32).
template <typename Op>
__device__ __forceinline__ float LaneGroupAllReduce(float v, int width, Op op) {
  for (int offset = width / 2; offset > 0; offset >>= 1) {
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Every thread of the CTA must call it (blockDim.x a multiple of 32). `partials` is a
// __shared__ float[32] used by this reduction only.
template <typename Op>
__device__ __forceinline__ float BlockAllReduce(float v, float* partials, Op op) {
  v = WarpAllReduce(v, op);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  if (lane == 0) partials[warp] = v;
  __syncthreads();
  v = lane < num_warps ? partials[lane] : Op::kIdentity;
  return WarpAllReduce(v, op);
}

}  // namespace fxfuse::kernels::device

#endif  // FXFUSE_KERNELS_DEVICE_REDUCE_CUH_
