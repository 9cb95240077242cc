// Asynchronous global -> shared copies (cp.async, sm_80+): a thread issues 16-byte copies that
// complete in the background, groups them with cpAsyncCommit(), and cpAsyncWait<N>() returns
// once at most N of its committed groups are still in flight. Kernels use them as multi-stage
// rings: the loads of the next tiles are in flight while the current one is computed, without
// registers to hold them. Copies are per thread: other threads see the data after the wait and
// a barrier (__syncwarp / __syncthreads).
#pragma once

#include <cstdint>

namespace fxfuse::kernels {

// 16 bytes from `src` to shared address `dst` (16-byte aligned both); `valid` false writes 16
// zero bytes and reads nothing (src may then be any address).
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0) : "memory");
}

// cpAsync16 with an L2 prefetch size (0, 64, 128 or 256 bytes): a miss fills that many bytes
// around `src` into L2, so a stream whose next copies read the following bytes of the same
// rows finds them there, and DRAM serves fewer, larger requests.
template <int kL2PrefetchBytes>
__device__ __forceinline__ void cpAsync16Prefetch(uint32_t dst, const void* src, bool valid) {
  static_assert(kL2PrefetchBytes == 0 || kL2PrefetchBytes == 64 || kL2PrefetchBytes == 128 || kL2PrefetchBytes == 256,
                "L2 prefetch sizes are 64, 128 or 256 bytes");
  const int size = valid ? 16 : 0;
  if constexpr (kL2PrefetchBytes == 256) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(size) : "memory");
  } else if constexpr (kL2PrefetchBytes == 128) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(size) : "memory");
  } else if constexpr (kL2PrefetchBytes == 64) {
    asm volatile("cp.async.cg.shared.global.L2::64B [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(size) : "memory");
  } else {
    cpAsync16(dst, src, valid);
  }
}

__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace fxfuse::kernels
