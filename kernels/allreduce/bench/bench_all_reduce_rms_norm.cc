// Benchmark of the fused all-reduce + residual + RMSNorm (+ FP8) kernels against NCCL
// all-reduce followed by our single-GPU fused add + RMSNorm (+ quant) kernel, under CUDA graphs.
//
//   --world-size N   N GPUs of this process (one thread per GPU, peer access, NCCL through
//                    ncclCommInitAll, loaded with dlopen): the real measurement;
//                    N = 1 runs on one GPU (the fused op is add + norm + quant; NCCL is a copy).
//   --sim-ranks N    N simulated ranks on ONE GPU (kernels/allreduce/testing/sim_ranks.h): the
//                    ranks share the GPU's SMs and memory, so this measures the kernels and the
//                    flag protocol, not NVLink; no NCCL baseline (NCCL refuses two ranks on one
//                    GPU), the single-GPU norm kernel alone is reported instead.
//
// Each method is captured into one CUDA graph per rank holding `--calls` back-to-back calls that
// rotate over buffer sets (inputs of small calls stay out of L2 across the graph); the graph is
// replayed `--reps` times after warm-up, all ranks at once (released together by a start gate,
// start_gate.h), each replay timed with CUDA events on every rank; the time of a call is the slowest rank's replay time / calls, median over the
// replays. Random data. Output: JSON rows and a markdown table.
//
//   bench_all_reduce_rms_norm (--world-size N | --sim-ranks N) [--tokens 1,8,...]
//       [--hidden 4096,8192] [--dtype bf16|fp16] [--reps 30] [--calls 16] [--out FILE.json]
//       [--markdown FILE.md]
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/all_reduce_rms_norm.h"
#include "kernels/allreduce/bench/start_gate.h"
#include "kernels/allreduce/testing/sim_ranks.h"
#include "kernels/rms_norm.h"
#include "kernels/rms_norm_quant_fp8.h"

namespace fxfuse::kernels::allreduce::bench {
namespace {

using nlohmann::json;

[[noreturn]] void Fail(const std::string& message) {
  std::fprintf(stderr, "bench_all_reduce_rms_norm: %s\n", message.c_str());
  std::exit(2);
}
void CheckCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Fail(std::string(what) + ": " + cudaGetErrorString(e));
}
void CheckStatus(const Status& s, const char* what) {
  if (!s.ok()) Fail(std::string(what) + ": " + s.ToString());
}

// NCCL, opened at run time (FXFUSE_NCCL_LIB, else the loader's path) so that the binary starts
// without it.
struct Nccl {
  decltype(&::ncclCommInitAll) CommInitAll = nullptr;
  decltype(&::ncclCommDestroy) CommDestroy = nullptr;
  decltype(&::ncclAllReduce) AllReduce = nullptr;
  decltype(&::ncclGetErrorString) GetErrorString = nullptr;

