// fxfuse's paged KV-cache kernels (fxfuse.paged_attention in launch plans, docs/attention.md
// "Paged attention"): one serving step of a batch of sequences over vLLM's flash-layout cache
// [num_blocks, block_size, Hk, E].
//
//   LaunchReshapeAndCache (rt.reshape_and_cache): this step's keys and values into the caches
//     at their slots (vLLM's reshape_and_cache_flash); slot -1 = padding token, not written.
//     With rotary parameters it also applies vLLM's rotary_embedding first: the query rotated
//     in place, each key row rotated on its way into the cache (rotary_cache_write.cu), so a
//     decode layer needs no rotary kernel of its own.
//   LaunchPagedAttention (rt.paged_attention): every query token attends over its sequence's
//     cached context, causal and bottom-right aligned, grouped-query.
//
// Both read the batch metadata (slot_mapping, block_table, seq_lens, query_start_loc) on the
// device: no host synchronization, so a step can be captured in a CUDA graph and replayed with
// new metadata. Attention is split-KV (flash-decoding): each row's context is cut into
// num_splits chunks, one warp per (query token, group of query heads sharing a KV head, chunk)
// with online softmax in fp32 over groups of keys whose K and V rows are loaded together (each
// row read once for the group's heads): through a per-warp cp.async ring when rows are whole
// 16-byte pieces, with the scores and P.V on tensor cores in 16-key steps for head sizes 64/128
// (16-bit caches in their own type, FP8 caches widened to f16; $FXFUSE_PAGED_MMA=0: CUDA cores).
// The tensor-core kernel merges a row's chunks within its CTA and, up to 8 CTAs, its cluster;
// more chunks (and the CUDA-core paths) are merged by a second kernel. The number of chunks is chosen on the host from the bound sizes, the chunk length on
// the device from each row's own context, so decode batches of a few sequences still fill the
// GPU. Metadata outside its range (a slot or block
// id past the cache, a context longer than the block table) is never read or written out of
// bounds; the values it gives are unspecified.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "proto/dtype.h"

