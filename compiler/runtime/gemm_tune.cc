// cuBLASLt algorithm selection by measurement (gemm_tune.h).
#include "compiler/runtime/gemm_tune.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "compiler/runtime/cuda_libs.h"
#include "ir/status.h"
#include "kernels/reference/numerics.h"

namespace fxfuse::runtime {

namespace {

constexpr int kWarmupReps = 2;
constexpr int kTimedReps = 5;               // median of these
constexpr size_t kL2FlushBytes = 64u << 20;  // > the H200's 60 MB L2
constexpr double kOwnGemmRelTol = 1.0 / 32;    // a few bf16 steps
constexpr double kOwnGemmRmsTol = 1.0 / 256;   // cancellation near zero

void checkCuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) fail("{}: {}", what, cudaGetErrorString(e));
}

struct AlgoConfig {
  int32_t id = -1, split_k = 1;
  uint32_t tile = 0, stages = 0, reduction = 0;
};

AlgoConfig configOf(const cublasLtMatmulAlgo_t& algo) {
  const CublasLtApi& lt = cublasLt();
  AlgoConfig c;
  size_t written = 0;
  lt.cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &c.id, sizeof c.id, &written);
  lt.cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &c.tile, sizeof c.tile, &written);
  lt.cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &c.stages, sizeof c.stages, &written);
  lt.cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &c.split_k, sizeof c.split_k, &written);
  lt.cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &c.reduction, sizeof c.reduction,
                                          &written);
  return c;
}

// Split into K parts whose partial results another pass (usually another kernel) adds up.
bool hasSplitKReduction(const AlgoConfig& c) { return c.split_k > 1; }

// The in-process cache of choices (shared by every Session of the process).
std::mutex& cacheMutex() {
  static std::mutex m;
  return m;
}
std::map<std::string, GemmChoice>& cache() {
  static std::map<std::string, GemmChoice> c;
  return c;
}

// Median time (us) of `launch` on `stream` (L2 flushed before every timed rep), or a negative
// value when it fails to run.
double timeLaunch(const std::function<bool()>& launch, void* flush, cudaStream_t stream, cudaEvent_t start,
                  cudaEvent_t stop) {
  for (int r = 0; r < kWarmupReps; ++r)
    if (!launch()) return -1;
  std::vector<double> us;
  for (int r = 0; r < kTimedReps; ++r) {
    if (flush) checkCuda(cudaMemsetAsync(flush, r, kL2FlushBytes, stream), "flushing L2 for GEMM tuning");
    checkCuda(cudaEventRecord(start, stream), "GEMM tuning event");
    if (!launch()) return -1;
    checkCuda(cudaEventRecord(stop, stream), "GEMM tuning event");
    checkCuda(cudaEventSynchronize(stop), "GEMM tuning");
    float ms = 0;
    checkCuda(cudaEventElapsedTime(&ms, start, stop), "GEMM tuning event");
    us.push_back(1000.0 * ms);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// Median time (us) of one cuBLASLt candidate writing into `scratch_d`, or negative when it fails.
double timeCandidate(const GemmCall& call, const cublasLtMatmulAlgo_t& algo, void* scratch_d, void* flush,
                     cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop) {
  const CublasLtApi& lt = cublasLt();
  return timeLaunch(
      [&] {
        return lt.cublasLtMatmul(call.handle, call.desc, call.alpha, call.x, call.lx, call.y, call.ly, call.beta, call.c,
                                 call.lc, scratch_d, call.ld, &algo, call.workspace, call.workspace_bytes,
                                 stream) == CUBLAS_STATUS_SUCCESS;
      },
      flush, stream, start, stop);
}

// The scratch buffers and events of one tuning (freed on every path).
struct TuningScratch {
  std::vector<void*> buffers;
  void* flush = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  TuningScratch(size_t outputs, size_t output_bytes, const std::string& where) {
    try {
      for (size_t i = 0; i < outputs; ++i) {
        buffers.push_back(nullptr);
        checkCuda(cudaMalloc(&buffers.back(), std::max<size_t>(output_bytes, 256)), where + ": GEMM tuning output");
      }
      if (cudaMalloc(&flush, kL2FlushBytes) != cudaSuccess) {  // tuning without the flush rather than failing
        cudaGetLastError();
        flush = nullptr;
      }
      checkCuda(cudaEventCreate(&start), where);
      checkCuda(cudaEventCreate(&stop), where);
    } catch (...) {
      release();
      throw;
    }
  }
  ~TuningScratch() { release(); }
  void release() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    for (void* b : buffers) cudaFree(b);
    if (flush) cudaFree(flush);
    start = stop = nullptr;
    buffers.clear();
    flush = nullptr;
  }
};

// Device output of `bytes` as floats (bf16, f16 or f32 elements).
std::vector<float> downloadAsFloat(const void* d, size_t bytes, cudaDataType_t type, const std::string& where) {
  const size_t elem = type == CUDA_R_32F ? 4 : 2;
  std::vector<uint8_t> raw(bytes);
  checkCuda(cudaMemcpy(raw.data(), d, bytes, cudaMemcpyDeviceToHost), where + ": GEMM output check");
  std::vector<float> v(bytes / elem);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h = 0;
    if (elem == 4) {
      std::memcpy(&v[i], &raw[i * 4], 4);
      continue;
    }
    std::memcpy(&h, &raw[i * 2], 2);
    v[i] = type == CUDA_R_16BF ? kernels::reference::BFloat16BitsToFloat(h) : kernels::reference::HalfBitsToFloat(h);
  }
  return v;
}

