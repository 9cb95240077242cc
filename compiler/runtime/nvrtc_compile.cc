#include "compiler/runtime/nvrtc_compile.h"

#include <vector>

#include "compiler/runtime/cuda_libs.h"
#include "compiler/runtime/kernel_cache.h"
#include "ir/status.h"

namespace fxfuse::runtime {

CompiledKernel compileKernel(const std::string& source, const std::string& name, const std::string& arch,
                             bool use_cache) {
  const NvrtcApi& api = nvrtc();
  int major = 0, minor = 0;
  api.nvrtcVersion(&major, &minor);
  std::string arch_opt = "--gpu-architecture=" + arch;
  std::vector<const char*> opts = {arch_opt.c_str(), "-std=c++17", "--fmad=false", "-default-device"};
  const std::string dir = kernelCacheDir();
  const std::string key = kernelCacheKey(source, std::vector<std::string>(opts.begin(), opts.end()),
                                         arch + "/nvrtc-" + std::to_string(major) + "." + std::to_string(minor));
  CompiledKernel ck;
  if (use_cache) {
    if (auto cached = loadCachedKernel(dir, key)) {
      ck.cubin = std::move(*cached);
      ck.from_cache = true;
      return ck;
    }
  }
  nvrtcProgram prog;
  if (api.nvrtcCreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr) != NVRTC_SUCCESS)
    fail("NVRTC: cannot create a program for kernel {}", name);
  nvrtcResult r = api.nvrtcCompileProgram(prog, static_cast<int>(opts.size()), opts.data());
  size_t log_size = 0;
  api.nvrtcGetProgramLogSize(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 1) api.nvrtcGetProgramLog(prog, log.data());
  if (r != NVRTC_SUCCESS) {
    api.nvrtcDestroyProgram(&prog);
    fail("NVRTC failed to compile generated kernel {} for {}: {}\n{}", name, arch, api.nvrtcGetErrorString(r), log);
  }
  size_t n = 0;
  api.nvrtcGetCUBINSize(prog, &n);
  ck.cubin.resize(n);
  api.nvrtcGetCUBIN(prog, ck.cubin.data());
  api.nvrtcDestroyProgram(&prog);
  if (use_cache) storeCachedKernel(dir, key, ck.cubin);
  return ck;
}

}  // namespace fxfuse::runtime
