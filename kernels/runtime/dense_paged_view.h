// Decode attention over dense per-sequence K/V as one step of the paged attention kernel
// (paged_attention.h). A dense decode (rt.attention, one query token per sequence, K/V viewed
// [B, Hk, Sk, E] over memory whose sequences are `rows` key rows of [Hk, E] apart; rows = 0 for
// one sequence or a batch-broadcast cache) reads memory that already is
// vLLM's flash layout [blocks, bs, Hk, E] for any bs dividing `rows`: sequence b's keys are the
// blocks b * rows / bs + 0, 1, ... So an identity block table, every sequence's length Sk and one
// query per sequence describe it, and the decode gets the paged kernel's tensor-core ring
// (docs/attention.md "Dense decode on the paged kernel").
//
//   q [B, Hq, 1, E]     K/V [B, Hk, Sk, E] (token stride Hk*E)      q [T=B, Hq, E]
//          \              /                                 ==>      key_cache [blocks, bs, Hk, E]
//        attention (no mask)                                         block_table[b] = b*rows/bs + i
//               |                                                    seq_lens[b] = Sk, qsl[b] = b
//         out [B, Hq, 1, E]                                          paged_attention -> out [T, Hq, E]
//
// Host code only (no kernels): PrepareDensePagedView uploads the metadata for a launch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/runtime/attention.h"
#include "kernels/runtime/paged_attention.h"

namespace fxfuse::runtime {

struct DensePagedView {
  // Everything but block_table, seq_lens, query_start_loc (device copies of the vectors below),
  // num_splits and workspace (PlanPagedAttentionSplits).
  PagedAttentionParams params;
  std::vector<int32_t> block_table;      // [B, params.max_blocks]
  std::vector<int32_t> seq_lens;         // [B], all Sk
  std::vector<int32_t> query_start_loc;  // [B + 1], b
};

// The largest block size the view uses: the serving cache's (the kernel's measured case).
inline constexpr int64_t kDenseViewBlockSize = 16;

// Fills *view and returns "" when the attention `a` maps onto the paged kernel, else says why
// not (a mask, several query tokens, torch's top-left causal mask over more than one key, an
// output the paged kernel rounds differently, K and V laid out differently, rows that are not
// [rows, Hk, E] contiguous, sizes past the kernel's int32 metadata).
std::string PagedViewOfDenseAttention(const AttentionParams& a, DensePagedView* view);

// The launch params of `view` on this device: the split planned for `num_sms`, and one device
// allocation (*device_memory, the caller's to cudaFree) holding the split workspace and copies of
// the three metadata arrays, whose pointers *params gets. Synchronous (cudaMemcpy): call it when a
// step is prepared, not per launch.
cudaError_t PrepareDensePagedView(const DensePagedView& view, int num_sms, PagedAttentionParams* params,
                                  void** device_memory);

}  // namespace fxfuse::runtime