  static const Nccl& Get() {
    static const Nccl nccl = [] {
      Nccl n;
      std::vector<std::string> names;
      if (const char* env = std::getenv("FXFUSE_NCCL_LIB")) names.push_back(env);
      names.push_back("libnccl.so.2");
      names.push_back("/usr/local/cuda/lib64/libnccl.so.2");
      void* handle = nullptr;
      for (const std::string& name : names) {
        handle = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
        if (handle != nullptr) break;
      }
      if (handle == nullptr) Fail("cannot open NCCL (set FXFUSE_NCCL_LIB to libnccl.so.2's path)");
      n.CommInitAll = reinterpret_cast<decltype(n.CommInitAll)>(dlsym(handle, "ncclCommInitAll"));
      n.CommDestroy = reinterpret_cast<decltype(n.CommDestroy)>(dlsym(handle, "ncclCommDestroy"));
      n.AllReduce = reinterpret_cast<decltype(n.AllReduce)>(dlsym(handle, "ncclAllReduce"));
      n.GetErrorString = reinterpret_cast<decltype(n.GetErrorString)>(dlsym(handle, "ncclGetErrorString"));
      if (!n.CommInitAll || !n.CommDestroy || !n.AllReduce || !n.GetErrorString) Fail("NCCL symbols missing");
      return n;
    }();
    return nccl;
  }
  void Check(ncclResult_t r, const char* what) const {
    if (r != ncclSuccess) Fail(std::string(what) + ": " + GetErrorString(r));
  }
};

struct Options {
  int world_size = 0;  // real GPUs
  int sim_ranks = 0;   // simulated ranks on one GPU
  std::vector<int64_t> tokens = {1, 8, 32, 128, 512, 2048, 8192};
  std::vector<int64_t> hidden = {4096, 8192};
  DType dtype = DType::BF16;
  int reps = 30;
  int calls = 16;
  std::string out, markdown;
};

std::vector<int64_t> ParseList(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::stoll(item));
  return v;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) Fail("missing value after " + a);
      return argv[++i];
    };
    if (a == "--world-size") {
      o.world_size = std::stoi(value());
    } else if (a == "--sim-ranks") {
      o.sim_ranks = std::stoi(value());
    } else if (a == "--tokens") {
      o.tokens = ParseList(value());
    } else if (a == "--hidden") {
      o.hidden = ParseList(value());
    } else if (a == "--dtype") {
      const std::string d = value();
      if (d != "bf16" && d != "fp16") Fail("--dtype must be bf16 or fp16");
      o.dtype = d == "bf16" ? DType::BF16 : DType::F16;
    } else if (a == "--reps") {
      o.reps = std::stoi(value());
    } else if (a == "--calls") {
      o.calls = std::stoi(value());
    } else if (a == "--out") {
      o.out = value();
    } else if (a == "--markdown") {
      o.markdown = value();
    } else {
      Fail("unknown option " + a);
    }
  }
  if ((o.world_size > 0) == (o.sim_ranks > 0)) Fail("give exactly one of --world-size N and --sim-ranks N");
  const int n = std::max(o.world_size, o.sim_ranks);
  if (n > kMaxAllReduceRanks) Fail("at most 8 ranks");
  if (o.reps < 3 || o.calls < 1) Fail("--reps >= 3 and --calls >= 1");
  return o;
}

// Runs fn(rank) for every rank: on one thread per GPU (real ranks), or one after the other on
// the calling thread (simulated ranks: every call is asynchronous).
class Ranks {
 public:
  explicit Ranks(const Options& o) : sim_(o.sim_ranks > 0), n_(std::max(o.world_size, o.sim_ranks)) {}
  int size() const { return n_; }
  bool simulated() const { return sim_; }
  int device(int rank) const { return sim_ ? 0 : rank; }
  void Run(const std::function<void(int)>& fn) const {
    if (sim_) {
      CheckCuda(cudaSetDevice(0), "cudaSetDevice");
      for (int r = 0; r < n_; ++r) fn(r);
      return;
    }
    std::vector<std::thread> threads;
    for (int r = 0; r < n_; ++r) {
      threads.emplace_back([&, r] {
        CheckCuda(cudaSetDevice(r), "cudaSetDevice");
        fn(r);
      });
    }
    for (auto& t : threads) t.join();
  }

 private:
  bool sim_;
  int n_;
};

// One rank's tensors for `sets` calls.
struct RankData {
  std::vector<void*> input, residual, norm_out, quant_out, reduced;
  void* weight = nullptr;
  float* scale = nullptr;
  std::vector<void*> all;
  ~RankData() {
    for (void* p : all) cudaFree(p);
  }
  void* Alloc(size_t bytes) {
    void* p = nullptr;
    CheckCuda(cudaMalloc(&p, bytes), "cudaMalloc");
    all.push_back(p);
    return p;
  }
};

