// Hopper (sm_90a) attention kernels: prefill (wgmma for Q·K^T and P·V, K/V tiles loaded by TMA
// into a two-stage shared-memory ring, one producer warpgroup and two consumer warpgroups,
// online softmax in fp32 registers) and split-KV decode (a few query tokens against a long,
// contiguous or paged KV cache, then a combine kernel). Outputs bf16/fp16, or FP8 e4m3 with a
// static scale: fp8(clamp(acc / l * (1 / scale), ±448)) straight from the fp32 accumulator,
// without the D16 rounding of the unfused path (vLLM's fused kernels do the same;
// docs/attention.md). The Check*() functions are plain C++ (no GPU) and say why a call does not
// fit; the runtime falls back to its reference kernel then.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "proto/dtype.h"

namespace fxfuse::attention {

// q/k/v are BF16 or F16; the output that dtype or F8E4M3FN (fxfuse::DType, proto/dtype.h).
using ::fxfuse::DType;

const char* DTypeName(DType t);

// Q [batch, heads_q, seqlen_q, head_size], K/V [batch, heads_kv, seqlen_k, head_size],
// O [batch, heads_q, seqlen_q, head_size]; strides in elements for (batch, head, token), the
// head dimension contiguous. Variable lengths: cu_seqlens_q/k ([batch + 1] int32 on the device,
// token offsets into the token dimension); the batch stride is then unused and seqlen_q/k are
// the maxima and total_q/total_k the token extents of the packed tensors.
struct PrefillParams {
  DType dtype = DType::BF16;  // q, k, v
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  int batch = 0, heads_q = 0, heads_kv = 0, head_size = 0;
  int64_t seqlen_q = 0, seqlen_k = 0;
  int64_t q_stride[3] = {}, k_stride[3] = {}, v_stride[3] = {}, o_stride[3] = {};
  const int* cu_seqlens_q = nullptr;
  const int* cu_seqlens_k = nullptr;
  int64_t total_q = 0, total_k = 0;
  float softmax_scale = 0;
  // Key j is visible from query i iff j <= i (top-left, torch's is_causal), or with
  // causal_bottom_right iff j <= i + seqlen_k - seqlen_q (per sequence).
  bool causal = false;
  bool causal_bottom_right = false;
  DType out_dtype = DType::BF16;    // dtype, or kF8E4M3 with out_scale
  const float* out_scale = nullptr;  // [1] fp32 on the device
};

// Empty when the prefill kernel takes these params, else the first reason it does not.
std::string CheckPrefill(const PrefillParams& p);
// Checks, then launches (cudaErrorInvalidValue when CheckPrefill fails).
cudaError_t LaunchPrefill(const PrefillParams& p, cudaStream_t stream);

// Decode: num_query_tokens new tokens per sequence (the last ones of the context) against the
// KV cache. Query [batch, heads_q, num_query_tokens, head_size] with q/o strides (batch, head,
// token). K/V cache, contiguous (block_table null): [batch, heads_kv, seqlen, head_size] with
// strides (batch, token, head); paged: [num_blocks, block_size, heads_kv, head_size] (vLLM's
// layout) with strides (block, token, head) and block_table [batch, block_table_stride].
// Context length per sequence: context_lens[b] (device int32) or max_context_len for all.
struct DecodeParams {
  DType dtype = DType::BF16;
  const void* q = nullptr;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  void* out = nullptr;
  int batch = 0, heads_q = 0, heads_kv = 0, head_size = 0, num_query_tokens = 1;
  int64_t q_stride[3] = {}, o_stride[3] = {}, k_stride[3] = {}, v_stride[3] = {};
  const int* block_table = nullptr;
  int64_t block_table_stride = 0;
  int block_size = 0;
  const int* context_lens = nullptr;
  int64_t max_context_len = 0;
  float softmax_scale = 0;
  // Query t (of num_query_tokens) sits at position context_len - num_query_tokens + t and sees
  // keys up to it (causal), or all context_len keys.
  bool causal = true;
  DType out_dtype = DType::BF16;
  const float* out_scale = nullptr;
  int num_splits = 0;           // 0: chosen from the shape (DecodeSplits)
  void* workspace = nullptr;    // DecodeWorkspaceBytes(p) bytes on the device, when splits > 1
};

constexpr int kDecodeMaxRows = 64;  // (heads_q / heads_kv) * num_query_tokens
int DecodeSplits(const DecodeParams& p, int num_sms);
size_t DecodeWorkspaceBytes(const DecodeParams& p, int num_sms);
std::string CheckDecode(const DecodeParams& p);
cudaError_t LaunchDecode(const DecodeParams& p, cudaStream_t stream);

// Plan-time choice (lowering): does an attention node with these static facts go to the sm90
// kernels? `reason` says why not. Token/head strides are in elements, -1 when not known.
struct AttentionShapeFacts {
  int head_size = 0, head_size_v = 0;
  bool d16_inputs = false;       // q, k, v all bf16 or all fp16
  bool has_mask = false;         // arbitrary mask (only causal is built in)
  bool last_dim_contiguous = false;
  int64_t stride_gcd_elems = -1; // gcd of the known token/head/batch strides of q, k, v, out (-1: none known)
  bool out_ok = false;           // output is the input dtype or fp8 e4m3 with a scale
};
bool FitsSm90(const AttentionShapeFacts& f, std::string* reason);

}  // namespace fxfuse::attention
