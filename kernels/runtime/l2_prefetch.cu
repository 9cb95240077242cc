// L2 prefetch (l2_prefetch.h): each thread issues cp.async.bulk.prefetch.L2 for its chunks of
// the range, chunks in address order across threads, so the first lines a row-order GEMM reads
// are requested first. The TMA unit of each block's multiprocessor fetches the lines; the
// blocks take a few SM slots for a microsecond, not the bandwidth of the kernel beside them.
#include <cstdint>

#include "kernels/device/mbarrier.cuh"
#include "kernels/runtime/l2_prefetch.h"

namespace fxfuse::runtime {
namespace {

constexpr int kThreads = 32;
constexpr int64_t kMaxBlocks = 64;  // TMA units issuing at once: enough for the copy rate

__global__ void __launch_bounds__(kThreads) l2PrefetchKernel(const uint8_t* data, int64_t bytes, bool evict_last) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  kernels::device::prefetchRangeToL2(data, bytes, blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x,
                                     static_cast<int64_t>(gridDim.x) * kThreads, evict_last);
#endif
}

}  // namespace

L2Range AlignedL2Range(const void* data, int64_t bytes) {
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + 15) / 16 * 16;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + static_cast<uintptr_t>(bytes > 0 ? bytes : 0)) / 16 * 16;
  if (!data || end <= begin) return {};
  return {reinterpret_cast<const void*>(begin), static_cast<int64_t>(end - begin)};
}

cudaError_t LaunchL2Prefetch(const void* data, int64_t bytes, bool evict_last, cudaStream_t stream) {
  const L2Range r = AlignedL2Range(data, bytes);
  if (r.bytes == 0) return cudaSuccess;
  const int64_t chunks = (r.bytes + kernels::device::kL2PrefetchChunkBytes - 1) / kernels::device::kL2PrefetchChunkBytes;
  int64_t blocks = (chunks + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  l2PrefetchKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<const uint8_t*>(r.data), r.bytes,
                                                                           evict_last);
  return cudaGetLastError();
}

}  // namespace fxfuse::runtime
