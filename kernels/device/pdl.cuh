// Programmatic dependent launch (PDL, Hopper): a kernel launched with the programmatic
// stream-serialization attribute may be scheduled while the kernel before it in the stream is
// still running, so its launch latency and prologue overlap the predecessor's tail (inside a
// CUDA graph too: the edge becomes a programmatic one). Every kernel fxfuse launches this way
// calls waitForPrecedingGrid() before it reads or writes any memory an earlier step may touch
// (it returns once the preceding grid has finished and its writes are visible), and
// allowDependentGrids() once the next kernel may be scheduled: at its start when its grid is
// small, after its main loop when later waves of its blocks still need multiprocessor slots
// (the small-M GEMM, paged attention). Both are no-ops for a plain launch and before sm_90.
// Only memory no step writes may be touched before the wait: the caller knows which (a plan's
// inputs that it does not update in place, lowering::readOnlyInPlan) and tells the kernel.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/types.h"

namespace fxfuse::kernels {

__device__ __forceinline__ void waitForPrecedingGrid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allowDependentGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launches `kernel` with programmatic stream serialization when ProgrammaticLaunchEnabled(),
// else as a plain launch; with `cluster_size` > 0 its blocks form one-dimensional thread-block
// clusters of that many blocks (grid.x a multiple of it). The kernel must call
// waitForPrecedingGrid() before it touches memory and allowDependentGrids() where the next
// kernel may start (see above).
template <typename... Params, typename... Args>
cudaError_t LaunchProgrammaticInClusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                                         int cluster_size, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  unsigned count = 0;
  if (cluster_size > 0) {
    attribute[count].id = cudaLaunchAttributeClusterDimension;
    attribute[count].val.clusterDim.x = static_cast<unsigned>(cluster_size);
    attribute[count].val.clusterDim.y = 1;
    attribute[count].val.clusterDim.z = 1;
    ++count;
  }
  if (ProgrammaticLaunchEnabled()) {
    attribute[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  config.attrs = attribute;
  config.numAttrs = count;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// The same without clusters.
template <typename... Params, typename... Args>
cudaError_t LaunchProgrammatic(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                               cudaStream_t stream, Args&&... args) {
  return LaunchProgrammaticInClusters(kernel, grid, block, smem_bytes, 0, stream, std::forward<Args>(args)...);
}

}  // namespace fxfuse::kernels
