// cuBLASLt algorithm selection by measurement (docs/runtime.md "Matmul algorithms"): a
// matmul step asks cuBLASLt for up to kGemmCandidates heuristic results, times each on the
// step's own operands (CUDA events on the session's stream, L2 flushed before every rep,
// output into a scratch buffer so no tensor of the plan is touched), keeps the fastest, and
// prefers a candidate without a split-K reduction kernel when it is within
// kSplitKPreference of the fastest (one kernel fewer per step). Choices are cached in-process
// by everything that defines the call (shape, dtypes, layouts, epilogue, scales, workspace,
// device). Algorithms differ only in accumulation order and tiling, so results stay within
// the node check's GEMM bound (docs/runtime.md "Parity").
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace fxfuse::runtime {

constexpr int kGemmCandidates = 16;
constexpr double kSplitKPreference = 1.03;  // a split-K-free algorithm within 3% wins
// Timed alone, the runner-up algorithms Session::chooseGemmsInStep may try in the captured step:
// at most this many besides the pick, each within kInStepGemmWindow of the pick's time.
constexpr int kInStepGemmAlternatives = 3;
constexpr double kInStepGemmWindow = 1.25;

// One cuBLASLt matmul call as the step makes it (descriptors owned by the caller).
struct GemmCall {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lx = nullptr, ly = nullptr, lc = nullptr, ld = nullptr;
  const float* alpha = nullptr;
  const float* beta = nullptr;
  const void *x = nullptr, *y = nullptr, *c = nullptr;
  void* d = nullptr;
  size_t d_bytes = 0;  // bytes of D (the size of the scratch output used while timing; C is only read)
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

// One timed cuBLASLt algorithm the step may run.
struct GemmCandidate {
  cublasLtMatmulAlgo_t algo;
  std::string what;  // e.g. "id 66 tile 20 stages 15 split-k 1 (11.8 us alone)"
};

struct GemmChoice {
  cublasLtMatmulAlgo_t algo;
  std::string summary;  // e.g. "tuned 12 of 16: id 66 tile 20 stages 15 split-k 1, 11.8 us (heuristic #0: 14.2 us, split-k 4)"
  // When tuned: the pick first, then its runner-ups (inStepAlternatives), which
  // Session::chooseGemmsInStep may time in the step instead. Empty when nothing was timed.
  std::vector<GemmCandidate> in_step;
};

// The candidates (alone times `us`, negative: did not run) the step may time instead of `pick`:
// the fastest others within kInStepGemmWindow of pick's time, fastest first, at most
// kInStepGemmAlternatives; then cuBLASLt's own first choice `heuristic_first` wherever it ran and
// is not among them, so the step never keeps a tuned pick that runs slower there than the
// untuned plan's algorithm (alone times rank kernels without their neighbours).
std::vector<int> inStepAlternatives(const std::vector<double>& us, int pick, int heuristic_first = -1);

// `key`: the call's identity for the cache. `tune` false (or a capturing stream): cuBLASLt's
// `first` heuristic result, the pre-tuning behaviour. Throws FxError naming `where`.
GemmChoice chooseGemmAlgorithm(const GemmCall& call, const cublasLtMatmulHeuristicResult_t* results, int found,
                               int first, bool tune, cudaStream_t stream, const std::string& key, const std::string& where);

// fxfuse's own kernel for a call that cuBLASLt also serves (the small-M FP8 GEMM), in one or
// more configurations (its K split): times each candidate (writing into the D pointer it is
// given) and cuBLASLt's `choice` on the same operands, all into scratch outputs, L2 flushed;
// keeps the fastest candidate whose output agrees with cuBLASLt's up to accumulation order,
// and uses it when it is faster than cuBLASLt. `d_type`: D's type (bf16, f16, f32). Cached
// in-process by `key`; `tune` false or a capturing stream: cuBLASLt, nothing timed.
using OwnGemmLaunch = std::function<cudaError_t(void* d, cudaStream_t stream)>;
struct OwnGemmCandidate {
  std::string label;  // e.g. "4 K slices"
  OwnGemmLaunch launch;
};
struct OwnGemmChoice {
  bool use = false;
  std::string summary;  // appended to the algorithm's summary, e.g. "; own kernel (4 K slices) 4.1 us vs 11.3 us: own kernel"
  // The own kernel ran and agrees with cuBLASLt under the timed policy: either may run the step,
  // so Session::chooseGemmsInStep may pick by timing the whole step.
  bool eligible = false;
  int candidate = -1;  // the fastest agreeing candidate, -1 when none ran and agreed
};
OwnGemmChoice chooseOwnGemm(const GemmCall& call, const GemmChoice& choice, const std::vector<OwnGemmCandidate>& own,
                            cudaDataType_t d_type, bool tune, cudaStream_t stream, const std::string& key,
                            const std::string& where);

// $FXFUSE_GEMM_TUNE: "0" turns tuning off (default on).
bool gemmTuningFromEnv();
// $FXFUSE_GEMM_IN_STEP: "0" leaves the GEMM choices to the alone timing (default: `fxfuse bench`
// re-times them in the captured step, Session::chooseGemmsInStep).
bool gemmInStepFromEnv();
// Whether each in-step trial times the step as it stands again right before the candidate
// ($FXFUSE_GEMM_IN_STEP_BASELINE=each), instead of against the best time so far (the default):
// for A/B runs of whether the GPU's clocks drift over a long choice.
bool gemmInStepFreshBaselineFromEnv();

// One line describing an algorithm's configuration (id, tile, stages, split-K, reduction).
std::string describeGemmAlgorithm(const cublasLtMatmulAlgo_t& algo);

}  // namespace fxfuse::runtime
