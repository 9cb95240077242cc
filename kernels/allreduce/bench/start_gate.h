// Start gate of the all-reduce benchmark: every rank's stream waits in a one-thread kernel
// until the host opens the gate, so the timed work of all ranks (on one or several GPUs) starts
// within a microsecond or two instead of with the host threads' launch skew.
#ifndef FXFUSE_KERNELS_ALLREDUCE_BENCH_START_GATE_H_
#define FXFUSE_KERNELS_ALLREDUCE_BENCH_START_GATE_H_

#include <cuda_runtime_api.h>

namespace fxfuse::kernels::allreduce::bench {

// Host-mapped counter the gate kernels read (cudaHostAlloc, portable and mapped).
class StartGate {
 public:
  StartGate();
  ~StartGate();
  StartGate(const StartGate&) = delete;
  StartGate& operator=(const StartGate&) = delete;

  // Enqueues a kernel on `stream` that returns once the gate reaches `value`.
  cudaError_t Wait(cudaStream_t stream, unsigned value) const;
  // Lets every kernel waiting for a value <= `value` go.
  void Open(unsigned value);

 private:
  volatile unsigned* counter_ = nullptr;
};

}  // namespace fxfuse::kernels::allreduce::bench

#endif  // FXFUSE_KERNELS_ALLREDUCE_BENCH_START_GATE_H_
