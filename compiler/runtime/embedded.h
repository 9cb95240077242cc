// Kernels compiled at build time (the fxfuse_plan Bazel macro, tools/fxfuse_plan.bzl): the
// generated .cu defines a table of these, which Program::fromPlan uses instead of NVRTC.
// Plain C++ so that nvcc-compiled tables need no protobuf headers.
#pragma once

#include <cstddef>

namespace fxfuse::runtime {

struct EmbeddedKernel {
  const char* name;      // the plan's kernel name (Plan.kernels[i].name)
  const void* function;  // host stub of the __global__ function (for cudaLaunchKernel)
  // The source's `fx_index_error` (a __device__ symbol) when the kernel checks index reads.
  const void* index_error = nullptr;
};

}  // namespace fxfuse::runtime
