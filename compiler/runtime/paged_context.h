// When a paged attention may read ahead of the kernel before it (plain C++, no GPU).
//
// With programmatic dependent launch a paged-attention step's kernels start while the kernel
// before them (this layer's cache write) is still running. What that kernel and the ones
// still running before it cannot be writing may be read before the kernels wait for it:
// the batch metadata, and the keys and values cached before this step's tokens. Reading them
// early takes the block-table lookups and the first context copies off the layer's dependency
// chain (docs/runtime.md "Paged attention reads ahead").
#pragma once

#include "proto/fxfuse_plan.pb.h"

namespace fxfuse::runtime {

// Whether paged-attention step `step` of `plan` may read its batch metadata, and copy the
// cached context before each sequence's first query position, while the kernel before it still
// runs (PagedAttentionParams::context_settled): block_table, seq_lens and query_start_loc are
// plan inputs that no earlier step names, and every earlier step that names key_cache or
// value_cache is a paged step (rt.reshape_and_cache writes only this step's slots; another
// rt.paged_attention only reads). $FXFUSE_PAGED_EARLY=0: never (A/B runs).
bool PagedContextSettled(const fxfuse::plan::v1::Plan& plan, int step);

}  // namespace fxfuse::runtime
