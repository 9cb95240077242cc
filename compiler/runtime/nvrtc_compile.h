// Compiling generated kernels with NVRTC (no GPU needed), with an on-disk cache of the
// cubins keyed by SHA-256 of the source, the options, the target and the NVRTC version, in a
// private directory (kernel_cache.h).
#pragma once

#include <string>

#include "compiler/runtime/kernel_cache.h"

namespace fxfuse::runtime {

struct CompiledKernel {
  std::string cubin;
  bool from_cache = false;
};

// Compiles `source` for `arch` ("sm_90a"). Throws FxError with NVRTC's log on failure.
// `use_cache` = false skips the disk cache (tests of the compiler itself).
CompiledKernel compileKernel(const std::string& source, const std::string& name, const std::string& arch = "sm_90a",
                             bool use_cache = true);

}  // namespace fxfuse::runtime