// Whether two outputs of the same call agree up to accumulation order: every element within
// kOwnGemmRelTol of the other plus kOwnGemmRmsTol of the output's RMS (a kernel that reads a
// layout or a scale wrongly differs in most elements), NaN where the other has NaN, an
// infinity only where the other has the same one.
bool outputsAgree(const std::vector<float>& a, const std::vector<float>& b, std::string* why) {
  double sq = 0;
  for (float v : b) sq += std::isfinite(v) ? static_cast<double>(v) * v : 0.0;
  const double rms = b.empty() ? 0 : std::sqrt(sq / static_cast<double>(b.size()));
  for (size_t i = 0; i < a.size(); ++i) {
    const bool infinite = std::isinf(a[i]) || std::isinf(b[i]);
    if (std::isnan(a[i]) != std::isnan(b[i]) || (infinite && a[i] != b[i]) ||
        (!infinite && !std::isnan(a[i]) &&
         std::fabs(a[i] - b[i]) > kOwnGemmRelTol * std::fabs(b[i]) + kOwnGemmRmsTol * rms)) {
      *why = fmt::format("element {}: {} vs cuBLASLt {}", i, a[i], b[i]);
      return false;
    }
  }
  return true;
}

}  // namespace

bool gemmTuningFromEnv() {
  const char* v = std::getenv("FXFUSE_GEMM_TUNE");
  return !(v && std::string(v) == "0");
}

bool gemmInStepFromEnv() {
  const char* v = std::getenv("FXFUSE_GEMM_IN_STEP");
  return !(v && std::string(v) == "0");
}

bool gemmInStepFreshBaselineFromEnv() {
  const char* v = std::getenv("FXFUSE_GEMM_IN_STEP_BASELINE");
  return v && std::string(v) == "each";
}

std::string describeGemmAlgorithm(const cublasLtMatmulAlgo_t& algo) {
  AlgoConfig c = configOf(algo);
  return fmt::format("id {} tile {} stages {} split-k {}{}", c.id, c.tile, c.stages, c.split_k,
                     hasSplitKReduction(c) ? fmt::format(" (reduction {})", c.reduction) : "");
}

std::vector<int> inStepAlternatives(const std::vector<double>& us, int pick, int heuristic_first) {
  std::vector<int> others;
  if (pick < 0 || pick >= static_cast<int>(us.size()) || us[static_cast<size_t>(pick)] < 0) return others;
  const double limit = kInStepGemmWindow * us[static_cast<size_t>(pick)];
  for (int i = 0; i < static_cast<int>(us.size()); ++i)
    if (i != pick && us[static_cast<size_t>(i)] >= 0 && us[static_cast<size_t>(i)] <= limit) others.push_back(i);
  std::stable_sort(others.begin(), others.end(),
                   [&](int a, int b) { return us[static_cast<size_t>(a)] < us[static_cast<size_t>(b)]; });
  if (others.size() > static_cast<size_t>(kInStepGemmAlternatives)) others.resize(kInStepGemmAlternatives);
  const bool first_ran = heuristic_first >= 0 && heuristic_first < static_cast<int>(us.size()) &&
                         us[static_cast<size_t>(heuristic_first)] >= 0;
  if (first_ran && heuristic_first != pick && std::find(others.begin(), others.end(), heuristic_first) == others.end())
    others.push_back(heuristic_first);
  return others;
}

