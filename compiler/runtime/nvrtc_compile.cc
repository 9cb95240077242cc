#include "compiler/runtime/nvrtc_compile.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "compiler/lowering/codegen.h"
#include "compiler/runtime/cuda_libs.h"
#include "ir/io.h"
#include "ir/status.h"

namespace fxfuse::runtime {

std::string kernelCacheDir() {
  if (const char* d = std::getenv("FXFUSE_CACHE_DIR")) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME")) return std::string(x) + "/fxfuse/kernels";
  if (const char* h = std::getenv("HOME")) return std::string(h) + "/.cache/fxfuse/kernels";
  return "/tmp/fxfuse-kernels";
}

namespace {

void mkdirs(const std::string& path) {
  std::string cur;
  std::stringstream ss(path);
  std::string part;
  if (!path.empty() && path[0] == '/') cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    cur += part + "/";
    mkdir(cur.c_str(), 0755);
  }
}

bool readAll(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return !out->empty();
}

}  // namespace

CompiledKernel compileKernel(const std::string& source, const std::string& name, const std::string& arch,
                             bool use_cache) {
  const NvrtcApi& api = nvrtc();
  int major = 0, minor = 0;
  api.nvrtcVersion(&major, &minor);
  std::string key = lowering::sourceHash(source + "\n//" + arch + "/" + std::to_string(major) + "." + std::to_string(minor));
  std::string dir = kernelCacheDir();
  std::string path = dir + "/" + key + "-" + arch + ".cubin";
  CompiledKernel ck;
  if (use_cache && readAll(path, &ck.cubin)) {
    ck.from_cache = true;
    return ck;
  }
  nvrtcProgram prog;
  if (api.nvrtcCreateProgram(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr) != NVRTC_SUCCESS)
    fail("NVRTC: cannot create a program for kernel {}", name);
  std::string arch_opt = "--gpu-architecture=" + arch;
  std::vector<const char*> opts = {arch_opt.c_str(), "-std=c++17", "--fmad=false", "-default-device"};
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
  if (use_cache) {
    try {
      mkdirs(dir);
      ir::writeFileAtomic(path, ck.cubin);
    } catch (const FxError&) {
      // A read-only cache is not an error: the kernel is compiled again next time.
    }
  }
  return ck;
}

}  // namespace fxfuse::runtime