namespace fxfuse::runtime {

using ::fxfuse::DType;

// The largest head size the paged kernels take (a warp holds E / 32 elements per lane).
inline constexpr int64_t kPagedMaxHeadSize = 256;

struct ReshapeAndCacheParams {
  DType dtype = DType::BF16;        // key, value: BF16 or F16
  DType cache_dtype = DType::BF16;  // `dtype`, or F8E4M3FN (then k_scale and v_scale are needed)
  const void* key = nullptr;        // [T, Hk, E]; strides in elements, token then head (E contiguous)
  const void* value = nullptr;      // [T, Hk, E]
  int64_t key_stride[2] = {}, value_stride[2] = {};
  void* key_cache = nullptr;        // [num_blocks, block_size, Hk, E] contiguous
  void* value_cache = nullptr;
  const int64_t* slot_mapping = nullptr;  // [T]: token t's slot block * block_size + offset, -1 = skip
  int64_t num_tokens = 0, heads_kv = 0, head_size = 0, num_blocks = 0, block_size = 0;
  // FP8 cache: cache = fp8_e4m3(satfinite(f32(x) / scale)), vLLM's
  // __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E4M3). [1] fp32 on the device.
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  // Rotary embedding before the write, set by `positions`: vLLM's rotary_embedding with the
  // rounding of fxfuse's generated rotary (cos and sin rounded to `dtype`, then each product
  // and the sum): `query` [T, heads_q, E] is rotated in place, each key row on its way into the
  // cache (`key` itself is left as it is). heads_kv = 0 rotates the query only (no cache
  // operands). A position outside [0, cos_sin_rows) leaves its token's rows unrotated.
  void* query = nullptr;  // `dtype`, strides in elements as for `key`
  int64_t query_stride[2] = {};
  // Out of place: set, the rotated query goes to query_out [T, heads_q, E] (every element, the
  // unrotated ones copied) and `query` is only read. A dense plan's rotary (no cache) is this.
  void* query_out = nullptr;
  int64_t query_out_stride[2] = {};
  int64_t heads_q = 0;
  const int64_t* positions = nullptr;     // [T]
  const void* cos_sin_cache = nullptr;    // [cos_sin_rows, rotary_dim]: cos | sin, row stride cos_sin_stride
  DType cos_sin_dtype = DType::BF16;      // BF16, F16 or F32
  int64_t cos_sin_rows = 0, cos_sin_stride = 0, rotary_dim = 0;  // rotary_dim even, <= head_size
  bool neox = true;                       // pairs are the two halves (true) or adjacent elements
  // No step of the plan writes positions, slot_mapping or the table: the rotary kernel reads its
  // first token's entries before it waits for the preceding kernel.
  bool metadata_read_only = false;
};

// Returns cudaErrorInvalidValue for bad params (dtypes, sizes, missing pointers or scales),
// else the launch error.
cudaError_t LaunchReshapeAndCache(const ReshapeAndCacheParams& p, cudaStream_t stream);

// How many of the query's rotary pairs one thread rotates: 8 when every 16-byte access the
// wide form makes is aligned (neox pairs, 8 | rotary_dim / 2 and 8 | E - rotary_dim, a table of
// the model dtype, 16-byte aligned rows of query, query_out and the table), else 1. The wide
// form reads both halves and cos | sin as 16-byte vectors: a thread of the one-pair form keeps
// too few bytes in flight to reach the copy rate (docs/decoder_layer.md). Same rounding either way.
int RotaryQueryWidth(const ReshapeAndCacheParams& p);

struct PagedAttentionParams {
  DType dtype = DType::BF16;        // query and the model dtype D: BF16 or F16
  DType cache_dtype = DType::BF16;  // D, or F8E4M3FN: K = f32(k8) * k_scale, V alike
  const void* q = nullptr;          // [T, Hq, E]; strides in elements: token, head (E contiguous)
  int64_t q_stride[2] = {};
  const void* key_cache = nullptr;  // [num_blocks, block_size, Hk, E] contiguous
  const void* value_cache = nullptr;
  const int32_t* block_table = nullptr;      // [num_seqs, max_blocks], row stride block_table_stride
  int64_t block_table_stride = 0;
  const int32_t* seq_lens = nullptr;         // [num_seqs]: context length, this step's tokens included
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1]: sequence b's queries are [qsl[b], qsl[b+1])
  int64_t num_tokens = 0, num_seqs = 0, max_blocks = 0;
  int64_t heads_q = 0, heads_kv = 0, head_size = 0, num_blocks = 0, block_size = 0;
  const float* k_scale = nullptr;   // FP8 cache: [1] fp32 on the device
  const float* v_scale = nullptr;
  float scale = 0;                  // softmax scale (1/sqrt(E) when the graph says None)
  void* out = nullptr;              // [T, Hq, E]: D, or F8E4M3FN with out_scale
  int64_t o_stride[2] = {};
  DType out_dtype = DType::BF16;
  // FP8 output: out = fp8_e4m3(clamp(f32(round_D(o)) * (1 / out_scale), ±448)) with 1 / out_scale
  // one fp32 division (attention_quant's rounding). [1] fp32 on the device.
  const float* out_scale = nullptr;
  // Split-KV: each row's own context cut into num_splits chunks of PagedChunkKeys(its keys,
  // num_splits) keys (the chunks past its end are empty); num_splits > 1 needs `workspace` of
  // PagedAttentionWorkspaceBytes. PlanPagedAttentionSplits sets both; num_splits = 1 attends
  // every context in one pass.
  int64_t num_splits = 1;
  float* workspace = nullptr;
  // Whether no step of the plan writes block_table, seq_lens and query_start_loc (plan inputs it
  // never updates: lowering::readOnlyInPlan). The kernels then read them, and the block ids of
  // their first keys, before they wait for the preceding kernel (programmatic dependent launch),
  // so those dependent loads overlap its drain instead of preceding the cache reads.
  bool metadata_read_only = false;
};