GemmChoice chooseGemmAlgorithm(const GemmCall& call, const cublasLtMatmulHeuristicResult_t* results, int found,
                               int first, bool tune, cudaStream_t stream, const std::string& key, const std::string& where) {
  first = std::max(0, std::min(first, found - 1));
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  checkCuda(cudaStreamIsCapturing(stream, &capturing), where);
  if (!tune || found <= 1 || capturing != cudaStreamCaptureStatusNone) {
    const char* why = !tune ? "tuning off" : found <= 1 ? "one candidate" : "stream capturing: not tuned";
    return GemmChoice{results[first].algo,
                      fmt::format("heuristic #{} of {} ({}): {}", first, found, why, describeGemmAlgorithm(results[first].algo)), {}};
  }
  {
    std::lock_guard<std::mutex> lock(cacheMutex());
    auto it = cache().find(key);
    if (it != cache().end()) return it->second;
  }
  std::vector<double> us(static_cast<size_t>(found), -1);
  {
    TuningScratch t(1, call.d_bytes, where);
    for (int i = 0; i < found; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS)
        us[static_cast<size_t>(i)] = timeCandidate(call, results[i].algo, t.buffers[0], t.flush, stream, t.start, t.stop);
    checkCuda(cudaStreamSynchronize(stream), where + ": GEMM tuning");
  }
  // Fastest overall, and fastest without a split-K reduction.
  int best = -1, best_plain = -1;
  std::vector<AlgoConfig> cfg;
  for (int i = 0; i < found; ++i) cfg.push_back(configOf(results[i].algo));
  for (int i = 0; i < found; ++i) {
    const double t = us[static_cast<size_t>(i)];
    if (t < 0) continue;
    if (best < 0 || t < us[static_cast<size_t>(best)]) best = i;
    if (!hasSplitKReduction(cfg[static_cast<size_t>(i)]) && (best_plain < 0 || t < us[static_cast<size_t>(best_plain)]))
      best_plain = i;
  }
  int timed = static_cast<int>(std::count_if(us.begin(), us.end(), [](double t) { return t >= 0; }));
  GemmChoice choice;
  if (best < 0) {  // nothing ran: the heuristic's choice, whose own failure the step reports
    choice = GemmChoice{results[first].algo, fmt::format("heuristic #{} of {} (no candidate ran while tuning): {}", first,
                                                         found, describeGemmAlgorithm(results[first].algo)), {}};
  } else {
    int pick = best;
    if (best_plain >= 0 && us[static_cast<size_t>(best_plain)] <= kSplitKPreference * us[static_cast<size_t>(best)])
      pick = best_plain;
    const double t_first = us[static_cast<size_t>(first)];
    choice.algo = results[pick].algo;
    choice.summary = fmt::format("tuned #{} of {} timed: {}, {:.1f} us (heuristic #{}: {})", pick, timed,
                                 describeGemmAlgorithm(results[pick].algo), us[static_cast<size_t>(pick)], first,
                                 t_first < 0 ? std::string("did not run") : fmt::format("{:.1f} us, split-k {}", t_first,
                                                                                    cfg[static_cast<size_t>(first)].split_k));
    std::vector<int> step = inStepAlternatives(us, pick, first);
    step.insert(step.begin(), pick);
    for (int i : step)
      choice.in_step.push_back({results[i].algo, fmt::format("{} ({:.1f} us alone)", describeGemmAlgorithm(results[i].algo),
                                                             us[static_cast<size_t>(i)])});
  }
  std::lock_guard<std::mutex> lock(cacheMutex());
  cache()[key] = choice;
  return choice;
}

