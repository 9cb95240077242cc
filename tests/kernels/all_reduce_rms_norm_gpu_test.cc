// GPU test of the fused all-reduce + residual + RMSNorm (+ FP8) kernels on simulated ranks
// (N workspaces on one GPU, one stream per rank): world size 1, 2, 4, 8; one-shot and two-shot;
// with and without residual, weight, norm_out, quant_out, allreduce_out (also aliased to the
// input), bf16 and fp16, H = 4096, 8192, 2056, T from 1 to the workspace capacity; outputs
// poisoned before each run; many calls in flight without synchronization, and CUDA-graph
// replays (the flag protocol across launches); FP8 saturation.
// Checks: a (allreduce_out) and z (residual) bit-exact against the CPU reference of the
// simulated all-reduce; n and q bit-exact against our unfused GPU chain (RmsNorm or
// RmsNormQuantFp8 with the residual, on the reference's a), and within NormTolerance / one FP8
// step of the CPU reference (which differs only in the fp32 reduction order and rsqrtf).
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "kernels/all_reduce_rms_norm.h"
#include "kernels/allreduce/testing/sim_ranks.h"
#include "kernels/reference/all_reduce_rms_norm_reference.h"
#include "kernels/reference/numerics.h"
#include "kernels/rms_norm.h"
#include "kernels/rms_norm_quant_fp8.h"
#include "tests/kernels/gpu_test_util.h"

