// Benchmark of fxfuse's norm / quant / activation kernels: CUDA-event timing (warm-up, median
// of many runs), inputs rotated over enough buffer sets that they do not sit in L2, random
// data, effective bandwidth (bytes that must move / time) as a fraction of the device-to-device
// copy bandwidth measured in the same run, and an empty-kernel launch for the T = 1 floor.
// Writes JSON (see docs/kernels.md, "Benchmark").
//
//   bench_kernels [--out FILE] [--quick] [--tokens 1,16,...] [--hidden 4096,...]
//                 [--kernels a,b,...] [--reps N] [--sweep] [--profile]
#include <cuda_runtime_api.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/bench/bench_device.h"
#include "kernels/internal/launch_config.h"
#include "kernels/kernels.h"

namespace fxfuse::kernels::bench {
namespace {

using nlohmann::json;

#define BENCH_CHECK_CUDA(expr)                                                                 \
  do {                                                                                         \
    const cudaError_t e_ = (expr);                                                             \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

#define BENCH_CHECK(expr)                                                                        \
  do {                                                                                           \
    const ::fxfuse::kernels::Status s_ = (expr);                                                 \
    if (!s_.ok()) {                                                                              \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, s_.ToString().c_str()); \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)

struct Options {
  std::string out;
  std::vector<int64_t> tokens = {1, 16, 256, 2048, 8192, 32768};
  std::vector<int64_t> hidden = {4096, 5120, 8192};
  std::vector<std::string> kernels;  // empty: all
  int reps = 100;
  int warmup = 10;
  bool sweep = false;    // also time every vecs_per_thread (tuning of the launch heuristic)
  bool table = true;     // the main table (--no-table: sweep only)
  bool profile = false;  // few runs, no copy/empty measurements (for ncu)
};

std::vector<int64_t> ParseInts(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoll(item));
  return out;
}

std::vector<std::string> ParseStrings(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

// Rounds up to 256 bytes so every buffer of a set is 16-byte aligned.
int64_t Aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// One benchmarked op: its buffers (per rotation set) and its launch.
struct KernelSpec {
  std::string name;
  bool fused;      // a fused kernel (goal: >= 90% of copy bandwidth at T*H >= 2^24)
  std::string subgraph;  // what the native PyTorch form computes (for the baseline table)
};

const std::vector<KernelSpec>& AllKernels() {
  static const std::vector<KernelSpec> kernels = {
      {"rms_norm", false, "RMSNorm"},
      {"fused_add_rms_norm", true, "residual add + RMSNorm"},
      {"quant_fp8_static", false, "static FP8 quant"},
      {"quant_fp8_per_token", false, "dynamic per-token FP8 quant"},
      {"quant_fp8_per_tensor", false, "dynamic per-tensor FP8 quant"},
      {"quant_fp8_group128", false, "per-group (128) FP8 quant"},
      {"rms_norm_quant_fp8_static", true, "RMSNorm + static FP8"},
      {"fused_add_rms_norm_quant_fp8_static", true, "residual add + RMSNorm + static FP8"},
      {"rms_norm_quant_fp8_per_token", true, "RMSNorm + per-token FP8"},
      {"fused_add_rms_norm_quant_fp8_per_token", true, "residual add + RMSNorm + per-token FP8"},
      {"rms_norm_quant_fp8_group128", true, "RMSNorm + per-group (128) FP8"},
      {"fused_add_rms_norm_quant_fp8_group128", true, "residual add + RMSNorm + per-group (128) FP8"},
      {"silu_and_mul", false, "SiLU-and-mul"},
      {"silu_and_mul_quant_fp8_static", true, "SiLU-and-mul + static FP8"},
  };
  return kernels;
}

bool Has(const std::string& name, const char* part) { return name.find(part) != std::string::npos; }

// Bytes that must move for one call (each input read once, each output written once).
int64_t BytesToMove(const std::string& k, int64_t t, int64_t h) {
  const int64_t e = t * h;
  if (k == "silu_and_mul") return 4 * e + 2 * e;
  if (k == "silu_and_mul_quant_fp8_static") return 4 * e + e;
  if (k == "rms_norm") return 2 * e + 2 * e + 2 * h;
  if (k == "fused_add_rms_norm") return 8 * e + 2 * h;
  int64_t bytes = 2 * e + e;  // read D16, write FP8
  if (Has(k, "rms_norm")) bytes += 2 * h;
  if (Has(k, "fused_add")) bytes += 4 * e;  // read and write the residual
  if (Has(k, "per_token")) bytes += 4 * t;
  if (Has(k, "per_tensor") || Has(k, "static")) bytes += 4;
  if (Has(k, "group128")) bytes += 4 * (e / 128);
  return bytes;
}

// Device memory of one rotation set of kernel `k`, carved out of one slab.
struct SetLayout {
  int64_t in = 0, residual = 0, weight = 0, out = 0, scale = 0, total = 0;
};

SetLayout LayoutFor(const std::string& k, int64_t t, int64_t h) {
  SetLayout l;
  int64_t offset = 0;
  const auto take = [&offset](int64_t bytes) {
    const int64_t at = offset;
    offset += Aligned(bytes);
    return at;
  };
  const bool silu = Has(k, "silu");
  l.in = take(silu ? 4 * t * h : 2 * t * h);
  l.residual = take(Has(k, "fused_add") ? 2 * t * h : 0);
  l.weight = take(Has(k, "rms_norm") ? 2 * h : 0);
  const bool d16_out = k == "rms_norm" || k == "fused_add_rms_norm" || k == "silu_and_mul";
  l.out = take(d16_out ? 2 * t * h : t * h);
  l.scale = take(4 * std::max<int64_t>(t * (h / 128), std::max<int64_t>(t, 1)));
  l.total = offset;
  return l;
}

// Launches kernel `k` on the buffers of one set.
Status Launch(const std::string& k, int64_t t, int64_t h, char* set, const SetLayout& l, const LaunchTuning& tuning,
              cudaStream_t stream) {
  void* in = set + l.in;
  void* residual = set + l.residual;
  void* weight = set + l.weight;
  void* out = set + l.out;
  float* scale = reinterpret_cast<float*>(set + l.scale);
  const DType dt = DType::BF16;
  if (k == "silu_and_mul" || k == "silu_and_mul_quant_fp8_static") {
    SiluAndMulParams p;
    p.num_tokens = t;
    p.hidden_size = h;
    p.dtype = dt;
    p.input = in;
    p.output = out;
    p.output_dtype = k == "silu_and_mul" ? dt : DType::F8E4M3FN;
    p.scale = scale;
    p.tuning = tuning;
    return SiluAndMul(p, stream);
  }
  if (k == "rms_norm" || k == "fused_add_rms_norm") {
    RmsNormParams p;
    p.num_tokens = t;
    p.hidden_size = h;
    p.dtype = p.weight_dtype = dt;
    p.input = in;
    p.weight = weight;
    p.output = out;
    p.residual = k == "fused_add_rms_norm" ? residual : nullptr;
    p.tuning = tuning;
    return RmsNorm(p, stream);
  }
  Fp8ScaleSpec spec;
  spec.scale = scale;
  if (Has(k, "static")) spec.kind = Fp8ScaleKind::kStaticPerTensor;
  if (Has(k, "per_token")) spec.kind = Fp8ScaleKind::kDynamicPerToken;
  if (Has(k, "per_tensor")) spec.kind = Fp8ScaleKind::kDynamicPerTensor;
  if (Has(k, "group128")) {
    spec.kind = Fp8ScaleKind::kDynamicPerGroup;
    spec.group_size = 128;
    if (Has(k, "fused_add")) {  // column-major scales (DeepGEMM layout) on the residual variant
      spec.token_stride = 1;
      spec.group_stride = t;
    }
  }
  if (Has(k, "rms_norm")) {
    RmsNormQuantFp8Params p;
    p.num_tokens = t;
    p.hidden_size = h;
    p.dtype = p.weight_dtype = dt;
    p.input = in;
    p.weight = weight;
    p.residual = Has(k, "fused_add") ? residual : nullptr;
    p.output = out;
    p.scale = spec;
    p.tuning = tuning;
    return RmsNormQuantFp8(p, stream);
  }
  QuantFp8Params p;
  p.num_tokens = t;
  p.hidden_size = h;
  p.dtype = dt;
  p.input = in;
  p.output = out;
  p.scale = spec;
  p.tuning = tuning;
  return QuantFp8(p, stream);
}

struct Timing {
  double median_us = 0, min_us = 0, p90_us = 0;
};

Timing Summarize(std::vector<float> ms) {
  std::sort(ms.begin(), ms.end());
  Timing t;
  t.median_us = 1000.0 * ms[ms.size() / 2];
  t.min_us = 1000.0 * ms.front();
  t.p90_us = 1000.0 * ms[ms.size() * 9 / 10];
  return t;
}

// Times `launch(rep)` `reps` times after `warmup` untimed calls. Calls are enqueued in batches
// behind a spin kernel, so each event pair brackets GPU execution only (not host enqueue time).
Timing TimeLaunches(const std::function<Status(int)>& launch, int warmup, int reps, cudaStream_t stream) {
  warmup = std::max(warmup, 2);
  for (int i = 0; i < warmup; ++i) BENCH_CHECK(launch(i));
  BENCH_CHECK_CUDA(cudaStreamSynchronize(stream));
  constexpr int kBatch = 25;
  std::vector<cudaEvent_t> start(kBatch), stop(kBatch);
  for (int i = 0; i < kBatch; ++i) {
    BENCH_CHECK_CUDA(cudaEventCreate(&start[i]));
    BENCH_CHECK_CUDA(cudaEventCreate(&stop[i]));
  }
  std::vector<float> ms;
  for (int done = 0; done < reps;) {
    const int n = std::min(kBatch, reps - done);
    // ~0.5 ms at 1.98 GHz, then two untimed calls: the host enqueues the batch while the GPU
    // spins, and the timed calls start at the clocks of a busy GPU.
    BENCH_CHECK(LaunchSpinKernel(1000000, stream));
    BENCH_CHECK(launch(warmup + done - 2));  // the sets just before the batch's first one
    BENCH_CHECK(launch(warmup + done - 1));
    for (int i = 0; i < n; ++i) {
      BENCH_CHECK_CUDA(cudaEventRecord(start[i], stream));
      BENCH_CHECK(launch(warmup + done + i));
      BENCH_CHECK_CUDA(cudaEventRecord(stop[i], stream));
    }
    BENCH_CHECK_CUDA(cudaStreamSynchronize(stream));
    for (int i = 0; i < n; ++i) {
      float elapsed = 0;
      BENCH_CHECK_CUDA(cudaEventElapsedTime(&elapsed, start[i], stop[i]));
      ms.push_back(elapsed);
    }
    done += n;
  }
  for (int i = 0; i < kBatch; ++i) {
    cudaEventDestroy(start[i]);
    cudaEventDestroy(stop[i]);
  }
  return Summarize(ms);
}

// Device-to-device copy bandwidth (bytes read + written per second), 1 GiB buffers.
double MeasureCopyBandwidth(cudaStream_t stream, int reps) {
  const int64_t bytes = int64_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  BENCH_CHECK_CUDA(cudaMalloc(&a, bytes));
  BENCH_CHECK_CUDA(cudaMalloc(&b, bytes));
  BENCH_CHECK_CUDA(cudaMemset(a, 1, bytes));
  const Timing t = TimeLaunches(
      [&](int i) {
        const cudaError_t e = (i % 2 == 0) ? cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream)
                                           : cudaMemcpyAsync(a, b, bytes, cudaMemcpyDeviceToDevice, stream);
        return e == cudaSuccess ? Status::Ok() : Status::CudaError(cudaGetErrorString(e));
      },
      3, reps, stream);
  BENCH_CHECK_CUDA(cudaFree(a));
  BENCH_CHECK_CUDA(cudaFree(b));
  return 2.0 * bytes / (t.median_us * 1e-6) / 1e9;
}

struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  int64_t l2_bytes = 0;
};

json RunCase(const std::string& k, int64_t t, int64_t h, const LaunchTuning& tuning, const DeviceInfo& dev,
             const Options& opt, double copy_gbps, cudaStream_t stream) {
  const SetLayout l = LayoutFor(k, t, h);
  // Enough sets that the rotation's footprint is >= 3x L2 (at most 4096 sets).
  const int64_t sets = std::clamp<int64_t>((3 * dev.l2_bytes + l.total - 1) / l.total, 2, 4096);
  char* slab = nullptr;
  BENCH_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&slab), sets * l.total));
  for (int64_t s = 0; s < sets; ++s) {
    char* set = slab + s * l.total;
    const bool silu = Has(k, "silu");
    BENCH_CHECK(FillRandomD16(set + l.in, (silu ? 2 : 1) * t * h, DType::BF16, 2.0f, 0, 0, 1000 + s, stream));
    if (Has(k, "fused_add")) {
      BENCH_CHECK(FillRandomD16(set + l.residual, t * h, DType::BF16, 2.0f, 0, 0, 2000 + s, stream));
    }
    if (Has(k, "rms_norm")) {
      BENCH_CHECK(FillRandomD16(set + l.weight, h, DType::BF16, 0, 0.5f, 1.5f, 3000 + s, stream));
    }
    BENCH_CHECK(FillFloat(reinterpret_cast<float*>(set + l.scale), 1, 0.02f, stream));
  }
  BENCH_CHECK_CUDA(cudaStreamSynchronize(stream));
  const Timing timing = TimeLaunches(
      [&](int i) { return Launch(k, t, h, slab + (i % sets) * l.total, l, tuning, stream); }, opt.warmup, opt.reps,
      stream);
  BENCH_CHECK_CUDA(cudaFree(slab));

  internal::RowLaunchConfig config;
  const bool vectorizable = true;
  internal::RowWork work = internal::RowWork::kDefault;
  if (Has(k, "silu")) work = internal::RowWork::kSiluAndMul;
  if (k == "quant_fp8_per_token") work = internal::RowWork::kQuantPerToken;
  if (Has(k, "rms_norm") && !Has(k, "fused_add")) work = internal::RowWork::kNormNoResidual;
  BENCH_CHECK(internal::ChooseRowLaunchConfig(t, h, vectorizable, dev.sm_count, tuning, &config, work));
  const int64_t bytes = BytesToMove(k, t, h);
  const double gbps = bytes / (timing.median_us * 1e-6) / 1e9;
  json j;
  j["kernel"] = k;
  j["tokens"] = t;
  j["hidden"] = h;
  j["dtype"] = "bfloat16";
  j["bytes"] = bytes;
  j["median_us"] = timing.median_us;
  j["min_us"] = timing.min_us;
  j["p90_us"] = timing.p90_us;
  j["gbps"] = gbps;
  j["fraction_of_copy"] = copy_gbps > 0 ? gbps / copy_gbps : 0.0;
  j["rotation_sets"] = sets;
  j["threads"] = config.threads;
  j["vecs_per_thread"] = config.vectorized ? config.vecs_per_thread : 0;
  j["pipeline_stages"] = config.vectorized ? config.pipeline_stages : 0;
  return j;
}

