// Device helpers of the kernel benchmark: empty kernel (launch floor), spin kernel (hides host
// enqueue time), hash-based random D16 fills.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "kernels/bench/bench_device.h"

namespace fxfuse::kernels::bench {
namespace {

__global__ void EmptyKernel() {}

__global__ void SpinKernel(int64_t cycles) {
  const int64_t start = clock64();
  while (clock64() - start < cycles) {
  }
}

__device__ __forceinline__ uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// Uniform (0, 1] from 24 random bits.
__device__ __forceinline__ float Unit(uint64_t bits) {
  return (static_cast<float>(bits & 0xFFFFFF) + 1.0f) * (1.0f / 16777216.0f);
}

template <typename T>
__global__ void FillRandomKernel(T* data, int64_t count, float stddev, float lo, float hi, uint64_t seed,
                                 bool normal) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = Mix(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(i));
    float v;
    if (normal) {  // Box-Muller
      const float u1 = Unit(h), u2 = Unit(h >> 32);
      v = stddev * sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    } else {
      v = lo + (hi - lo) * (Unit(h) - 1.0f / 16777216.0f);
    }
    if constexpr (sizeof(T) == 2 && std::is_same_v<T, __half>) {
      data[i] = __float2half_rn(v);
    } else {
      data[i] = __float2bfloat16_rn(v);
    }
  }
}

__global__ void FillFloatKernel(float* data, int64_t count, float value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    data[i] = value;
  }
}

Status Check(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return Status::CudaError(std::string(what) + ": " + cudaGetErrorString(err));
  return Status::Ok();
}

}  // namespace

Status LaunchEmptyKernel(cudaStream_t stream) {
  EmptyKernel<<<1, 32, 0, stream>>>();
  return Check("EmptyKernel");
}

Status LaunchSpinKernel(int64_t cycles, cudaStream_t stream) {
  SpinKernel<<<1, 1, 0, stream>>>(cycles);
  return Check("SpinKernel");
}

Status FillRandomD16(void* data, int64_t count, DType dtype, float stddev, float lo, float hi, uint64_t seed,
                     cudaStream_t stream) {
  const bool normal = lo == 0.0f && hi == 0.0f;
  const int blocks = 132 * 16;
  if (dtype == DType::F16) {
    FillRandomKernel<__half><<<blocks, 256, 0, stream>>>(static_cast<__half*>(data), count, stddev, lo, hi, seed,
                                                          normal);
  } else {
    FillRandomKernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(data), count, stddev,
                                                                 lo, hi, seed, normal);
  }
  return Check("FillRandomKernel");
}

Status FillFloat(float* data, int64_t count, float value, cudaStream_t stream) {
  FillFloatKernel<<<132 * 4, 256, 0, stream>>>(data, count, value);
  return Check("FillFloatKernel");
}

}  // namespace fxfuse::kernels::bench
