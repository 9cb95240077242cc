// CUDA libraries the runtime needs beyond the (static) CUDA runtime, opened with dlopen so
// that a binary built here starts everywhere and fails with a clear message only when a
// library is actually needed: cuBLASLt (matmul steps), NVRTC (kernels compiled at plan
// load), NCCL (collective steps), CUPTI (`fxfuse bench --timeline`). Search order:
// FXFUSE_CUDA_LIB_DIR, the loader's default path, /usr/local/cuda/lib64, then the nvidia-*
// Python wheels' lib folders.
#pragma once

#include <cublasLt.h>
#include <cupti.h>
#include <nccl.h>
#include <nvrtc.h>

#include <string>

namespace fxfuse::runtime {

#define FXFUSE_FN(name) decltype(&::name) name = nullptr

struct CublasLtApi {
  FXFUSE_FN(cublasLtCreate);
  FXFUSE_FN(cublasLtDestroy);
  FXFUSE_FN(cublasLtMatmul);
  FXFUSE_FN(cublasLtMatmulDescCreate);
  FXFUSE_FN(cublasLtMatmulDescDestroy);
  FXFUSE_FN(cublasLtMatmulDescSetAttribute);
  FXFUSE_FN(cublasLtMatrixLayoutCreate);
  FXFUSE_FN(cublasLtMatrixLayoutDestroy);
  FXFUSE_FN(cublasLtMatrixLayoutSetAttribute);
  FXFUSE_FN(cublasLtMatmulPreferenceCreate);
  FXFUSE_FN(cublasLtMatmulPreferenceDestroy);
  FXFUSE_FN(cublasLtMatmulPreferenceSetAttribute);
  FXFUSE_FN(cublasLtMatmulAlgoGetHeuristic);
  FXFUSE_FN(cublasLtMatmulAlgoConfigGetAttribute);
  FXFUSE_FN(cublasLtGetStatusString);
};

struct NvrtcApi {
  FXFUSE_FN(nvrtcCreateProgram);
  FXFUSE_FN(nvrtcDestroyProgram);
  FXFUSE_FN(nvrtcCompileProgram);
  FXFUSE_FN(nvrtcGetProgramLogSize);
  FXFUSE_FN(nvrtcGetProgramLog);
  FXFUSE_FN(nvrtcGetCUBINSize);
  FXFUSE_FN(nvrtcGetCUBIN);
  FXFUSE_FN(nvrtcGetErrorString);
  FXFUSE_FN(nvrtcVersion);
};

struct NcclApi {
  FXFUSE_FN(ncclAllReduce);
  FXFUSE_FN(ncclAllGather);
  FXFUSE_FN(ncclGetErrorString);
  FXFUSE_FN(ncclGetUniqueId);
  FXFUSE_FN(ncclCommInitRank);
  FXFUSE_FN(ncclCommDestroy);
  FXFUSE_FN(ncclCommCount);
  FXFUSE_FN(ncclCommUserRank);
};

struct CuptiApi {
  FXFUSE_FN(cuptiGetVersion);
  FXFUSE_FN(cuptiGetResultString);
  FXFUSE_FN(cuptiGetTimestamp);
  FXFUSE_FN(cuptiActivityRegisterCallbacks);
  FXFUSE_FN(cuptiActivityEnable);
  FXFUSE_FN(cuptiActivityDisable);
  FXFUSE_FN(cuptiActivityFlushAll);
  FXFUSE_FN(cuptiActivityGetNextRecord);
  FXFUSE_FN(cuptiActivityGetNumDroppedRecords);
};

#undef FXFUSE_FN

// Each throws FxError naming the library and the folders searched when it cannot be opened.
const CublasLtApi& cublasLt();
const NvrtcApi& nvrtc();
const NcclApi& nccl();
const CuptiApi& cupti();

}  // namespace fxfuse::runtime
