// CHECK(call) for the standalone GPU benchmarks of this folder: a failed CUDA runtime call prints
// the file, line and CUDA's message and exits with status 1 (they are measurements, not library
// code, so there is nothing to unwind).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t check_status_ = (x);                                                 \
    if (check_status_ != cudaSuccess) {                                              \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__,                         \
                   cudaGetErrorString(check_status_));                               \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)
