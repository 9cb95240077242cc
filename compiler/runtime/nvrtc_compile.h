// Compiling generated kernels with NVRTC (no GPU needed), with an on-disk cache of the
// cubins keyed by the source hash, the target and the NVRTC version:
// $FXFUSE_CACHE_DIR, else $XDG_CACHE_HOME/fxfuse/kernels, else ~/.cache/fxfuse/kernels.
#pragma once

#include <string>

namespace fxfuse::runtime {

struct CompiledKernel {
  std::string cubin;
  bool from_cache = false;
};

// Compiles `source` for `arch` ("sm_90a"). Throws FxError with NVRTC's log on failure.
// `use_cache` = false skips the disk cache (tests of the compiler itself).
CompiledKernel compileKernel(const std::string& source, const std::string& name, const std::string& arch = "sm_90a",
                             bool use_cache = true);
std::string kernelCacheDir();

}  // namespace fxfuse::runtime