namespace fxfuse::kernels {
namespace {

using allreduce::testing::SimulatedRanks;
using testing::DeviceBuffer;

constexpr int64_t kMaxTokens = 1024;

struct Options {
  bool residual = true;
  bool weight = true;
  bool norm_out = true;
  bool quant_out = false;
  bool allreduce_out = false;
  bool alias_input = false;  // allreduce_out (or norm_out, without allreduce_out) is the input
  float scale = 0.01f;       // |n| above 4.48 (a few per mille of the elements) saturates at 448
};

std::string Describe(int ws, AllReduceAlgorithm algo, DType dtype, int64_t t, int64_t h, const Options& o) {
  std::ostringstream s;
  s << "ws=" << ws << " algo=" << AllReduceAlgorithmName(algo) << " dtype=" << DTypeName(dtype) << " T=" << t
    << " H=" << h << " residual=" << o.residual << " weight=" << o.weight << " norm_out=" << o.norm_out
    << " quant_out=" << o.quant_out << " allreduce_out=" << o.allreduce_out << " alias_input=" << o.alias_input;
  return s.str();
}

// One rank's device tensors of one call.
struct RankBuffers {
  std::unique_ptr<DeviceBuffer> input, residual, allreduce_out, norm_out, quant_out;
};

// Host data of one call: every rank's input, the shared initial residual, weight, scale.
struct CallData {
  std::vector<std::vector<uint16_t>> inputs;
  std::vector<uint16_t> residual, weight;
};

CallData RandomCall(int ws, int64_t t, int64_t h, DType dtype, std::mt19937_64& rng) {
  CallData d;
  for (int r = 0; r < ws; ++r) d.inputs.push_back(testing::RandomD16(t * h, dtype, 1.0f, rng));
  d.residual = testing::RandomD16(t * h, dtype, 2.0f, rng);
  d.weight = testing::RandomUniformD16(h, dtype, 0.5f, 1.5f, rng);
  if (t > 1) {
    // A row whose sum is exactly zero on every rank (and zero residual): n = 0.
    for (int r = 0; r < ws; ++r) {
      for (int64_t j = 0; j < h; ++j) d.inputs[r][h + j] = 0;
    }
    for (int64_t j = 0; j < h; ++j) d.residual[h + j] = 0;
  }
  return d;
}

RankBuffers Allocate(const CallData& d, int rank, int64_t t, int64_t h, const Options& o) {
  RankBuffers b;
  b.input = std::make_unique<DeviceBuffer>(t * h * 2);
  b.input->Upload(d.inputs[rank]);
  if (o.residual) {
    b.residual = std::make_unique<DeviceBuffer>(t * h * 2);
    b.residual->Upload(d.residual);
  }
  if (o.allreduce_out && !o.alias_input) {
    b.allreduce_out = std::make_unique<DeviceBuffer>(t * h * 2);
    b.allreduce_out->Poison();
  }
  if (o.norm_out && !(o.alias_input && !o.allreduce_out)) {
    b.norm_out = std::make_unique<DeviceBuffer>(t * h * 2);
    b.norm_out->Poison();
  }
  if (o.quant_out) {
    b.quant_out = std::make_unique<DeviceBuffer>(t * h);
    b.quant_out->Poison();
  }
  return b;
}

AllReduceRmsNormParams DeviceParams(const RankBuffers& b, const DeviceBuffer& weight, const DeviceBuffer& scale,
                                    int64_t t, int64_t h, DType dtype, AllReduceAlgorithm algo, const Options& o) {
  AllReduceRmsNormParams p;
  p.num_tokens = t;
  p.hidden_size = h;
  p.dtype = dtype;
  p.input = b.input->get();
  p.residual = o.residual ? b.residual->get() : nullptr;
  if (o.allreduce_out) p.allreduce_out = o.alias_input ? b.input->get() : b.allreduce_out->get();
  p.weight = o.weight ? weight.get() : nullptr;
  if (o.norm_out) p.norm_out = (o.alias_input && !o.allreduce_out) ? b.input->get() : b.norm_out->get();
  if (o.quant_out) {
    p.quant_out = b.quant_out->get();
    p.scale = static_cast<const float*>(scale.get());
  }
  p.algorithm = algo;
  return p;
}

// Every rank's buffers and params of one call.
struct Ranks {
  std::vector<RankBuffers> bufs;
  std::vector<AllReduceRmsNormParams> params;
};
Ranks AllocateRanks(const CallData& d, int ws, int64_t t, int64_t h, DType dtype, AllReduceAlgorithm algo,
                    const Options& o, const DeviceBuffer& weight, const DeviceBuffer& scale) {
  Ranks k;
  for (int r = 0; r < ws; ++r) {
    k.bufs.push_back(Allocate(d, r, t, h, o));
    k.params.push_back(DeviceParams(k.bufs.back(), weight, scale, t, h, dtype, algo, o));
  }
  return k;
}

// What every rank must hold after the call: the CPU reference (a, z, n, q) and the unfused
// GPU chain on the reference's a (n, q).
struct Expected {
  std::vector<uint16_t> a, z, n_ref, n_chain;
  std::vector<uint8_t> q_ref, q_chain;
};

Expected Expect(const CallData& d, const std::vector<uint16_t>& residual_before, int64_t t, int64_t h, DType dtype,
                const Options& o, const DeviceBuffer& weight_d, const DeviceBuffer& scale_d) {
  Expected e;
  std::vector<const uint16_t*> ins;
  for (const auto& in : d.inputs) ins.push_back(in.data());
  e.a.resize(t * h);
  e.z = residual_before;
  e.n_ref.resize(t * h);
  e.q_ref.resize(t * h);
  AllReduceRmsNormParams cpu;
  cpu.num_tokens = t;
  cpu.hidden_size = h;
  cpu.dtype = dtype;
  cpu.residual = o.residual ? e.z.data() : nullptr;
  cpu.allreduce_out = e.a.data();
  cpu.weight = o.weight ? d.weight.data() : nullptr;
  cpu.norm_out = e.n_ref.data();
  cpu.quant_out = e.q_ref.data();
  cpu.scale = &o.scale;
  REQUIRE(reference::AllReduceRmsNorm(cpu, ins).ok());

  // The unfused GPU chain: RmsNorm (and RmsNormQuantFp8) with the residual on a.
  DeviceBuffer a_d(t * h * 2), r_d(t * h * 2), n_d(t * h * 2), r2_d(t * h * 2), q_d(t * h);
  a_d.Upload(e.a);
  r_d.Upload(residual_before);
  r2_d.Upload(residual_before);
  n_d.Poison();
  q_d.Poison();
  RmsNormParams norm;
  norm.num_tokens = t;
  norm.hidden_size = h;
  norm.dtype = dtype;
  norm.weight_dtype = dtype;
  norm.input = a_d.get();
  norm.weight = o.weight ? weight_d.get() : nullptr;
  norm.output = n_d.get();
  norm.residual = o.residual ? r_d.get() : nullptr;
  norm.epsilon = 1e-6f;
  FXFUSE_LAUNCH_REQUIRE(RmsNorm(norm, nullptr));
  e.n_chain = n_d.Download<uint16_t>(t * h);
  RmsNormQuantFp8Params quant;
  quant.num_tokens = t;
  quant.hidden_size = h;
  quant.dtype = dtype;
  quant.weight_dtype = dtype;
  quant.input = a_d.get();
  quant.weight = norm.weight;
  quant.residual = o.residual ? r2_d.get() : nullptr;
  quant.epsilon = 1e-6f;
  quant.output = q_d.get();
  quant.scale.scale = static_cast<float*>(scale_d.get());
  FXFUSE_LAUNCH_REQUIRE(RmsNormQuantFp8(quant, nullptr));
  e.q_chain = q_d.Download<uint8_t>(t * h);
  return e;
}

// FP8 outputs equal to ±448 seen by CheckRank (the tests must exercise saturation).
int64_t g_saturated = 0;

void CheckRank(const RankBuffers& b, const Expected& e, const CallData& d, int rank, int64_t t, int64_t h,
               DType dtype, const Options& o) {
  INFO("rank " << rank);
  const auto exact = testing::Exact();
  if (o.residual) testing::ExpectD16Close("residual (z)", dtype, b.residual->Download<uint16_t>(t * h), e.z, t, h, h, exact);
  if (o.allreduce_out) {
    const DeviceBuffer& out = o.alias_input ? *b.input : *b.allreduce_out;
    testing::ExpectD16Close("allreduce_out (a)", dtype, out.Download<uint16_t>(t * h), e.a, t, h, h, exact);
  } else if (!(o.norm_out && o.alias_input)) {
    testing::ExpectD16Close("input untouched", dtype, b.input->Download<uint16_t>(t * h), d.inputs[rank], t, h, h, exact);
  }
  if (o.norm_out) {
    const DeviceBuffer& out = (o.alias_input && !o.allreduce_out) ? *b.input : *b.norm_out;
    const std::vector<uint16_t> n = out.Download<uint16_t>(t * h);
    testing::ExpectD16Close("norm_out == unfused chain", dtype, n, e.n_chain, t, h, h, exact);
    testing::ExpectD16Close("norm_out vs reference", dtype, n, e.n_ref, t, h, h, testing::NormTolerance());
  }
  if (o.quant_out) {
    const std::vector<uint8_t> q = b.quant_out->Download<uint8_t>(t * h);
    for (uint8_t v : q) g_saturated += (v & 0x7F) == 0x7E;  // ±448
    testing::ExpectFp8Close("quant_out == unfused chain", q, e.q_chain, t, h, h, exact);
    testing::ExpectFp8Close("quant_out vs reference", q, e.q_ref, t, h, h, testing::Tolerance{1, 0.02});
  }
}

// One call on every simulated rank (or world size 1 directly), checked on every rank.
void RunAndCheck(SimulatedRanks& sim, AllReduceAlgorithm algo, DType dtype, int64_t t, int64_t h, const Options& o) {
  const int ws = sim.world_size();
  const uint64_t seed = testing::NextSeed();
  INFO("seed " << seed << " " << Describe(ws, algo, dtype, t, h, o));
  std::mt19937_64 rng(seed);
  const CallData d = RandomCall(ws, t, h, dtype, rng);
  DeviceBuffer weight_d(h * 2), scale_d(4);
  weight_d.Upload(d.weight);
  scale_d.Upload(std::vector<float>{o.scale});
  const Ranks ranks = AllocateRanks(d, ws, t, h, dtype, algo, o, weight_d, scale_d);
  const std::vector<RankBuffers>& bufs = ranks.bufs;
  const std::vector<AllReduceRmsNormParams>& params = ranks.params;
  {
    AllReduceRmsNormParams resolved = params[0];
    resolved.workspace = sim.workspace(0);
    REQUIRE(resolved.Check().ok());
    const AllReduceAlgorithm want = ws == 1 ? AllReduceAlgorithm::kOneShot : algo;
    REQUIRE(ResolveAllReduceAlgorithm(resolved) == want);
  }
  FXFUSE_LAUNCH_REQUIRE(sim.Launch(params));
  FXFUSE_LAUNCH_REQUIRE(sim.Synchronize());
  const Expected e = Expect(d, d.residual, t, h, dtype, o, weight_d, scale_d);
  for (int r = 0; r < ws; ++r) CheckRank(bufs[r], e, d, r, t, h, dtype, o);
}

// Output combinations, cycled through the shapes.
std::vector<Options> OptionSets() {
  std::vector<Options> sets;
  Options o;
  sets.push_back(o);  // residual + weight + norm_out
  o.quant_out = true;
  o.norm_out = false;
  sets.push_back(o);  // residual + quant_out (vLLM's fused-add + quant)
  o = Options();
  o.residual = false;
  o.allreduce_out = true;
  o.alias_input = true;
  sets.push_back(o);  // no residual: a -> input (aliased), n -> norm_out
  o = Options();
  o.residual = false;
  o.allreduce_out = true;
  o.alias_input = true;
  o.norm_out = false;
  o.quant_out = true;
  sets.push_back(o);  // no residual + quant: a -> input, q -> quant_out
  o = Options();
  o.weight = false;
  o.norm_out = true;
  o.alias_input = true;
  o.quant_out = true;
  o.allreduce_out = false;
  sets.push_back(o);  // residual, no weight, n -> input (aliased) and q
  o = Options();
  o.allreduce_out = true;
  o.quant_out = true;
  sets.push_back(o);  // everything, separate buffers
  return sets;
}

std::vector<int64_t> TokenCounts(int64_t capacity) {
  std::vector<int64_t> ts = {1, 2, 7, 33, 130};
  ts.push_back(capacity);
  return ts;
}

int64_t OneShotCapacity(const SimulatedRanks& sim, int64_t h) {
  if (sim.world_size() == 1) return kMaxTokens;
  // Largest T whose one-shot call fits the workspace (layout: kernels/allreduce/workspace_layout.h).
  AllReduceRmsNormParams p;
  p.hidden_size = h;
  p.workspace = sim.workspace(0);
  p.algorithm = AllReduceAlgorithm::kOneShot;
  int64_t t = kMaxTokens;
  for (; t > 1; --t) {
    p.num_tokens = t;
    if (ResolveAllReduceAlgorithm(p) == AllReduceAlgorithm::kOneShot) break;
  }
  return t;
}

TEST_CASE("fused all-reduce + rms_norm matches the reference on simulated ranks") {
  const std::vector<Options> sets = OptionSets();
  size_t next = 0;
  for (int ws : {1, 2, 4, 8}) {
    for (int64_t h : {4096, 8192, 2056}) {
      std::unique_ptr<SimulatedRanks> sim;
      REQUIRE(SimulatedRanks::Create(ws, kMaxTokens, h, &sim).ok());
      const std::vector<AllReduceAlgorithm> algos =
          ws == 1 ? std::vector<AllReduceAlgorithm>{AllReduceAlgorithm::kOneShot}
                  : std::vector<AllReduceAlgorithm>{AllReduceAlgorithm::kOneShot, AllReduceAlgorithm::kTwoShot};
      for (AllReduceAlgorithm algo : algos) {
        const int64_t capacity = algo == AllReduceAlgorithm::kOneShot ? OneShotCapacity(*sim, h) : kMaxTokens;
        for (DType dtype : {DType::BF16, DType::F16}) {
          for (int64_t t : TokenCounts(capacity)) {
            RunAndCheck(*sim, algo, dtype, t, h, sets[next++ % sets.size()]);
          }
        }
      }
    }
  }
  CHECK(g_saturated > 0);
}

// Many calls of different sizes in flight at once (no host synchronization between them): the
// ranks drift apart by up to one call, slots alternate, every slot element is restored to the
// sentinel by its reader. Each call has its own buffers; all are checked at the end.
TEST_CASE("fused all-reduce: consecutive calls without synchronization") {
  for (int ws : {2, 8}) {
    for (AllReduceAlgorithm algo : {AllReduceAlgorithm::kOneShot, AllReduceAlgorithm::kTwoShot}) {
      const int64_t h = 4096;
      std::unique_ptr<SimulatedRanks> sim;
      REQUIRE(SimulatedRanks::Create(ws, kMaxTokens, h, &sim).ok());
      const DType dtype = DType::BF16;
      const int64_t sizes[] = {64, 3, 200, 1, 17, 128, 5, 90, 2, 31, 256, 8};
      const std::vector<Options> sets = OptionSets();
      struct Call {
        int64_t t;
        Options o;
        CallData d;
        std::unique_ptr<DeviceBuffer> weight, scale;
        Ranks ranks;
      };
      std::vector<Call> calls;
      const uint64_t seed = testing::NextSeed();
      INFO("seed " << seed << " ws=" << ws << " algo=" << AllReduceAlgorithmName(algo));
      std::mt19937_64 rng(seed);
      for (size_t k = 0; k < std::size(sizes); ++k) {
        Call c;
        c.t = sizes[k];
        c.o = sets[k % sets.size()];
        c.d = RandomCall(ws, c.t, h, dtype, rng);
        c.weight = std::make_unique<DeviceBuffer>(h * 2);
        c.weight->Upload(c.d.weight);
        c.scale = std::make_unique<DeviceBuffer>(4);
        c.scale->Upload(std::vector<float>{c.o.scale});
        c.ranks = AllocateRanks(c.d, ws, c.t, h, dtype, algo, c.o, *c.weight, *c.scale);
        calls.push_back(std::move(c));
      }
      for (const Call& c : calls) {
        const Status s = sim->Launch(c.ranks.params);
        INFO(s.ToString());
        REQUIRE(s.ok());
      }
      FXFUSE_LAUNCH_REQUIRE(sim->Synchronize());
      for (const Call& c : calls) {
        INFO("T=" << c.t);
        const Expected e = Expect(c.d, c.d.residual, c.t, h, dtype, c.o, *c.weight, *c.scale);
        for (int r = 0; r < ws; ++r) CheckRank(c.ranks.bufs[r], e, c.d, r, c.t, h, dtype, c.o);
      }
    }
  }
}

// CUDA graphs: each rank captures its call once; the graphs are replayed many times without
// synchronization. The residual stream accumulates (z_k = round16(a + z_{k-1})), so the final
// residual and n are checked against the reference iterated as often.
TEST_CASE("fused all-reduce: CUDA graph replays") {
  for (int ws : {2, 4}) {
    for (AllReduceAlgorithm algo : {AllReduceAlgorithm::kOneShot, AllReduceAlgorithm::kTwoShot}) {
      const int64_t h = 8192, t = 48;
      const DType dtype = DType::F16;
      const int replays = 25;
      std::unique_ptr<SimulatedRanks> sim;
      REQUIRE(SimulatedRanks::Create(ws, kMaxTokens, h, &sim).ok());
      const uint64_t seed = testing::NextSeed();
      INFO("seed " << seed << " ws=" << ws << " algo=" << AllReduceAlgorithmName(algo));
      std::mt19937_64 rng(seed);
      CallData d = RandomCall(ws, t, h, dtype, rng);
      for (auto& in : d.inputs) {
        for (auto& v : in) v = reference::FloatToD16Bits(reference::D16BitsToFloat(v, dtype) * 0.01f, dtype);
      }
      Options o;
      o.quant_out = true;
      DeviceBuffer weight_d(h * 2), scale_d(4);
      weight_d.Upload(d.weight);
      scale_d.Upload(std::vector<float>{o.scale});
      const Ranks ranks = AllocateRanks(d, ws, t, h, dtype, algo, o, weight_d, scale_d);
      const std::vector<RankBuffers>& bufs = ranks.bufs;
      const std::vector<AllReduceRmsNormParams>& params = ranks.params;
      std::vector<cudaGraphExec_t> graphs;
      const Status captured = sim->Capture(params, &graphs);
      INFO(captured.ToString());
      REQUIRE(captured.ok());
      for (int k = 0; k < replays; ++k) REQUIRE(sim->LaunchGraphs(graphs).ok());
      FXFUSE_LAUNCH_REQUIRE(sim->Synchronize());
      for (cudaGraphExec_t g : graphs) cudaGraphExecDestroy(g);
      // The reference: the same call `replays` times on the evolving residual.
      std::vector<uint16_t> residual = d.residual;
      Expected e;
      for (int k = 0; k < replays; ++k) {
        e = Expect(d, residual, t, h, dtype, o, weight_d, scale_d);
        residual = e.z;
      }
      for (int r = 0; r < ws; ++r) CheckRank(bufs[r], e, d, r, t, h, dtype, o);
    }
  }
}

// A call that does not fit the workspace resolves to the NCCL fallback and is rejected.
TEST_CASE("fused all-reduce: calls beyond the capacity are refused") {
  std::unique_ptr<SimulatedRanks> sim;
  REQUIRE(SimulatedRanks::Create(2, 64, 4096, &sim).ok());
  DeviceBuffer in(65 * 4096 * 2), out(65 * 4096 * 2);
  AllReduceRmsNormParams p;
  p.num_tokens = 65;
  p.hidden_size = 4096;
  p.input = in.get();
  p.norm_out = out.get();
  p.workspace = sim->workspace(0);
  p.algorithm = AllReduceAlgorithm::kTwoShot;
  CHECK(ResolveAllReduceAlgorithm(p) == AllReduceAlgorithm::kNcclFallback);
  const Status s = AllReduceRmsNorm(p, sim->stream(0));
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(s.message().find("nccl_fallback") != std::string::npos);
}

}  // namespace
}  // namespace fxfuse::kernels
