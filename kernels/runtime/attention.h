// fxfuse's reference attention kernel (rt.attention in launch plans): exact softmax attention,
// causal or not, grouped-query (Hq a multiple of Hk), bf16/fp16 inputs, optional boolean or
// additive mask, output in the input dtype or FP8 e4m3 with a static scale. Correct first:
// one warp per query row, online softmax in fp32 (docs/runtime.md); its speed is a later issue.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "proto/dtype.h"

namespace fxfuse::runtime {

// dtypes: fxfuse::DType (proto/dtype.h); BF16/F16/F32/BOOL/F8E4M3FN as noted per field.
using ::fxfuse::DType;

struct AttentionParams {
  DType dtype = DType::BF16;      // q, k, v
  const void* q = nullptr;                 // [B, Hq, Sq, E], strides in elements
  const void* k = nullptr;                 // [B, Hk, Sk, E]
  const void* v = nullptr;                 // [B, Hk, Sk, Ev]
  void* out = nullptr;                     // [B, Hq, Sq, Ev]
  int64_t B = 0, Hq = 0, Hk = 0, Sq = 0, Sk = 0, E = 0, Ev = 0;
  int64_t q_stride[4] = {}, k_stride[4] = {}, v_stride[4] = {}, o_stride[4] = {};
  float scale = 0;                         // softmax scale (1/sqrt(E) when the graph says None)
  bool causal = false;                     // key j visible from query i iff j <= i
  DType mask_dtype = DType::DTYPE_UNSPECIFIED; // bool (keep) or additive bf16/f16/f32
  const void* mask = nullptr;              // broadcast [B, H, Sq, Sk] (stride 0 on broadcast dims)
  int64_t mask_stride[4] = {};
  DType out_dtype = DType::BF16;  // input dtype, or kF8E4M3 with out_scale
  DType round_dtype = DType::BF16;// FP8 output: the value is rounded to this first
  const float* out_scale = nullptr;        // [1] fp32 on the device: q = fp8(clamp(o * (1/s)))
};

// E and Ev at most 256. Returns the launch error, or cudaErrorInvalidValue for bad params.
cudaError_t LaunchAttention(const AttentionParams& p, cudaStream_t stream);

// Attention over a single key (Sk = 1, no mask; any Sq, causal or not: query i sees key 0): the
// softmax of one finite score is exactly 1, so each output row is the key's V, rounded as
// LaunchAttention rounds it, and NaN where the score is not finite, as LaunchAttention gives
// (single_key_attention.cu). q/k/v bf16 or f16, output their dtype or FP8 with out_scale.
// Why it does not take `p` (nullptr when it does).
const char* SingleKeyAttentionUnsupported(const AttentionParams& p);
// Launched with programmatic dependent launch; cudaErrorInvalidValue where unsupported.
cudaError_t LaunchSingleKeyAttention(const AttentionParams& p, cudaStream_t stream);

}  // namespace fxfuse::runtime
