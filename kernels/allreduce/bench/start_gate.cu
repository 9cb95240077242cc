// Start gate of the all-reduce benchmark (see start_gate.h): a one-thread kernel spinning on a
// host-mapped counter.
#include "kernels/allreduce/bench/start_gate.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace fxfuse::kernels::allreduce::bench {
namespace {

__global__ void WaitForGate(const volatile unsigned* counter, unsigned value) {
  while (*counter < value) {
  }
}

}  // namespace

StartGate::StartGate() {
  void* p = nullptr;
  if (cudaHostAlloc(&p, sizeof(unsigned), cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
    std::fprintf(stderr, "start gate: cudaHostAlloc failed\n");
    std::exit(2);
  }
  counter_ = static_cast<volatile unsigned*>(p);
  *counter_ = 0;
}

StartGate::~StartGate() { cudaFreeHost(const_cast<unsigned*>(counter_)); }

cudaError_t StartGate::Wait(cudaStream_t stream, unsigned value) const {
  WaitForGate<<<1, 1, 0, stream>>>(counter_, value);
  return cudaGetLastError();
}

void StartGate::Open(unsigned value) {
  __sync_synchronize();
  *counter_ = value;
  __sync_synchronize();
}

}  // namespace fxfuse::kernels::allreduce::bench
