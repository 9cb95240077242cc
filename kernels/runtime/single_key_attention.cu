// Attention over a single key (attention.h, LaunchSingleKeyAttention): the softmax of one finite
// score is exactly 1 (exp(s - s) = 1, l = 1), so every query's output is that key's V, rounded by
// the reference kernel's own code (attention_output.cuh); a score that is not finite gives NaN
// there (-inf: no weight, l = 0; +inf or NaN: exp(inf - inf)), so it gives NaN here. What is left of
// the attention is the score's finiteness and a copy: one warp per (batch, query head, query
// token) computes q . k for the score's sake and writes V.
//
//   q [B, Hq, Sq, E] ─┐
//   k [B, Hk, 1, E] ──┴─► s = (q . k) * scale ─► finite? ─► out [B, Hq, Sq, Ev] = V (or NaN)
//   v [B, Hk, 1, Ev] ──────────────────────────────────────┘
//
// A dense decoder layer's first token (T = 1: one query over its own key) takes this instead of
// a decode kernel's chain of dependent steps (docs/attention.md "A single key").
#include "kernels/device/pdl.cuh"
#include "kernels/runtime/attention.h"
#include "kernels/runtime/attention_output.cuh"
#include "kernels/types.h"

namespace fxfuse::runtime {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxElemsPerLane = 8;  // E and Ev up to 256

__global__ void __launch_bounds__(kWarps * 32) singleKeyAttentionKernel(const AttentionParams p) {
  kernels::allowDependentGrids();
  kernels::waitForPrecedingGrid();
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= p.B * p.Hq * p.Sq) return;
  const int64_t i = row % p.Sq, h = row / p.Sq % p.Hq, b = row / (p.Sq * p.Hq);
  const int64_t hk = h / (p.Hq / p.Hk);
  const int64_t qbase = b * p.q_stride[0] + h * p.q_stride[1] + i * p.q_stride[2];
  const int64_t kbase = b * p.k_stride[0] + hk * p.k_stride[1];
  const int64_t vbase = b * p.v_stride[0] + hk * p.v_stride[1];
  float v[kMaxElemsPerLane], part = 0.0f;
#pragma unroll
  for (int t = 0; t < kMaxElemsPerLane; ++t) {  // every load issued before the reduction
    const int64_t e = lane + 32 * t;
    v[t] = e < p.Ev ? attention_io::loadAs(p.v, vbase + e * p.v_stride[3], p.dtype) : 0.0f;
    if (e < p.E)
      part += attention_io::loadAs(p.q, qbase + e * p.q_stride[3], p.dtype) *
              attention_io::loadAs(p.k, kbase + e * p.k_stride[3], p.dtype);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
  const bool finite = isfinite(part * p.scale);
  const float inv_scale = p.out_dtype == DType::F8E4M3FN ? 1.0f / *p.out_scale : 1.0f;
  const int64_t obase = b * p.o_stride[0] + h * p.o_stride[1] + i * p.o_stride[2];
#pragma unroll
  for (int t = 0; t < kMaxElemsPerLane; ++t) {
    const int64_t e = lane + 32 * t;
    const float o = finite ? v[t] : __int_as_float(0x7fc00000);
    if (e < p.Ev) attention_io::storeOutput(p, obase + e * p.o_stride[3], o, inv_scale);
  }
}

}  // namespace

const char* SingleKeyAttentionUnsupported(const AttentionParams& p) {
  if (p.Sk != 1) return "more than one key";
  if (p.mask_dtype != DType::DTYPE_UNSPECIFIED) return "a mask";
  if (p.dtype != DType::BF16 && p.dtype != DType::F16) return "q/k/v not bf16 or f16";
  if (p.out_dtype != p.dtype && p.out_dtype != DType::F8E4M3FN) return "an output dtype other than q's or FP8";
  if (p.out_dtype == DType::F8E4M3FN && !p.out_scale) return "an FP8 output without its scale";
  if (p.E <= 0 || p.E > 32 * kMaxElemsPerLane || p.Ev <= 0 || p.Ev > 32 * kMaxElemsPerLane) return "E or Ev not 1..256";
  if (p.Hk <= 0 || p.Hq % p.Hk != 0) return "query heads not a multiple of key heads";
  if (!p.q || !p.k || !p.v || !p.out) return "a null operand";
  return nullptr;
}

cudaError_t LaunchSingleKeyAttention(const AttentionParams& p, cudaStream_t stream) {
  if (SingleKeyAttentionUnsupported(p)) return cudaErrorInvalidValue;
  const int64_t rows = p.B * p.Hq * p.Sq;
  if (rows == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((rows + kWarps - 1) / kWarps));
  return kernels::LaunchProgrammatic(singleKeyAttentionKernel, grid, dim3(kWarps * 32), 0, stream, p);
}

}  // namespace fxfuse::runtime
