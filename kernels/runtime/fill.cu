#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/runtime/fill.h"

namespace fxfuse::runtime {
namespace {

__device__ __forceinline__ float uniform(uint64_t i, unsigned seed) {
  uint64_t z = i * 0x9e3779b97f4a7c15ULL + seed * 0xbf58476d1ce4e5b9ULL + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
}

__global__ void fillKernel(void* data, int64_t n, DType dt, unsigned seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float u = uniform(static_cast<uint64_t>(i), seed);
    switch (dt) {
      case DType::BF16: reinterpret_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16_rn(u); break;
      case DType::F16: reinterpret_cast<__half*>(data)[i] = __float2half_rn(u); break;
      case DType::F32: reinterpret_cast<float*>(data)[i] = 1.0f + 0.5f * u; break;
      case DType::F64: reinterpret_cast<double*>(data)[i] = u; break;
      case DType::F8E4M3FN: reinterpret_cast<__nv_fp8_e4m3*>(data)[i] = __nv_fp8_e4m3(u); break;
      case DType::F8E5M2: reinterpret_cast<__nv_fp8_e5m2*>(data)[i] = __nv_fp8_e5m2(u); break;
      case DType::I64: reinterpret_cast<long long*>(data)[i] = i % 7; break;
      case DType::I32: reinterpret_cast<int*>(data)[i] = static_cast<int>(i % 7); break;
      case DType::I16: reinterpret_cast<short*>(data)[i] = static_cast<short>(i % 7); break;
      case DType::I8: case DType::U8: reinterpret_cast<unsigned char*>(data)[i] = static_cast<unsigned char>(i % 7); break;
      case DType::BOOL: reinterpret_cast<unsigned char*>(data)[i] = static_cast<unsigned char>(i & 1); break;
      default: break;
    }
  }
}

}  // namespace

cudaError_t FillRandom(void* data, int64_t n, DType dtype, unsigned seed, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  int64_t blocks = (n + 255) / 256;
  if (blocks > 65536) blocks = 65536;
  fillKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(data, n, dtype, seed);
  return cudaGetLastError();
}

}  // namespace fxfuse::runtime
