#include "compiler/runtime/cuda_libs.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "ir/status.h"

namespace fxfuse::runtime {

namespace {

std::vector<std::string> searchDirs() {
  std::vector<std::string> dirs;
  if (const char* d = std::getenv("FXFUSE_CUDA_LIB_DIR")) dirs.push_back(d);
  dirs.push_back("");  // the loader's default search path
  dirs.push_back("/usr/local/cuda/lib64");
  dirs.push_back("/usr/local/cuda/targets/x86_64-linux/lib");
  for (const char* py : {"/usr/local/lib/python3.12/dist-packages", "/usr/lib/python3/dist-packages",
                         "/opt/torch/.venv/lib/python3.12/site-packages", "/usr/local/lib/python3.12/site-packages"}) {
    for (const char* sub : {"/nvidia/cu13/lib", "/nvidia/cublas/lib", "/nvidia/cuda_nvrtc/lib", "/nvidia/nccl/lib",
                            "/nvidia/cuda_cupti/lib"})
      dirs.push_back(std::string(py) + sub);
  }
  return dirs;
}

void* openLib(const std::vector<std::string>& names, const std::string& what) {
  std::string tried;
  for (const auto& dir : searchDirs()) {
    for (const auto& n : names) {
      std::string path = dir.empty() ? n : dir + "/" + n;
      if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
      if (!dir.empty()) tried += (tried.empty() ? "" : ", ") + dir;
      break;
    }
  }
  fail("{} not found ({}; searched the loader path and {}); set FXFUSE_CUDA_LIB_DIR", what, names.front(), tried);
}

template <typename F>
void sym(void* h, F& f, const char* name, const std::string& lib) {
  f = reinterpret_cast<F>(dlsym(h, name));
  if (!f) fail("{}: symbol {} not found", lib, name);
}

}  // namespace

#define FXFUSE_SYM(api, h, name, lib) sym(h, api.name, #name, lib)

const CublasLtApi& cublasLt() {
  static CublasLtApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = openLib({"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}, "cuBLASLt");
    const std::string l = "cuBLASLt";
    FXFUSE_SYM(api, h, cublasLtCreate, l);
    FXFUSE_SYM(api, h, cublasLtDestroy, l);
    FXFUSE_SYM(api, h, cublasLtMatmul, l);
    FXFUSE_SYM(api, h, cublasLtMatmulDescCreate, l);
    FXFUSE_SYM(api, h, cublasLtMatmulDescDestroy, l);
    FXFUSE_SYM(api, h, cublasLtMatmulDescSetAttribute, l);
    FXFUSE_SYM(api, h, cublasLtMatrixLayoutCreate, l);
    FXFUSE_SYM(api, h, cublasLtMatrixLayoutDestroy, l);
    FXFUSE_SYM(api, h, cublasLtMatrixLayoutSetAttribute, l);
    FXFUSE_SYM(api, h, cublasLtMatmulPreferenceCreate, l);
    FXFUSE_SYM(api, h, cublasLtMatmulPreferenceDestroy, l);
    FXFUSE_SYM(api, h, cublasLtMatmulPreferenceSetAttribute, l);
    FXFUSE_SYM(api, h, cublasLtMatmulAlgoGetHeuristic, l);
    FXFUSE_SYM(api, h, cublasLtMatmulAlgoConfigGetAttribute, l);
    FXFUSE_SYM(api, h, cublasLtGetStatusString, l);
  });
  return api;
}

const NvrtcApi& nvrtc() {
  static NvrtcApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = openLib({"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}, "NVRTC");
    const std::string l = "NVRTC";
    FXFUSE_SYM(api, h, nvrtcCreateProgram, l);
    FXFUSE_SYM(api, h, nvrtcDestroyProgram, l);
    FXFUSE_SYM(api, h, nvrtcCompileProgram, l);
    FXFUSE_SYM(api, h, nvrtcGetProgramLogSize, l);
    FXFUSE_SYM(api, h, nvrtcGetProgramLog, l);
    FXFUSE_SYM(api, h, nvrtcGetCUBINSize, l);
    FXFUSE_SYM(api, h, nvrtcGetCUBIN, l);
    FXFUSE_SYM(api, h, nvrtcGetErrorString, l);
    FXFUSE_SYM(api, h, nvrtcVersion, l);
  });
  return api;
}

const NcclApi& nccl() {
  static NcclApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = openLib({"libnccl.so.2", "libnccl.so"}, "NCCL");
    const std::string l = "NCCL";
    FXFUSE_SYM(api, h, ncclAllReduce, l);
    FXFUSE_SYM(api, h, ncclAllGather, l);
    FXFUSE_SYM(api, h, ncclGetErrorString, l);
    FXFUSE_SYM(api, h, ncclGetUniqueId, l);
    FXFUSE_SYM(api, h, ncclCommInitRank, l);
    FXFUSE_SYM(api, h, ncclCommDestroy, l);
    FXFUSE_SYM(api, h, ncclCommCount, l);
    FXFUSE_SYM(api, h, ncclCommUserRank, l);
  });
  return api;
}

const CuptiApi& cupti() {
  static CuptiApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = openLib({"libcupti.so.13", "libcupti.so"}, "CUPTI");
    const std::string l = "CUPTI";
    FXFUSE_SYM(api, h, cuptiGetVersion, l);
    FXFUSE_SYM(api, h, cuptiGetResultString, l);
    FXFUSE_SYM(api, h, cuptiGetTimestamp, l);
    FXFUSE_SYM(api, h, cuptiActivityRegisterCallbacks, l);
    FXFUSE_SYM(api, h, cuptiActivityEnable, l);
    FXFUSE_SYM(api, h, cuptiActivityDisable, l);
    FXFUSE_SYM(api, h, cuptiActivityFlushAll, l);
    FXFUSE_SYM(api, h, cuptiActivityGetNextRecord, l);
    FXFUSE_SYM(api, h, cuptiActivityGetNumDroppedRecords, l);
  });
  return api;
}

}  // namespace fxfuse::runtime
