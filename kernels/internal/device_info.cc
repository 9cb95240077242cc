// The current device's multiprocessor count, cached per device (the launch heuristics need it).
#include <cuda_runtime_api.h>

#include <atomic>
#include <string>

#include "kernels/internal/launch_config.h"

namespace fxfuse::kernels::internal {

Status CurrentDeviceSmCount(int* sm_count) {
  static std::atomic<int> cached[64] = {};
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) {
    return Status::CudaError(std::string("cudaGetDevice: ") + cudaGetErrorString(err));
  }
  if (device >= 0 && device < 64) {
    const int value = cached[device].load(std::memory_order_relaxed);
    if (value > 0) {
      *sm_count = value;
      return Status::Ok();
    }
  }
  int value = 0;
  err = cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) {
    return Status::CudaError(std::string("cudaDeviceGetAttribute(MultiProcessorCount): ") +
                             cudaGetErrorString(err));
  }
  if (device >= 0 && device < 64) cached[device].store(value, std::memory_order_relaxed);
  *sm_count = value;
  return Status::Ok();
}

}  // namespace fxfuse::kernels::internal
