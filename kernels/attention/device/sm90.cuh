// sm_90a building blocks of the attention kernels: mbarriers, TMA tile loads, wgmma shared-memory
// descriptors and fences, register reallocation, and the output conversion of the epilogue.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>

#include "kernels/device/mbarrier.cuh"
#include "kernels/device/sm90.cuh"
#include "kernels/types.h"

namespace fxfuse::attention::device {

__device__ __forceinline__ uint32_t smemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

using kernels::device::ensureSmemLimit;
using kernels::device::fenceBarrierInit;
using kernels::device::mbarArrive;
using kernels::device::mbarArriveExpectTx;
using kernels::device::mbarInit;
using kernels::device::mbarWait;

using kernels::device::fenceRegs;
using kernels::device::smemDesc;
using kernels::device::tmaLoad4d;
using kernels::device::wgmmaCommit;
using kernels::device::wgmmaFence;
using kernels::device::wgmmaWait;


// Same for 32-bit operand registers (the P fragment read by an in-flight wgmma).
template <int N, int M>
__device__ __forceinline__ void fenceRegsU(uint32_t (&d)[N][M]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < M; ++j) asm volatile("" : "+r"(d[i][j])::"memory");
}

// Barrier among `threads` threads (a warpgroup) with id 1..15 (0 is __syncthreads).
__device__ __forceinline__ void namedBarrierSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

__device__ __forceinline__ void namedBarrierArrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

template <int kRegs>
__device__ __forceinline__ void regAlloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void regDealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// ---- element types
template <typename T>
struct Elem;
template <>
struct Elem<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&u));
  }
};
template <>
struct Elem<__half> {
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    __half2 v = __floats2half2_rn(a, b);
    return *reinterpret_cast<uint32_t*>(&v);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t u) { return __half22float2(*reinterpret_cast<__half2*>(&u)); }
};

// Eight 16-bit values of a 16-byte load as floats.
template <typename T>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 x = Elem<T>::unpack(w[q]);
    f[2 * q] = x.x;
    f[2 * q + 1] = x.y;
  }
}

// The epilogue's conversion of one fp32 value to FP8 e4m3 with a static scale (vLLM's fused
// attention + quant contract, docs/attention.md): x * (1/scale), clamped to ±448, NaN kept; no
// D16 rounding of x first.
__device__ __forceinline__ float fp8Clamp(float x, float inv_scale) {
  float y = fminf(fmaxf(x * inv_scale, -kernels::kFp8E4m3Max), kernels::kFp8E4m3Max);
  return x != x ? x : y;
}

// Stores two adjacent output elements (fp32 values already normalized by 1/l).
template <typename T, bool kFp8>
__device__ __forceinline__ void storePair(void* base, int64_t index, float a, float b, float inv_scale) {
  if constexpr (kFp8) {
    __nv_fp8x2_e4m3 v(make_float2(fp8Clamp(a, inv_scale), fp8Clamp(b, inv_scale)));
    *reinterpret_cast<__nv_fp8x2_storage_t*>(static_cast<uint8_t*>(base) + index) = v.__x;
  } else {
    *reinterpret_cast<uint32_t*>(static_cast<T*>(base) + index) = Elem<T>::pack(a, b);
  }
}

}  // namespace fxfuse::attention::device
