// Weight prefetch: where a plan's matmul weights are pulled into L2 ahead of their GEMM.
//
// A decode step streams every weight once, and HBM idles while the latency-bound steps between
// two GEMMs run (norms, rotary, the KV-cache write, attention): a kernel boundary plus a GEMM's
// ramp-up cost microseconds each, four times per layer. With $FXFUSE_PREFETCH_MB set, a
// session forks a bulk L2 prefetch of each weight onto a side stream when the previous GEMM
// has finished, so the weight bytes move while those steps run and the GEMM finds its first
// tiles in L2. Off by default: measured on the H200 it made the decode step slower
// (docs/runtime.md "Weight prefetch"). Prefetches are hints: no step waits for them and a
// wrong guess costs bandwidth, never correctness.
#pragma once

#include <cstdint>
#include <vector>

#include "proto/fxfuse_plan.pb.h"

namespace fxfuse::runtime {

struct WeightPrefetch {
  int fork_step = 0;    // enqueued on the side stream just before this step
  int matmul_step = 0;  // the step that reads the weight
  int tensor = 0;       // the weight (TensorRef id)
};

// Where a prefetch forks: after the previous Matmul has finished (the default), or as it
// starts, so the weight stream runs on through that GEMM's tail (its lines then need the
// evict-last mark to survive the GEMM's own stream).
enum class PrefetchFork { kAfterPreviousMatmul, kWithPreviousMatmul };

// Per Matmul step reading a weight (operand a or b a PARAMETER or CONSTANT input that no step
// writes: lowering::readOnlyInPlan), in step order. kAfterPreviousMatmul: forked at the first
// step after the previous Matmul; a matmul right after another one gets none (its prefetch
// would only share the bandwidth the running GEMM already uses). kWithPreviousMatmul: forked
// at the previous Matmul. Malformed references are skipped (the session's checks name them).
std::vector<WeightPrefetch> PlanWeightPrefetches(const fxfuse::plan::v1::Plan& plan,
                                                 PrefetchFork fork = PrefetchFork::kAfterPreviousMatmul);

// The bytes of a weight worth prefetching: its first `cap` bytes (the tiles a row-order GEMM
// reads first); more would evict lines before the GEMM reaches them. 0 when cap <= 0.
int64_t PrefetchBytes(int64_t weight_bytes, int64_t cap);

// The cap, from $FXFUSE_PREFETCH_MB: MiB, or "l2" for half of the device's L2 (`l2_bytes`).
// Unset or not a number: 0, the prefetch off. Off by default: on the H200 it made the
// Llama-3.1-8B decode step slower at every batch (docs/runtime.md "Weight prefetch").
int64_t PrefetchCapBytes(int64_t l2_bytes);

// For A/B runs: $FXFUSE_PREFETCH_FORK=with_previous, $FXFUSE_PREFETCH_EVICT_LAST=1.
PrefetchFork PrefetchForkFromEnv();
bool PrefetchEvictLastFromEnv();

}  // namespace fxfuse::runtime