// $FXFUSE_OWN_GEMM: "always" takes fxfuse's kernel wherever it runs and agrees with cuBLASLt,
// "never" keeps cuBLASLt; anything else (the default) times both. For A/B measurements: the
// timing runs each kernel alone, which cannot show what overlapping with its neighbours
// (programmatic dependent launch) is worth. Read once per process.
namespace {
enum class OwnGemmPolicy { kTimed, kAlways, kNever };
OwnGemmPolicy ownGemmPolicy() {
  static const OwnGemmPolicy policy = [] {
    const char* v = std::getenv("FXFUSE_OWN_GEMM");
    const std::string s = v ? v : "";
    return s == "always" ? OwnGemmPolicy::kAlways : s == "never" ? OwnGemmPolicy::kNever : OwnGemmPolicy::kTimed;
  }();
  return policy;
}

// Times and checks every own-kernel candidate against cuBLASLt's output in `reference` (empty
// when cuBLASLt did not run: nothing agrees then). Returns the fastest agreeing candidate, or
// -1; `us` gets each candidate's time (negative: failed to run) and `why` the first mismatch.
int fastestAgreeingCandidate(const GemmCall& call, const std::vector<OwnGemmCandidate>& own,
                             const std::vector<float>& reference, cudaDataType_t d_type, TuningScratch& t,
                             cudaStream_t stream, const std::string& where, std::vector<double>* us,
                             std::string* why) {
  int best = -1;
  for (size_t i = 0; i < own.size(); ++i) {
    us->push_back(timeLaunch([&] { return own[i].launch(t.buffers[1], stream) == cudaSuccess; }, t.flush, stream,
                             t.start, t.stop));
    checkCuda(cudaStreamSynchronize(stream), where + ": timing the own kernel");
    if (us->back() < 0 || reference.empty()) continue;
    std::string mismatch;
    if (!outputsAgree(downloadAsFloat(t.buffers[1], call.d_bytes, d_type, where), reference, &mismatch)) {
      if (why->empty()) *why = own[i].label + ": " + mismatch;
      continue;
    }
    if (best < 0 || us->back() < (*us)[static_cast<size_t>(best)]) best = static_cast<int>(i);
  }
  return best;
}
}  // namespace

OwnGemmChoice chooseOwnGemm(const GemmCall& call, const GemmChoice& choice, const std::vector<OwnGemmCandidate>& own,
                            cudaDataType_t d_type, bool tune, cudaStream_t stream, const std::string& key,
                            const std::string& where) {
  const OwnGemmPolicy policy = ownGemmPolicy();
  if (policy == OwnGemmPolicy::kNever) return OwnGemmChoice{false, "; own kernel off (FXFUSE_OWN_GEMM=never)", false};
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  checkCuda(cudaStreamIsCapturing(stream, &capturing), where);
  if (!tune || capturing != cudaStreamCaptureStatusNone || own.empty())
    return OwnGemmChoice{false, "; own kernel not timed", false};
  static std::mutex own_mutex;
  static std::map<std::string, OwnGemmChoice> own_cache;
  {
    std::lock_guard<std::mutex> lock(own_mutex);
    auto it = own_cache.find(key);
    if (it != own_cache.end()) return it->second;
  }
  OwnGemmChoice c;
  {
    TuningScratch t(2, call.d_bytes, where);
    const double lt_us = timeCandidate(call, choice.algo, t.buffers[0], t.flush, stream, t.start, t.stop);
    checkCuda(cudaStreamSynchronize(stream), where + ": timing cuBLASLt");
    const std::vector<float> reference =
        lt_us >= 0 ? downloadAsFloat(t.buffers[0], call.d_bytes, d_type, where) : std::vector<float>{};
    std::vector<double> us;
    std::string why;
    c.candidate = fastestAgreeingCandidate(call, own, reference, d_type, t, stream, where, &us, &why);
    const bool ran = std::any_of(us.begin(), us.end(), [](double v) { return v >= 0; });
    const bool agree = c.candidate >= 0;
    const double own_us = agree ? us[static_cast<size_t>(c.candidate)] : -1;
    c.use = agree && (own_us < lt_us || policy == OwnGemmPolicy::kAlways);
    c.eligible = agree && policy == OwnGemmPolicy::kTimed;
    std::string others;  // the other candidates' times, when there were several
    for (size_t i = 0; i < own.size() && own.size() > 1; ++i)
      if (static_cast<int>(i) != c.candidate)
        others += fmt::format("{}{} {}", others.empty() ? " (" : ", ", own[i].label,
                              us[i] < 0 ? std::string("failed") : fmt::format("{:.1f} us", us[i]));
    if (!others.empty()) others += ")";
    c.summary = !ran          ? std::string("; own kernel failed to run")
                : lt_us < 0   ? std::string("; own kernel not compared (cuBLASLt did not run)")
                : !agree      ? fmt::format("; own kernel refused: output differs from cuBLASLt's ({})", why)
                              : fmt::format("; own kernel ({}) {:.1f} us{} vs {:.1f} us: {}{}",
                                            own[static_cast<size_t>(c.candidate)].label, own_us, others, lt_us,
                                            c.use ? "own kernel" : "cuBLASLt",
                                            policy == OwnGemmPolicy::kAlways ? " (FXFUSE_OWN_GEMM=always)" : "");
  }
  std::lock_guard<std::mutex> lock(own_mutex);
  own_cache[key] = c;
  return c;
}

}  // namespace fxfuse::runtime
