// The host side of the split-KV paged attention (kernels/runtime/paged_attention.h), on the
// CPU: the split the planner picks covers every key of the block table in chunks of whole
// 8-key groups, fills the GPU about twice for small batches and not at all for large ones,
// never exceeds the launcher's limits, and the launcher refuses split parameters it cannot
// honour (before any CUDA call, so no GPU is needed).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>

#include "kernels/runtime/paged_attention.h"

namespace fxfuse::runtime {
namespace {

// No cluster limit (the planner's rounding alone), and the H200's (cudaOccupancyMaxActiveClusters
// of the 12-warp tensor-core CTA, 192 KiB of rings, one per SM: 30 clusters of 4, 15 of 8).
const PagedResidentClusters kUnknownResidency = [](int64_t, int64_t) { return int64_t{0}; };
const PagedResidentClusters kH200Residency = [](int64_t cluster, int64_t chunks_per_cta) -> int64_t {
  const int64_t twelve_warps[9] = {0, 132, 66, 39, 30, 22, 17, 15, 15};
  return chunks_per_cta == 12 ? twelve_warps[cluster] : 0;
};

PagedAttentionParams decodeBatch(int64_t seqs, int64_t context, int64_t heads_q = 32, int64_t block_size = 16) {
  PagedAttentionParams p;
  p.num_tokens = seqs;
  p.num_seqs = seqs;
  p.heads_q = heads_q;
  p.heads_kv = 8;
  p.head_size = 128;
  p.block_size = block_size;
  p.max_blocks = (context + block_size - 1) / block_size;
  p.num_blocks = seqs * p.max_blocks + 2;
  return p;
}

void checkCovers(const PagedAttentionParams& p) {
  const int64_t max_keys = p.max_blocks * p.block_size;
  REQUIRE(p.num_splits >= 1);
  CHECK(p.num_splits <= 256);
  if (p.num_splits == 1) return;
  // Every context up to the block table's width is covered by the chunks, each chunk whole
  // key groups and at least kPagedMinSplitKeys long, and no chunk starts past a context
  // longer than its first chunk needs.
  for (int64_t keys : {int64_t{1}, kPagedMinSplitKeys + 1, max_keys / 3 + 1, max_keys}) {
    const int64_t chunk = PagedChunkKeys(keys, p.num_splits);
    INFO("keys " << keys << " chunk " << chunk);
    CHECK(chunk % kPagedKeyGroup == 0);
    CHECK(chunk >= kPagedMinSplitKeys);
    CHECK(p.num_splits * chunk >= keys);
    CHECK(chunk < keys + kPagedMinSplitKeys + kPagedKeyGroup);
  }
  CHECK(PagedAttentionWorkspaceBytes(p) ==
        p.num_tokens * p.heads_q * p.num_splits * (p.head_size + 2) * static_cast<int64_t>(sizeof(float)));
}

// 16-key steps of one warp's chunk of the block table when it is cut into n chunks.
int64_t stepsPerChunk(const PagedAttentionParams& p, int64_t n) {
  return (PagedChunkKeys(p.max_blocks * p.block_size, n) + 15) / 16;
}

// The plan gives up at most a fifth of the `most` chunks allowed, or takes 96 (merged in
// clusters, no combine kernel) where that lengthens no warp's chunk by a 16-key step against
// the multiple of 12 it would otherwise plan.
void checkRounding(const PagedAttentionParams& p, int64_t most) {
  if (p.num_splits * 5 >= most * 4) return;
  CHECK(p.num_splits == 96);
  CHECK(stepsPerChunk(p, 96) <= stepsPerChunk(p, most - most % 12));
}

TEST_CASE("split-KV plan: small decode batches split their contexts to fill the GPU") {
  for (int64_t context : {33, 100, 1024, 4096, 32768}) {
    for (int64_t seqs : {1, 2, 8, 32, 64}) {
      INFO("batch " << seqs << " x context " << context);
      PagedAttentionParams p = decodeBatch(seqs, context);
      PlanPagedAttentionSplits(p, 132, kUnknownResidency);
      checkCovers(p);
      // one warp per (token, group of the 4 query heads sharing a KV head, chunk): never more
      // than kPagedSplitWarpsPerSm per SM (132 SMs); the most chunks that allows (unless the
      // block table is too narrow to cut into more chunks of at least kPagedMinSplitKeys keys
      // or the cap is reached), less at most a fifth so that the tensor-core attention merges
      // them without a combine kernel wherever it plans at most 96
      const int64_t per_split = seqs * (p.heads_q / 4), warps = per_split * p.num_splits;
      const int64_t target = 132 * kPagedSplitWarpsPerSm;
      const int64_t most = std::min({target / per_split, p.max_blocks * p.block_size / kPagedMinSplitKeys, int64_t{256}});
      if (p.num_splits > 1) CHECK(warps <= target);
      if (most > 1) {
        CHECK(p.num_splits <= most);
        CHECK(PagedAttentionKernels(p) == (p.num_splits <= 96 ? 1 : 2));
        checkRounding(p, most);
      }
    }
  }
}

TEST_CASE("split-KV plan: every allowed chunk count is rounded to one merged without a second kernel up to 96") {
  // batch 1 (8 warps of 4 query heads per chunk) on 1..220 SMs: every allowed count from 1 to 256
  for (int sms = 1; sms <= 220; ++sms) {
    PagedAttentionParams p = decodeBatch(1, 32768);
    PlanPagedAttentionSplits(p, sms, kUnknownResidency);
    const int64_t most = std::min<int64_t>(sms * kPagedSplitWarpsPerSm / 8, 256);
    INFO(sms << " SMs: at most " << most << " chunks, planned " << p.num_splits);
    if (most <= 1) {
      CHECK(p.num_splits == 1);
      continue;
    }
    CHECK(p.num_splits <= most);
    CHECK(PagedAttentionKernels(p) == (p.num_splits <= 96 ? 1 : 2));
    checkRounding(p, most);
    if (most > 96) CHECK(p.num_splits % 12 == 0);
  }
}

TEST_CASE("split-KV plan: above 96 chunks, 96 merged in clusters where no warp's chunk grows a step") {
  PagedAttentionParams p = decodeBatch(1, 4096);  // 128 allowed: 120 chunks of 40 keys or 96 of 48, 3 steps each
  PlanPagedAttentionSplits(p, 132, kUnknownResidency);
  CHECK(p.num_splits == 96);
  CHECK(PagedAttentionKernels(p) == 1);
  PagedAttentionParams longer = decodeBatch(1, 32768);  // 198 allowed: 192 chunks of 11 steps, 96 of 22
  PlanPagedAttentionSplits(longer, 132, kUnknownResidency);
  CHECK(longer.num_splits == 192);
  CHECK(PagedAttentionKernels(longer) == 2);
}

TEST_CASE("split-KV plan: batches that fill the GPU, and short contexts, take one pass") {
  PagedAttentionParams big = decodeBatch(1024, 4096);  // 8192 warps of 4 query heads
  PlanPagedAttentionSplits(big, 132, kUnknownResidency);
  CHECK(big.num_splits == 1);
  CHECK(PagedAttentionWorkspaceBytes(big) == 0);
  PagedAttentionParams prefill = decodeBatch(1, 8192);
  prefill.num_tokens = 8192;  // one long prefill: rows enough
  PlanPagedAttentionSplits(prefill, 132, kUnknownResidency);
  CHECK(prefill.num_splits == 1);
  PagedAttentionParams tiny = decodeBatch(1, 20);  // 32 keys at most in the block table
  PlanPagedAttentionSplits(tiny, 132, kUnknownResidency);
  CHECK(tiny.num_splits == 1);
  PagedAttentionParams none = decodeBatch(0, 1024);
  PlanPagedAttentionSplits(none, 132, kUnknownResidency);
  CHECK(none.num_splits == 1);
}

TEST_CASE("split-KV launch refuses splits it cannot honour, blocks past 2^31 slots and grids past 2^31 blocks") {
  PagedAttentionParams p = decodeBatch(1, 1024);
  int dummy = 0;  // never dereferenced: the launcher refuses before it launches
  p.q = p.key_cache = p.value_cache = &dummy;
  p.out = &dummy;
  p.block_table = p.seq_lens = p.query_start_loc = reinterpret_cast<const int32_t*>(&dummy);
  p.scale = 0.1f;
  p.num_splits = 4;  // no workspace
  CHECK(LaunchPagedAttention(p, nullptr) == cudaErrorInvalidValue);
  p.num_splits = 257;  // above the cap
  p.workspace = reinterpret_cast<float*>(&dummy);
  CHECK(LaunchPagedAttention(p, nullptr) == cudaErrorInvalidValue);
  p.num_splits = 0;
  CHECK(LaunchPagedAttention(p, nullptr) == cudaErrorInvalidValue);
  p.num_splits = 1;
  p.block_size = int64_t{1} << 31;  // the kernels count a block's slots in 32 bits
  CHECK(LaunchPagedAttention(p, nullptr) == cudaErrorInvalidValue);
  p.block_size = 16;
  p.num_splits = 2;  // (token, head) rows times chunks past 2^31: grids would be clipped
  p.num_tokens = p.num_seqs = (int64_t{1} << 30) / p.heads_q;
  CHECK(LaunchPagedAttention(p, nullptr) == cudaErrorInvalidValue);
}

TEST_CASE("split-KV plan: clusters that would not all be resident at once plan half the warps") {
  // Batch 4 (32 rows of 4 query heads): 48 chunks, clusters of 4 CTAs, 32 of them where the
  // H200 holds 30 -> 24 chunks, clusters of 2 (66 resident). Batch 2: 96 chunks in clusters of
  // 8 (16 > 15) -> 48 in clusters of 4. Batch 1 and 8 fit as planned; batch 16 has no cluster.
  const int64_t unlimited[] = {192, 96, 48, 24, 12};
  const int64_t limited[] = {192, 48, 24, 24, 12};
  const int64_t seqs[] = {1, 2, 4, 8, 16};
  for (int i = 0; i < 5; ++i) {
    INFO("batch " << seqs[i] << " x 32k");
    PagedAttentionParams p = decodeBatch(seqs[i], 32768);
    PlanPagedAttentionSplits(p, 132, kUnknownResidency);
    CHECK(p.num_splits == unlimited[i]);
    PlanPagedAttentionSplits(p, 132, kH200Residency);
    CHECK(p.num_splits == limited[i]);
    checkCovers(p);
    CHECK(PagedAttentionKernels(p) == (p.num_splits <= 96 ? 1 : 2));
  }
  // A GPU that holds every cluster keeps the plan; one that holds none of size > 1 keeps
  // halving to chunks one CTA merges.
  PagedAttentionParams p = decodeBatch(4, 32768);
  PlanPagedAttentionSplits(p, 132, [](int64_t, int64_t) { return int64_t{1000}; });
  CHECK(p.num_splits == 48);
  PlanPagedAttentionSplits(p, 132, [](int64_t cluster, int64_t) { return cluster == 1 ? int64_t{132} : int64_t{1}; });
  CHECK(p.num_splits == 12);
}

}  // namespace
}  // namespace fxfuse::runtime
