// A kernel that holds a stream for a while after letting the next kernel launch (GPU tests of
// programmatic dependent launch, kernels/device/pdl.cuh): launched with the programmatic
// attribute, it calls allowDependentGrids() at once and then spins, so the kernel after it
// starts and waits in waitForPrecedingGrid() for the spin, and the kernel after that one (when
// the middle one lets it launch early too) runs what it does before its own wait during the spin.
#pragma once

#include <cuda_runtime_api.h>

namespace fxfuse::testing {

// One block of one thread spinning for about `microseconds` (the GPU's clock).
cudaError_t LaunchStreamHold(int microseconds, cudaStream_t stream);

}  // namespace fxfuse::testing