std::vector<uint16_t> RandomD16(size_t n, uint64_t seed, DType dtype) {
  std::vector<uint16_t> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& x : v) {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    const float u = static_cast<float>((s * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f * 2.0f - 1.0f;
    uint32_t bits;
    std::memcpy(&bits, &u, 4);
    if (dtype == DType::BF16) {
      x = static_cast<uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
    } else {
      // |u| < 1: normal or subnormal half; truncating rounding is fine for benchmark data.
      const int exp = static_cast<int>((bits >> 23) & 0xFF) - 127 + 15;
      const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
      x = exp <= 0 ? sign : static_cast<uint16_t>(sign | (exp << 10) | ((bits >> 13) & 0x3FF));
    }
  }
  return v;
}

enum class Method { kOneShot, kTwoShot, kNcclUnfused, kNormOnly };
const char* MethodName(Method m) {
  switch (m) {
    case Method::kOneShot:
      return "fused_one_shot";
    case Method::kTwoShot:
      return "fused_two_shot";
    case Method::kNcclUnfused:
      return "nccl_allreduce+fused_add_norm";
    case Method::kNormOnly:
      return "fused_add_norm_only";
  }
  return "?";
}

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o), ranks_(o) {
    int devices = 0;
    CheckCuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    if (!ranks_.simulated() && devices < o.world_size) {
      Fail("--world-size " + std::to_string(o.world_size) + " needs that many GPUs, found " + std::to_string(devices));
    }
    max_tokens_ = *std::max_element(o.tokens.begin(), o.tokens.end());
    max_hidden_ = *std::max_element(o.hidden.begin(), o.hidden.end());
    const int n = ranks_.size();
    if (ranks_.simulated()) {
      CheckCuda(cudaSetDevice(0), "cudaSetDevice");
      CheckStatus(testing::SimulatedRanks::Create(n, max_tokens_, max_hidden_, &sim_), "simulated ranks");
      for (int r = 0; r < n; ++r) {
        workspaces_.push_back(sim_->workspace(r));
        streams_.push_back(sim_->stream(r));
      }
    } else {
      workspaces_.resize(n);
      streams_.resize(n);
      std::vector<void*> bases(n);
      const int64_t bytes = AllReduceWorkspaceBytes(n, max_tokens_, max_hidden_);
      ranks_.Run([&](int r) {
        for (int p = 0; p < n; ++p) {
          if (p == r) continue;
          int can = 0;
          CheckCuda(cudaDeviceCanAccessPeer(&can, r, p), "cudaDeviceCanAccessPeer");
          if (!can) Fail("GPU " + std::to_string(r) + " cannot access GPU " + std::to_string(p) + " (peer access)");
          const cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
          if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CheckCuda(e, "cudaDeviceEnablePeerAccess");
          cudaGetLastError();
        }
        CheckCuda(cudaMalloc(&bases[r], bytes), "cudaMalloc workspace");
        CheckCuda(cudaStreamCreateWithFlags(&streams_[r], cudaStreamNonBlocking), "cudaStreamCreate");
      });
      for (int r = 0; r < n; ++r) {
        AllReduceWorkspace& w = workspaces_[r];
        w.world_size = n;
        w.rank = r;
        for (int p = 0; p < n; ++p) w.peers[p] = bases[p];
        w.bytes = bytes;
        w.max_tokens = max_tokens_;
        w.hidden_size = max_hidden_;
      }
      ranks_.Run([&](int r) {
        CheckStatus(InitAllReduceWorkspace(workspaces_[r], streams_[r]), "InitAllReduceWorkspace");
        CheckCuda(cudaStreamSynchronize(streams_[r]), "sync");
      });
      owned_workspaces_ = bases;
      const Nccl& nccl = Nccl::Get();
      comms_.resize(n);
      std::vector<int> devs(n);
      for (int r = 0; r < n; ++r) devs[r] = r;
      nccl.Check(nccl.CommInitAll(comms_.data(), n, devs.data()), "ncclCommInitAll");
      // One eager all-reduce per rank before any capture: NCCL connects its peers lazily at the
      // first collective, which must not happen inside a CUDA-graph capture.
      ranks_.Run([&](int r) {
        void* buf = nullptr;
        CheckCuda(cudaMalloc(&buf, 4096), "cudaMalloc");
        CheckCuda(cudaMemsetAsync(buf, 0, 4096, streams_[r]), "memset");
        nccl.Check(nccl.AllReduce(buf, buf, 2048, ncclBfloat16, ncclSum, comms_[r], streams_[r]), "ncclAllReduce (warm-up)");
        CheckCuda(cudaStreamSynchronize(streams_[r]), "sync");
        CheckCuda(cudaFree(buf), "cudaFree");
      });
    }
  }
  ~Bench() {
    if (!comms_.empty()) {
      for (ncclComm_t c : comms_) Nccl::Get().CommDestroy(c);
    }
    for (size_t r = 0; r < owned_workspaces_.size(); ++r) {
      cudaSetDevice(static_cast<int>(r));
      cudaFree(owned_workspaces_[r]);
      cudaStreamDestroy(streams_[r]);
    }
  }

  json Run() {
    json rows = json::array();
    for (int64_t h : o_.hidden) {
      for (int64_t t : o_.tokens) {
        for (bool quant : {false, true}) {
          for (json& row : Measure(t, h, quant)) {
            rows.push_back(row);
            std::printf("%s\n", row.dump().c_str());
            std::fflush(stdout);
          }
        }
      }
    }
    return rows;
  }

 private:
  // Allocates `sets` buffer sets per rank for T x H.
  std::vector<std::unique_ptr<RankData>> Allocate(int64_t t, int64_t h, int sets) {
    std::vector<std::unique_ptr<RankData>> data(ranks_.size());
    const std::vector<uint16_t> host = RandomD16(static_cast<size_t>(t * h) + 4099, t * 131 + h, o_.dtype);
    const std::vector<uint16_t> weight = RandomD16(static_cast<size_t>(h), 7, o_.dtype);
    const size_t bytes = static_cast<size_t>(t * h) * 2;
    ranks_.Run([&](int r) {
      auto d = std::make_unique<RankData>();
      for (int s = 0; s < sets; ++s) {
        d->input.push_back(d->Alloc(bytes));
        d->residual.push_back(d->Alloc(bytes));
        d->norm_out.push_back(d->Alloc(bytes));
        d->quant_out.push_back(d->Alloc(bytes / 2));
        d->reduced.push_back(d->Alloc(bytes));
        // Different data per rank and set: a different offset into the random pattern.
        CheckCuda(cudaMemcpy(d->input.back(), host.data() + (r * 7 + s) % 4099, bytes, cudaMemcpyHostToDevice), "upload");
        CheckCuda(cudaMemcpy(d->residual.back(), host.data() + (r * 7 + s + 1000) % 4099, bytes, cudaMemcpyHostToDevice),
                  "upload");
      }
      d->weight = d->Alloc(h * 2);
      CheckCuda(cudaMemcpy(d->weight, weight.data(), h * 2, cudaMemcpyHostToDevice), "upload");
      d->scale = static_cast<float*>(d->Alloc(4));
      const float scale = 0.05f;
      CheckCuda(cudaMemcpy(d->scale, &scale, 4, cudaMemcpyHostToDevice), "upload");
      data[r] = std::move(d);
    });
    return data;
  }

  AllReduceRmsNormParams FusedParams(const RankData& d, int set, int rank, int64_t t, int64_t h, bool quant,
                                     AllReduceAlgorithm algo, int max_ctas) const {
    AllReduceRmsNormParams p;
    p.num_tokens = t;
    p.hidden_size = h;
    p.dtype = o_.dtype;
    p.input = d.input[set];
    p.residual = d.residual[set];
    p.weight = d.weight;
    if (quant) {
      p.quant_out = d.quant_out[set];
      p.scale = d.scale;
    } else {
      p.norm_out = d.norm_out[set];
    }
    p.workspace = workspaces_[rank];
    p.algorithm = algo;
    p.max_ctas = max_ctas;
    return p;
  }

  // Enqueues one call of `method` on rank r's stream.
  void Enqueue(Method m, const RankData& d, int set, int r, int64_t t, int64_t h, bool quant, int max_ctas) const {
    cudaStream_t stream = streams_[r];
    if (m == Method::kOneShot || m == Method::kTwoShot) {
      const auto algo = m == Method::kOneShot ? AllReduceAlgorithm::kOneShot : AllReduceAlgorithm::kTwoShot;
      CheckStatus(AllReduceRmsNorm(FusedParams(d, set, r, t, h, quant, algo, max_ctas), stream), "AllReduceRmsNorm");
      return;
    }
    const void* norm_input = d.input[set];
    if (m == Method::kNcclUnfused) {
      const Nccl& nccl = Nccl::Get();
      nccl.Check(nccl.AllReduce(d.input[set], d.reduced[set], static_cast<size_t>(t * h),
                                o_.dtype == DType::BF16 ? ncclBfloat16 : ncclFloat16, ncclSum, comms_[r], stream),
                 "ncclAllReduce");
      norm_input = d.reduced[set];
    }
    if (quant) {
      RmsNormQuantFp8Params q;
      q.num_tokens = t;
      q.hidden_size = h;
      q.dtype = q.weight_dtype = o_.dtype;
      q.input = norm_input;
      q.weight = d.weight;
      q.residual = d.residual[set];
      q.output = d.quant_out[set];
      q.scale.scale = d.scale;
      CheckStatus(RmsNormQuantFp8(q, stream), "RmsNormQuantFp8");
    } else {
      RmsNormParams n;
      n.num_tokens = t;
      n.hidden_size = h;
      n.dtype = n.weight_dtype = o_.dtype;
      n.input = norm_input;
      n.weight = d.weight;
      n.residual = d.residual[set];
      n.output = d.norm_out[set];
      CheckStatus(RmsNorm(n, stream), "RmsNorm");
    }
  }

  // Median (over replays) of the slowest rank's time per call, in microseconds.
  double Time(Method m, const std::vector<std::unique_ptr<RankData>>& data, int sets, int64_t t, int64_t h, bool quant,
              int max_ctas, int active_ranks) {
    const int n = active_ranks;
    std::vector<cudaGraphExec_t> graphs(n, nullptr);
    std::vector<cudaEvent_t> start(n), stop(n);
    std::vector<std::vector<float>> times(n);
    const auto on_ranks = [&](const std::function<void(int)>& fn) {
      ranks_.Run([&](int r) {
        if (r < n) fn(r);
      });
    };
    on_ranks([&](int r) {
      cudaGraph_t graph = nullptr;
      CheckCuda(cudaStreamBeginCapture(streams_[r], cudaStreamCaptureModeThreadLocal), "begin capture");
      for (int c = 0; c < o_.calls; ++c) Enqueue(m, *data[r], c % sets, r, t, h, quant, max_ctas);
      CheckCuda(cudaStreamEndCapture(streams_[r], &graph), "end capture");
      CheckCuda(cudaGraphInstantiate(&graphs[r], graph, 0), "instantiate");
      cudaGraphDestroy(graph);
      CheckCuda(cudaEventCreate(&start[r]), "event");
      CheckCuda(cudaEventCreate(&stop[r]), "event");
    });
    for (int warm = 0; warm < 3; ++warm) {
      on_ranks([&](int r) { CheckCuda(cudaGraphLaunch(graphs[r], streams_[r]), "graph launch"); });
      on_ranks([&](int r) { CheckCuda(cudaStreamSynchronize(streams_[r]), "sync"); });
    }
    for (int rep = 0; rep < o_.reps; ++rep) {
      // Every rank waits at the gate; the host opens it once all have enqueued their replay.
      const unsigned gate_value = ++gate_value_;
      on_ranks([&](int r) {
        CheckCuda(gate_.Wait(streams_[r], gate_value), "start gate");
        CheckCuda(cudaEventRecord(start[r], streams_[r]), "record");
        CheckCuda(cudaGraphLaunch(graphs[r], streams_[r]), "graph launch");
        CheckCuda(cudaEventRecord(stop[r], streams_[r]), "record");
      });
      gate_.Open(gate_value);
      on_ranks([&](int r) {
        CheckCuda(cudaEventSynchronize(stop[r]), "sync");
        float ms = 0;
        CheckCuda(cudaEventElapsedTime(&ms, start[r], stop[r]), "elapsed");
        times[r].push_back(ms);
      });
    }
    on_ranks([&](int r) {
      cudaGraphExecDestroy(graphs[r]);
      cudaEventDestroy(start[r]);
      cudaEventDestroy(stop[r]);
    });
    std::vector<double> per_rep(o_.reps, 0.0);
    for (int rep = 0; rep < o_.reps; ++rep) {
      for (int r = 0; r < n; ++r) per_rep[rep] = std::max<double>(per_rep[rep], times[r][rep]);
    }
    std::sort(per_rep.begin(), per_rep.end());
    return per_rep[per_rep.size() / 2] * 1000.0 / o_.calls;
  }

  std::vector<json> Measure(int64_t t, int64_t h, bool quant) {
    const int n = ranks_.size();
    const double bytes_per_tensor = static_cast<double>(t * h) * 2;
    const int sets = static_cast<int>(std::clamp<double>(std::ceil(96e6 / (bytes_per_tensor * 4)), 1, o_.calls));
    const auto data = Allocate(t, h, sets);
    std::vector<json> rows;
    int max_ctas = 0;
    AllReduceRmsNormParams probe = FusedParams(*data[0], 0, 0, t, h, quant, AllReduceAlgorithm::kAuto, 0);
    const AllReduceAlgorithm chosen = ResolveAllReduceAlgorithm(probe);
    const auto row = [&](Method m, double us) {
      json j;
      j["mode"] = ranks_.simulated() ? "simulated" : "gpus";
      j["world_size"] = n;
      j["dtype"] = DTypeName(o_.dtype);
      j["tokens"] = t;
      j["hidden"] = h;
      j["variant"] = quant ? "residual+norm+fp8" : "residual+norm";
      j["method"] = MethodName(m);
      j["us"] = us;
      j["auto"] = AllReduceAlgorithmName(chosen);
      j["message_bytes"] = t * h * 2;
      rows.push_back(j);
    };
    for (Method m : {Method::kOneShot, Method::kTwoShot}) {
      AllReduceRmsNormParams p = probe;
      p.algorithm = m == Method::kOneShot ? AllReduceAlgorithm::kOneShot : AllReduceAlgorithm::kTwoShot;
      if (ResolveAllReduceAlgorithm(p) != p.algorithm) continue;  // does not fit the workspace
      if (sim_ != nullptr) CheckStatus(sim_->MaxCtasPerRank(p, &max_ctas), "co-residency bound");
      row(m, Time(m, data, sets, t, h, quant, max_ctas, n));
    }
    if (!ranks_.simulated()) row(Method::kNcclUnfused, Time(Method::kNcclUnfused, data, sets, t, h, quant, 0, n));
    row(Method::kNormOnly, Time(Method::kNormOnly, data, sets, t, h, quant, 0, 1));
    return rows;
  }

  const Options& o_;
  Ranks ranks_;
  int64_t max_tokens_ = 0, max_hidden_ = 0;
  std::unique_ptr<testing::SimulatedRanks> sim_;
  std::vector<AllReduceWorkspace> workspaces_;
  std::vector<cudaStream_t> streams_;
  std::vector<void*> owned_workspaces_;
  std::vector<ncclComm_t> comms_;
  StartGate gate_;
  unsigned gate_value_ = 0;
};

