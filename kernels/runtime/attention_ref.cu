#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/runtime/attention.h"
#include "kernels/runtime/attention_output.cuh"
#include "kernels/types.h"

namespace fxfuse::runtime {
namespace {

constexpr int kWarps = 4;

using attention_io::loadAs;

template <int NE>
__global__ void __launch_bounds__(kWarps * 32) attentionKernel(AttentionParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int64_t rows = p.B * p.Hq * p.Sq;
  if (row >= rows) return;
  const int64_t i = row % p.Sq;
  const int64_t h = (row / p.Sq) % p.Hq;
  const int64_t b = row / (p.Sq * p.Hq);
  const int64_t hk = h / (p.Hq / p.Hk);
  float q[NE], acc[NE];
#pragma unroll
  for (int t = 0; t < NE; ++t) {
    const int64_t e = lane + 32 * t;
    q[t] = e < p.E ? loadAs(p.q, b * p.q_stride[0] + h * p.q_stride[1] + i * p.q_stride[2] + e * p.q_stride[3], p.dtype) : 0.0f;
    acc[t] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int64_t kend = p.causal ? (i + 1 < p.Sk ? i + 1 : p.Sk) : p.Sk;
  const int64_t kbase = b * p.k_stride[0] + hk * p.k_stride[1];
  const int64_t vbase = b * p.v_stride[0] + hk * p.v_stride[1];
  for (int64_t j = 0; j < kend; ++j) {
    float part = 0.0f;
#pragma unroll
    for (int t = 0; t < NE; ++t) {
      const int64_t e = lane + 32 * t;
      if (e < p.E) part += q[t] * loadAs(p.k, kbase + j * p.k_stride[2] + e * p.k_stride[3], p.dtype);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
    float s = part * p.scale;
    if (p.mask_dtype != DType::DTYPE_UNSPECIFIED) {
      const int64_t mi = b * p.mask_stride[0] + h * p.mask_stride[1] + i * p.mask_stride[2] + j * p.mask_stride[3];
      float mv = loadAs(p.mask, mi, p.mask_dtype);
      if (p.mask_dtype == DType::BOOL) {
        if (mv == 0.0f) s = -INFINITY;
      } else {
        s += mv;
      }
    }
    if (s == -INFINITY) continue;
    const float mn = fmaxf(m, s);
    const float corr = expf(m - mn);  // m = -inf the first time: exp(-inf) = 0
    const float pj = expf(s - mn);
    l = l * corr + pj;
#pragma unroll
    for (int t = 0; t < NE; ++t) {
      const int64_t e = lane + 32 * t;
      const float vv = e < p.Ev ? loadAs(p.v, vbase + j * p.v_stride[2] + e * p.v_stride[3], p.dtype) : 0.0f;
      acc[t] = acc[t] * corr + pj * vv;
    }
    m = mn;
  }
  const float inv = l > 0.0f ? 1.0f / l : __int_as_float(0x7fc00000);
  const int64_t obase = b * p.o_stride[0] + h * p.o_stride[1] + i * p.o_stride[2];
  float qscale = 1.0f;
  if (p.out_dtype == DType::F8E4M3FN) qscale = 1.0f / *p.out_scale;
#pragma unroll
  for (int t = 0; t < NE; ++t) {
    const int64_t e = lane + 32 * t;
    if (e >= p.Ev) continue;
    const float o = acc[t] * inv;
    attention_io::storeOutput(p, obase + e * p.o_stride[3], o, qscale);
  }
}

}  // namespace

cudaError_t LaunchAttention(const AttentionParams& p, cudaStream_t stream) {
  if (p.E <= 0 || p.E > 256 || p.Ev <= 0 || p.Ev > 256 || p.Hk <= 0 || p.Hq % p.Hk != 0) return cudaErrorInvalidValue;
  if (!p.q || !p.k || !p.v || !p.out) return cudaErrorInvalidValue;
  if (p.out_dtype == DType::F8E4M3FN && !p.out_scale) return cudaErrorInvalidValue;
  const int64_t rows = p.B * p.Hq * p.Sq;
  if (rows == 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  const int ne = static_cast<int>(((p.E > p.Ev ? p.E : p.Ev) + 31) / 32);
  if (ne <= 1) attentionKernel<1><<<grid, kWarps * 32, 0, stream>>>(p);
  else if (ne <= 2) attentionKernel<2><<<grid, kWarps * 32, 0, stream>>>(p);
  else if (ne <= 4) attentionKernel<4><<<grid, kWarps * 32, 0, stream>>>(p);
  else attentionKernel<8><<<grid, kWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace fxfuse::runtime