int Main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value after %s\n", a.c_str());
        std::exit(1);
      }
      return argv[++i];
    };
    if (a == "--out") {
      opt.out = next();
    } else if (a == "--tokens") {
      opt.tokens = ParseInts(next());
    } else if (a == "--hidden") {
      opt.hidden = ParseInts(next());
    } else if (a == "--kernels") {
      opt.kernels = ParseStrings(next());
    } else if (a == "--reps") {
      opt.reps = std::stoi(next());
    } else if (a == "--warmup") {
      opt.warmup = std::stoi(next());
    } else if (a == "--quick") {
      opt.tokens = {1, 2048, 32768};
      opt.hidden = {4096, 8192};
      opt.reps = 30;
    } else if (a == "--sweep") {
      opt.sweep = true;
    } else if (a == "--no-table") {
      opt.table = false;
    } else if (a == "--profile") {
      opt.profile = true;
      opt.reps = 3;
      opt.warmup = 1;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 1;
    }
  }

  cudaDeviceProp prop;
  int device = 0;
  BENCH_CHECK_CUDA(cudaGetDevice(&device));
  BENCH_CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  DeviceInfo dev;
  dev.name = prop.name;
  dev.sm_count = prop.multiProcessorCount;
  dev.l2_bytes = prop.l2CacheSize;
  cudaStream_t stream;
  BENCH_CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  json result;
  result["device"] = {{"name", dev.name},
                      {"sm_count", dev.sm_count},
                      {"l2_bytes", dev.l2_bytes},
                      {"compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor)}};
  std::string cmd;
  for (int i = 0; i < argc; ++i) cmd += (i ? " " : "") + std::string(argv[i]);
  result["command"] = cmd;
  result["method"] =
      "CUDA events around each call; calls enqueued in batches of 25 behind a ~0.5 ms spin kernel and 2 "
      "untimed calls; "
      "warm-up calls first; median of the timed calls; inputs rotated over >= 3x L2 of buffer sets; "
      "random normal(0, 2) bf16 data, weights uniform [0.5, 1.5); bandwidth = bytes that must move / median.";

  double copy_gbps = 0;
  if (!opt.profile) {
    copy_gbps = MeasureCopyBandwidth(stream, 30);
    const Timing empty = TimeLaunches([&](int) { return LaunchEmptyKernel(stream); }, 10, 200, stream);
    result["copy_gbps"] = copy_gbps;
    result["empty_kernel_us"] = empty.median_us;
    std::printf("device %s, %d SMs, L2 %lld MB; copy %.0f GB/s; empty kernel %.2f us\n", dev.name.c_str(),
                dev.sm_count, static_cast<long long>(dev.l2_bytes >> 20), copy_gbps, empty.median_us);
  }

  std::vector<KernelSpec> selected;
  for (const KernelSpec& k : AllKernels()) {
    if (opt.kernels.empty() || std::find(opt.kernels.begin(), opt.kernels.end(), k.name) != opt.kernels.end()) {
      selected.push_back(k);
    }
  }
  json cases = json::array();
  std::printf("%-40s %7s %6s %10s %9s %7s\n", "kernel", "T", "H", "median_us", "GB/s", "copy%");
  if (!opt.table) selected.clear();
  for (const KernelSpec& k : selected) {
    for (int64_t h : opt.hidden) {
      for (int64_t t : opt.tokens) {
        json j = RunCase(k.name, t, h, LaunchTuning(), dev, opt, copy_gbps, stream);
        j["fused"] = k.fused;
        j["subgraph"] = k.subgraph;
        std::printf("%-40s %7lld %6lld %10.2f %9.0f %6.1f%%\n", k.name.c_str(), static_cast<long long>(t),
                    static_cast<long long>(h), j["median_us"].get<double>(), j["gbps"].get<double>(),
                    100 * j["fraction_of_copy"].get<double>());
        std::fflush(stdout);
        cases.push_back(j);
      }
    }
  }
  result["cases"] = cases;

  if (opt.sweep) {
    json sweep = json::array();
    std::vector<std::string> sweep_kernels;
    for (const KernelSpec& k : AllKernels()) {
      if (k.name != "quant_fp8_per_tensor" && k.name != "silu_and_mul") sweep_kernels.push_back(k.name);
    }
    if (!opt.kernels.empty()) sweep_kernels = opt.kernels;
    for (const std::string& k : sweep_kernels) {
      for (int64_t h : opt.hidden) {
        for (int64_t t : opt.tokens) {
          std::printf("sweep %s T=%lld H=%lld:", k.c_str(), static_cast<long long>(t), static_cast<long long>(h));
          for (int stages : {0, 3}) {
            for (int vecs : {1, 2, 4, 8}) {
              LaunchTuning tuning;
              tuning.vecs_per_thread = vecs;
              tuning.row_pipeline_stages = stages;
              json j = RunCase(k, t, h, tuning, dev, opt, copy_gbps, stream);
              std::printf(" s%dv%d %.1f%%", stages, j["vecs_per_thread"].get<int>(),
                          100 * j["fraction_of_copy"].get<double>());
              sweep.push_back(j);
            }
          }
          std::printf("\n");
          std::fflush(stdout);
        }
      }
    }
    result["sweep"] = sweep;
  }

  if (!opt.out.empty()) {
    std::ofstream f(opt.out);
    f << result.dump(1) << "\n";
    if (!f) {
      std::fprintf(stderr, "could not write %s\n", opt.out.c_str());
      return 2;
    }
  }
  return 0;
}

}  // namespace
}  // namespace fxfuse::kernels::bench

int main(int argc, char** argv) { return fxfuse::kernels::bench::Main(argc, argv); }