// Keys the kernels load together, and the smallest chunk worth a warp of its own.
inline constexpr int64_t kPagedKeyGroup = 8;
inline constexpr int64_t kPagedMinSplitKeys = 32;
// Keys of each chunk of a context of `keys` keys split `num_splits` ways: whole key groups, at
// least kPagedMinSplitKeys (host and device: nvcc takes constexpr functions in kernels).
// The tensor-core kernel computes it in 32 bits (it runs only where the keys fit: loadPathOf).
template <typename Int>
constexpr Int PagedChunkKeys(Int keys, Int num_splits) {
  const Int c = (keys + num_splits - 1) / num_splits, least = static_cast<Int>(kPagedMinSplitKeys);
  const Int group = static_cast<Int>(kPagedKeyGroup);
  return ((c < least ? least : c) + group - 1) / group * group;
}

// Split-KV target: (token, head group, chunk) warps per multiprocessor, one wave of the
// tensor-core kernel (12 warps per SM, its register budget) so that no wave runs a few CTAs long
// ($FXFUSE_PAGED_WARPS_PER_SM overrides it for A/B measurements, read when a step is planned).
inline constexpr int64_t kPagedSplitWarpsPerSm = 12;

// Chooses num_splits for the bound sizes: the most chunks that keep the (token, head group,
// chunk) warps within kPagedSplitWarpsPerSm per multiprocessor of `num_sms`, where the block
// table's width allows chunks of at least kPagedMinSplitKeys keys; then at most a fifth fewer,
// so that the tensor-core kernel merges them without a second kernel (up to 96 chunks), or
// above that 96 where the table's chunks take no more 16-key steps than at the count planned,
// else the fewest states for the second kernel (a multiple of 12).
// Where that rounding plans thread-block clusters (2 to 8 CTAs per row) and more rows than
// `resident` clusters are resident at once, it plans again for half the warps per
// multiprocessor until they are (a second wave of clusters runs a few of them alone).
//
// `resident(cluster, chunks_per_cta)`: how many clusters of `cluster` tensor-core attention CTAs
// of `chunks_per_cta` warps the GPU holds at once, 0 where unknown (no limit then). The
// two-argument form asks the current device (DevicePagedResidentClusters).
using PagedResidentClusters = std::function<int64_t(int64_t cluster, int64_t chunks_per_cta)>;
void PlanPagedAttentionSplits(PagedAttentionParams& p, int num_sms, const PagedResidentClusters& resident);
void PlanPagedAttentionSplits(PagedAttentionParams& p, int num_sms);
// cudaOccupancyMaxActiveClusters of the tensor-core attention kernel for p's head size, head
// grouping and cache dtype on the current device (0 from the function where it cannot say;
// empty for head sizes that kernel does not take).
PagedResidentClusters DevicePagedResidentClusters(const PagedAttentionParams& p);
// Device bytes the split needs: per (token, head, chunk) E partial sums, the running maximum
// and the running sum (fp32); 0 without a split.
int64_t PagedAttentionWorkspaceBytes(const PagedAttentionParams& p);
// Kernels LaunchPagedAttention launches for `p` (its split and pointers set): 1, or 2 where the
// chunks of a row outnumber what one cluster merges and a combine kernel follows.
int PagedAttentionKernels(const PagedAttentionParams& p);

// Query i of sequence b (token qsl[b] + i, ql = qsl[b+1] - qsl[b]) sits at position
// seq_lens[b] - ql + i and sees cached keys 0..that position; rows of tokens >= qsl[num_seqs]
// (padding) are written as 0. head_size at most kPagedMaxHeadSize. Returns
// cudaErrorInvalidValue for bad params, else the launch error.
cudaError_t LaunchPagedAttention(const PagedAttentionParams& p, cudaStream_t stream);

}  // namespace fxfuse::runtime
