// Hopper building blocks shared by fxfuse's kernels: the per-device dynamic shared-memory limit
// of a kernel, mbarriers (shared::cta addresses) and one-dimensional bulk copies (TMA without
// a tensor map) that complete on an mbarrier, and bulk prefetches into L2.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

namespace fxfuse::kernels::device {

// ---- host: raises kKernel's dynamic shared-memory limit once per device (the attribute is
// per device; plans of several GPUs in one process launch on each).
template <auto kKernel>
inline cudaError_t ensureSmemLimit(int bytes) {
  static std::atomic<unsigned long long> done{0};
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const unsigned long long bit = 1ull << (dev & 63);
  if (done.load() & bit) return cudaSuccess;
  e = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) done.fetch_or(bit);
  return e;
}

// ---- mbarriers (shared::cta addresses)
__device__ __forceinline__ void mbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void fenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbarArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarArrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}" ::"r"(bar) : "memory");
}
// Waits until the barrier's phase with this parity has completed.
__device__ __forceinline__ void mbarWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// ---- bulk copy: `bytes` (a multiple of 16; both addresses 16-byte aligned) from global memory
// to shared memory, completing as transaction bytes on `bar` (whose phase must expect them).
__device__ __forceinline__ void bulkCopyToShared(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// ---- bulk prefetch: `bytes` (a multiple of 16, address 16-byte aligned) of global memory into
// L2 by the TMA unit; nothing waits for it and no register or shared memory holds it.
__device__ __forceinline__ void bulkPrefetchToL2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}
// The same with the lines marked evict-last (kept while evict-normal lines, e.g. another
// kernel's streamed operands, are evicted first).
__device__ __forceinline__ void bulkPrefetchToL2EvictLast(const void* src, uint32_t bytes) {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(src), "r"(bytes), "l"(policy)
               : "memory");
}

}  // namespace fxfuse::kernels::device
