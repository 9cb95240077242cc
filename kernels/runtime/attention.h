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

// vLLM's rotary embedding applied by the attention itself to q and k as it reads them (a dense
// layer's rotary step taken in; compiler/runtime/attention_prologue.h): the rotary step's
// rounding (rotary.cuh), query row i and key row j rotated at positions[i] and positions[j]
// (one sequence: B = 1, Sq = Sk, the T tokens of the step).
struct AttentionRotary {
  const int64_t* positions = nullptr;   // [Sq] on the device
  const void* cos_sin_cache = nullptr;  // [cos_sin_rows, rotary_dim]: cos | sin, row stride cos_sin_stride
  DType cos_sin_dtype = DType::BF16;    // BF16, F16 or F32
  int64_t cos_sin_rows = 0, cos_sin_stride = 0, rotary_dim = 0;  // rotary_dim even, <= E
  bool neox = true;                     // pairs are the two halves (true) or adjacent elements
};

// The most keys the short attention takes (its K and V rows sit in shared memory whole): more
// measured slower than the prefill kernel in the decoder layer (docs/attention.md "Short contexts").
inline constexpr int64_t kShortAttentionMaxKeys = 16;

// Attention over a short context (Sk <= kShortAttentionMaxKeys; no mask, E = Ev even and at most
// 128, bf16/f16 with 4-byte aligned V rows, output in their dtype or FP8 with out_scale, causal
// or not), optionally with `rotary`: one block per (batch, KV head, chunk of queries) holds the
// chunk's visible K and V rows in shared memory and each warp computes one query row's scores,
// softmax and P.V in fp32 (short_attention.cu). The output rounding is LaunchAttention's; sums
// add in another order.
// Why it does not take `p` (nullptr when it does).
const char* ShortAttentionUnsupported(const AttentionParams& p, const AttentionRotary* rotary);
// Launched with programmatic dependent launch; cudaErrorInvalidValue where unsupported.
cudaError_t LaunchShortAttention(const AttentionParams& p, const AttentionRotary* rotary, cudaStream_t stream);

}  // namespace fxfuse::runtime
