// The sm90 routes of an rt.attention step (plan arg impl = "sm90"): which of fxfuse's Hopper
// attention kernels runs a dense attention (docs/attention.md "Plans and the runtime"), and the
// form that takes a dense plan's rotary step in as its prologue (attention_prologue.h).
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "kernels/runtime/attention.h"

namespace fxfuse::runtime {

// The kernel for `q`, or an empty function where no sm90 kernel takes its params (odd strides,
// misaligned pointers, mask, fp32, ...): the caller runs the reference kernel then. Allocations
// a route makes (decode workspaces, the dense paged view) are freed by `cleanup`.
std::function<cudaError_t(cudaStream_t)> Sm90Attention(const AttentionParams& q,
                                                       std::vector<std::function<void()>>* cleanup);

// The attention `q` (operands as RotatedAttentionOf rewrote them) with `rotary` applied to q and
// k as it reads them: the short attention's prologue where it takes them, else the prefill
// kernel's for at most fxfuse::attention::kRotaryPrefillMaxTokens tokens; empty otherwise.
std::function<cudaError_t(cudaStream_t)> Sm90RotatedAttention(const AttentionParams& q, const AttentionRotary& rotary);

// Whether the short attention is on (unless $FXFUSE_SHORT_ATTENTION=0, for A/B runs).
bool ShortAttentionFromEnv();

}  // namespace fxfuse::runtime
