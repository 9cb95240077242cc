// Taking a dense plan's rotary step into the attention after it (the short attention kernel's
// rotary prologue, kernels/runtime/attention.h). The runtime does it when it prepares a plan:
// whether the attention runs the short kernel depends on the bound number of tokens, so it is
// not the lowering's to decide.
//
//   step i:   rt.reshape_and_cache, rotation only ─► qk_rot [T, Hq + Hk, E], read by step i+1 only
//   step i+1: rt.attention (sm90) of q = qk_rot[:, :Hq], k = qk_rot[:, Hq:], v
//   becomes   step i: nothing;  step i+1: attention of the unrotated q and k, rotated as it reads them
//
// The output is the chain's up to the order of the attention's sums (the short kernel's own),
// since the kernel rotates with the rotary step's rounding (kernels/runtime/rotary.cuh).
// docs/runtime.md "Attention prologues" says what it measured.
#pragma once

#include <optional>
#include <utility>

#include "kernels/runtime/attention.h"
#include "kernels/runtime/paged_attention.h"

namespace fxfuse::runtime {

// A rotation-only rt.reshape_and_cache step writing its rotated rows into query_out.
struct RotationStep {
  ReshapeAndCacheParams params;
  int output_tensor = -1;  // the plan tensor of query_out
};

// An rt.attention step on the sm90 kernels, as it reads its operands.
struct AttentionStep {
  AttentionParams params;
  int out_tensor = -1;  // the plan tensor it writes
};

// The attention `a` reading the rotation's sources instead of its output, with the rotation as
// its prologue; nullopt where q or k is not a whole-head view of the rotated rows that the short
// attention can take that way (one sequence, the rotation's tokens as queries and keys).
std::optional<std::pair<AttentionParams, AttentionRotary>> RotatedAttentionOf(const ReshapeAndCacheParams& rotation,
                                                                              const AttentionParams& a);

// Whether sessions take rotary steps into the attention (unless $FXFUSE_ATTENTION_PROLOGUE=0).
bool AttentionPrologueFromEnv();

}  // namespace fxfuse::runtime
