// L2 prefetch (l2_prefetch.h): each thread issues cp.async.bulk.prefetch.L2 for its chunks of
// the range, chunks in address order across threads, so the first lines a row-order GEMM reads
// are requested first. The TMA unit of each block's multiprocessor fetches the lines; the
// blocks take a few SM slots for a microsecond, not the bandwidth of the kernel beside them.
#include <cstdint>

#include "kernels/device/mbarrier.cuh"
#include "kernels/runtime/l2_prefetch.h"

namespace fxfuse::runtime {
namespace {

constexpr int64_t kChunkBytes = 16 * 1024;  // bytes per prefetch instruction
constexpr int kThreads = 32;
constexpr int64_t kMaxBlocks = 64;  // TMA units issuing at once: enough for the copy rate

__global__ void __launch_bounds__(kThreads) l2PrefetchKernel(const uint8_t* data, int64_t bytes, bool evict_last) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int64_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; c < chunks;
       c += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t offset = c * kChunkBytes;
    const int64_t n = bytes - offset < kChunkBytes ? bytes - offset : kChunkBytes;
    if (evict_last)
      kernels::device::bulkPrefetchToL2EvictLast(data + offset, static_cast<uint32_t>(n));
    else
      kernels::device::bulkPrefetchToL2(data + offset, static_cast<uint32_t>(n));
  }
#endif
}

}  // namespace

cudaError_t LaunchL2Prefetch(const void* data, int64_t bytes, bool evict_last, cudaStream_t stream) {
  // Only whole 16-byte units inside the range: a bulk prefetch must not start before `data`
  // or end past `data + bytes`.
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + 15) / 16 * 16;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + static_cast<uintptr_t>(bytes > 0 ? bytes : 0)) / 16 * 16;
  if (!data || end <= begin) return cudaSuccess;
  const int64_t aligned = static_cast<int64_t>(end - begin);
  const int64_t chunks = (aligned + kChunkBytes - 1) / kChunkBytes;
  int64_t blocks = (chunks + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  l2PrefetchKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(reinterpret_cast<const uint8_t*>(begin),
                                                                           aligned, evict_last);
  return cudaGetLastError();
}

}  // namespace fxfuse::runtime