// One line per (T, H, variant): every method's time and the fused speed-up over the best
// unfused option measured here.
std::string Markdown(const json& rows, const Options& o) {
  std::ostringstream md;
  const bool sim = o.sim_ranks > 0;
  md << "| mode | ranks | T | H | variant | one-shot µs | two-shot µs | table picks | "
     << (sim ? "norm kernel alone µs" : "NCCL + fused add-norm µs") << " | fused (table) speed-up |\n";
  md << "|---|---|---|---|---|---|---|---|---|---|\n";
  std::vector<std::string> keys;
  for (const json& r : rows) {
    const std::string key = std::to_string(r["hidden"].get<int64_t>()) + "/" + std::to_string(r["tokens"].get<int64_t>()) +
                            "/" + r["variant"].get<std::string>();
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  char buf[64];
  const auto fmt = [&](double v) {
    if (v <= 0) return std::string("n/a");
    std::snprintf(buf, sizeof(buf), "%.2f", v);
    return std::string(buf);
  };
  for (const std::string& key : keys) {
    double one = 0, two = 0, base = 0;
    std::string picks;
    json first;
    for (const json& r : rows) {
      const std::string k = std::to_string(r["hidden"].get<int64_t>()) + "/" + std::to_string(r["tokens"].get<int64_t>()) +
                            "/" + r["variant"].get<std::string>();
      if (k != key) continue;
      first = r;
      picks = r["auto"].get<std::string>();
      const std::string m = r["method"];
      const double us = r["us"];
      if (m == "fused_one_shot") one = us;
      if (m == "fused_two_shot") two = us;
      if (m == (sim ? "fused_add_norm_only" : "nccl_allreduce+fused_add_norm")) base = us;
    }
    const double fused = picks == "one_shot" ? one : picks == "two_shot" ? two : base;
    md << "| " << (sim ? "simulated" : "GPUs") << " | " << first["world_size"] << " | " << first["tokens"] << " | "
       << first["hidden"] << " | " << first["variant"].get<std::string>() << " | " << fmt(one) << " | " << fmt(two)
       << " | " << picks << " | " << fmt(base) << " | "
       << (sim || fused <= 0 || base <= 0 ? std::string("—") : fmt(base / fused) + "x") << " |\n";
  }
  return md.str();
}

}  // namespace
}  // namespace fxfuse::kernels::allreduce::bench

int main(int argc, char** argv) {
  using namespace fxfuse::kernels::allreduce::bench;
  const Options o = Parse(argc, argv);
  json rows;
  {
    Bench bench(o);
    rows = bench.Run();
  }
  const std::string md = Markdown(rows, o);
  std::printf("%s", md.c_str());
  if (!o.out.empty()) std::ofstream(o.out) << rows.dump(1) << "\n";
  if (!o.markdown.empty()) std::ofstream(o.markdown) << md;
  return 0;
}
