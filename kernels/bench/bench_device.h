// Device helpers of the kernel benchmark: empty and spin kernels, random fills.
#ifndef FXFUSE_KERNELS_BENCH_BENCH_DEVICE_H_
#define FXFUSE_KERNELS_BENCH_BENCH_DEVICE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/status.h"
#include "kernels/types.h"

namespace fxfuse::kernels::bench {

// A kernel with no body, one CTA of 32 threads: the launch floor.
Status LaunchEmptyKernel(cudaStream_t stream);
// One thread that spins for `cycles` SM clock cycles: holds the stream while the host enqueues
// the timed launches, so host overhead stays out of the measurement.
Status LaunchSpinKernel(int64_t cycles, cudaStream_t stream);
// `count` D16 values: normal(0, stddev) when lo == hi == 0, else uniform [lo, hi).
Status FillRandomD16(void* data, int64_t count, DType dtype, float stddev, float lo, float hi, uint64_t seed,
                     cudaStream_t stream);
Status FillFloat(float* data, int64_t count, float value, cudaStream_t stream);

}  // namespace fxfuse::kernels::bench

#endif  // FXFUSE_KERNELS_BENCH_BENCH_DEVICE_H_
