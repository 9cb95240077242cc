// Device-side random fill for benchmark inputs (no host round trip for large weights).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "proto/dtype.h"

namespace fxfuse::runtime {

using ::fxfuse::DType;

// Fills `n` elements of `dtype`. Floats: uniform in [-1, 1) (fp32: [0.5, 1.5),
// since fp32 inputs of LLM graphs are mostly scales); integers: i % 7; bool: alternating.
cudaError_t FillRandom(void* data, int64_t n, DType dtype, unsigned seed, cudaStream_t stream);

}  // namespace fxfuse::runtime
