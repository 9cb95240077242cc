// The stream-holding kernel of stream_hold.h.
#include "kernels/device/pdl.cuh"
#include "tests/kernels/stream_hold.h"

namespace fxfuse::testing {
namespace {

__global__ void streamHoldKernel(long long cycles) {
  kernels::allowDependentGrids();
  kernels::waitForPrecedingGrid();
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

}  // namespace

cudaError_t LaunchStreamHold(int microseconds, cudaStream_t stream) {
  int device = 0, khz = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device);
  if (e != cudaSuccess) return e;
  const long long cycles = static_cast<long long>(khz) * microseconds / 1000;
  return kernels::LaunchProgrammatic(streamHoldKernel, dim3(1), dim3(1), 0, stream, cycles);
}

}  // namespace fxfuse::testing
