// Warming L2 with a range a later step reads (a matmul's weight): the plan runtime launches
// this on a side stream while latency-bound steps run, so the weight stream of the next GEMM
// starts before the GEMM does (docs/runtime.md "Weight prefetch").
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fxfuse::runtime {

// Enqueues bulk L2 prefetches of [data, data + bytes) on `stream`: the 16-byte-aligned part of
// the range, cut into chunks spread over a few dozen one-warp blocks. Nothing waits for the
// lines to arrive; the kernel only issues the requests. `evict_last`: the lines are marked to
// stay while evict-normal lines go first. Requires sm_90 (a no-op before).
cudaError_t LaunchL2Prefetch(const void* data, int64_t bytes, bool evict_last, cudaStream_t stream);

}  // namespace fxfuse::runtime
