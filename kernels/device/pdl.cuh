// Programmatic dependent launch (PDL, Hopper): a kernel launched with the programmatic
// stream-serialization attribute may be scheduled while the kernel before it in the stream is
// still running, so its launch latency and prologue overlap the predecessor's tail (inside a
// CUDA graph too: the edge becomes a programmatic one). Every kernel fxfuse launches this way
// calls waitForPrecedingGrid() before it reads or writes any memory an earlier step may touch
// (it returns once the preceding grid has finished and its writes are visible), and
// allowDependentGrids() once the next kernel may be scheduled: at its start when its grid is
// small, after its main loop when later waves of its blocks still need multiprocessor slots
// (the small-M GEMM, paged attention). Both are no-ops for a plain launch and before sm_90.
// Only memory no step writes (weights) may be touched before the wait.
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
// else as a plain launch. The kernel must call waitForPrecedingGrid() before it touches memory
// and allowDependentGrids() where the next kernel may start (see above).
template <typename... Params, typename... Args>
cudaError_t LaunchProgrammatic(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                               cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = ProgrammaticLaunchEnabled() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// LaunchProgrammatic for a kernel whose blocks form one-dimensional thread-block clusters of
// `cluster_size` blocks (grid.x a multiple of it): the cluster attribute and, when enabled,
// the programmatic one.
template <typename... Params, typename... Args>
cudaError_t LaunchProgrammaticInClusters(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                                         int cluster_size, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(cluster_size);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  attribute[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[1].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = ProgrammaticLaunchEnabled() ? 2 : 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace fxfuse::kernels
