// A consistent serving batch for graphs with `fxfuse.paged_attention` (the kv-cache pass):
// random batch metadata would be invalid, so the interpreter picks the sequences' query and
// context lengths, binds the token count T, kv_num_seqs, kv_max_blocks and kv_num_blocks to
// fit them, and makeInputs() writes slot_mapping, block_table, seq_lens and
// query_start_loc from this plan (random distinct block ids, seeded).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/interpreter/tensor.h"

namespace fxfuse::interp {

// verify --kv-batch/--kv-context/--kv-query-len; 0 = the default.
struct KvBatchOptions {
  int64_t batch = 0;      // sequences (default: 4, at most T)
  int64_t context = 0;    // context length of every sequence (default: varied, see below)
  int64_t query_len = 0;  // query tokens of every sequence (default: decode rows of 1 and one prefill)
};

struct KvBatchPlan {
  int64_t tokens = 0, block_size = 0, num_blocks = 0, max_blocks = 0;
  std::vector<int64_t> query_lens, context_lens;
  std::vector<int64_t> block_table;  // [batch, max_blocks], unused entries 0
  std::vector<int64_t> slots;        // [tokens], -1 for padding tokens
  int64_t batch() const { return static_cast<int64_t>(query_lens.size()); }
  std::string describe() const;
};

// The sequences' lengths for T tokens: --kv-query-len Q gives every sequence Q tokens (the
// rest of T is padding); otherwise the first batch-1 sequences decode one token and the last
// one prefills the remaining tokens. Contexts: --kv-context C, or varied around block
// boundaries for decode rows (bs+1, 1, 2bs, 3bs-1, bs, 2bs+3, 7, ...) and ctx = ql for the prefill.
KvBatchPlan planKvLengths(int64_t tokens, int64_t batch, int64_t block_size, const KvBatchOptions& o);
// Places the sequences in `num_blocks` blocks (a seeded permutation: distinct random ids)
// and fills the block table and slot mapping.
void placeKvBlocks(KvBatchPlan& plan, int64_t num_blocks, int64_t max_blocks, uint64_t seed);
// Blocks the plan needs: per sequence ceil(ctx / bs); the largest and the sum.
int64_t kvBlocksNeeded(const KvBatchPlan& plan, bool sum);

// The metadata input `arg` (slot_mapping | block_table | seq_lens | query_start_loc) of the plan.
Tensor kvMetadataTensor(const KvBatchPlan& plan, const std::string& arg, const Shape& shape, DType dtype);

}  // namespace fxfuse::interp
