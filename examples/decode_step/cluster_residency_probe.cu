// How many thread-block clusters a kernel shaped like the tensor-core paged attention's CTA
// (384 threads, 192 KiB of dynamic shared memory: 12 warps with their rings, one CTA per SM)
// keeps resident at once, per cluster size, and what a launch of more clusters than that
// costs: for each size, cudaOccupancyMaxActiveClusters, then one launch of 32 clusters and
// one of the resident count of a kernel that only spins for a fixed number of cycles (the
// same time when every cluster runs in the first wave, a multiple of it otherwise). Also at
// 96 and 64 KiB per CTA (6- and 4-warp CTAs). The planner's rule this measured:
// docs/attention.md "Paged attention" (clusters resident at once).
//   bazel build //examples/decode_step:cluster_residency_probe; ./cluster_residency_probe
#include <cuda_runtime.h>

#include <cstdio>

namespace {

__global__ void __launch_bounds__(384) spinKernel(int* sink, long long cycles) {
  extern __shared__ char smem[];
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  if (threadIdx.x == 0) sink[blockIdx.x] = smem[0];
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// One launch of `clusters` clusters of `size` CTAs, timed with CUDA events after a warm-up
// launch; milliseconds, or -1 on an error.
float timeLaunch(cudaLaunchConfig_t config, int size, int clusters, int* sink) {
  constexpr long long kSpinCycles = 200000;  // ~0.1 ms at the H200's clocks
  config.gridDim = dim3(static_cast<unsigned>(size * clusters));
  cudaEvent_t begin, end;
  if (!ok(cudaEventCreate(&begin), "event") || !ok(cudaEventCreate(&end), "event")) return -1;
  float ms = -1;
  if (ok(cudaLaunchKernelEx(&config, spinKernel, sink, kSpinCycles), "warm-up") && ok(cudaEventRecord(begin), "record") &&
      ok(cudaLaunchKernelEx(&config, spinKernel, sink, kSpinCycles), "launch") && ok(cudaEventRecord(end), "record") &&
      ok(cudaEventSynchronize(end), "sync"))
    cudaEventElapsedTime(&ms, begin, end);
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  return ms;
}

}  // namespace

int main() {
  int sms = 0;
  if (!ok(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "device")) return 1;
  std::printf("multiprocessors %d\n", sms);
  int* sink = nullptr;
  if (!ok(cudaMalloc(&sink, 1 << 20), "malloc")) return 1;
  for (int smem : {192 * 1024, 96 * 1024, 64 * 1024}) {
    if (!ok(cudaFuncSetAttribute(spinKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), "smem limit")) return 1;
    for (int size = 1; size <= 8; ++size) {
      cudaLaunchAttribute attribute = {};
      attribute.id = cudaLaunchAttributeClusterDimension;
      attribute.val.clusterDim.x = static_cast<unsigned>(size);
      attribute.val.clusterDim.y = 1;
      attribute.val.clusterDim.z = 1;
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(static_cast<unsigned>(size));
      config.blockDim = dim3(384);
      config.dynamicSmemBytes = static_cast<size_t>(smem);
      config.attrs = &attribute;
      config.numAttrs = 1;
      int resident = 0;
      if (!ok(cudaOccupancyMaxActiveClusters(&resident, spinKernel, &config), "occupancy")) return 1;
      const float ms32 = timeLaunch(config, size, 32, sink), ms_resident = timeLaunch(config, size, resident, sink);
      std::printf("smem %d KiB, cluster %d: %d resident (%d CTAs); 32 clusters %.3f ms, %d clusters %.3f ms\n",
                  smem / 1024, size, resident, resident * size, ms32, resident, ms_resident);
    }
  }
  return 0;
}
