// The node-by-node proof at world size > 1 (tools/cli/node_check_collective.h) without a
// GPU:
//   * the all-reduce check on host data: the fp32 sum in rank order rounded once passes, a
//     result one step off passes, a wrong one (a rank missing, a rank counted twice, the
//     single-rank simulation) fails; at 3 ranks, NCCL's per-hop rounding passes through the
//     allowance, a missing rank still fails;
//   * the whole proof with two simulated ranks (one thread each, gathers through memory): the
//     stand-in "GPU" of each rank is the lockstep interpreter of the compiled graph; unchanged,
//     both ranks prove every node, collectives included; with rank 1's fused all-reduce
//     output wrong, rank 1 is not proven and its report names that node, while rank 0, whose
//     own nodes are right, still proves. Without the other ranks' inputs (the single-rank
//     simulation) the correct run would NOT be proven, so the gathered inputs are what the
//     check stands on.
#include <catch2/catch.hpp>

#include <cmath>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "tools/cli/node_check.h"
#include "tools/cli/node_check_collective.h"
#include "tools/interpreter/interpreter.h"
#include "tools/interpreter/lockstep.h"
#include "tools/interpreter/numerics.h"
#include "compiler/lowering/lowering.h"
#include "passes/pipeline/pipeline.h"
#include "ir/dtype.h"
#include "ir/io.h"

using namespace fxfuse;

namespace {

interp::Tensor bf16(std::vector<double> v) {
  std::vector<double> r;
  for (double x : v) r.push_back(interp::roundTo(x, ir::DType::BF16));
  return interp::Tensor::fromValues({static_cast<int64_t>(r.size())}, ir::DType::BF16, r);
}

// Random-ish bf16 values of mixed signs and magnitudes.
interp::Tensor noise(int seed, int n) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(std::sin(seed * 131.0 + i * 1.7) * std::ldexp(1.0, (i * 7 + seed) % 9 - 4));
  return bf16(v);
}

// The all-gather of one tag among simulated ranks (threads), in memory.
class MemoryExchange {
 public:
  explicit MemoryExchange(int n) : n_(n) {}
  std::vector<std::string> allGather(int rank, const std::string& tag, const std::string& mine) {
    std::unique_lock<std::mutex> lock(mu_);
    auto& slot = blobs_[tag];
    slot.resize(static_cast<size_t>(n_));
    slot[static_cast<size_t>(rank)] = mine;
    if (++arrived_[tag] == n_) cv_.notify_all();
    cv_.wait(lock, [&] { return arrived_[tag] == n_; });
    return slot;
  }

 private:
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<std::string>> blobs_;
  std::map<std::string, int> arrived_;
};

struct RankOutcome {
  cli::NodeProof proof;
  bool outputs_match = true;
};

// Both ranks' proofs of `graph` at world size 2; `wrong_rank`'s first node whose target
// contains `target` has every 7th element of output 0 changed by 50% + 1 (none: -1).
std::vector<RankOutcome> proveTwoRanks(const std::string& graph, int wrong_rank, const std::string& target,
                                       bool share_inputs = true) {
  const int world = 2;
  compiler::CompileOptions co;
  co.world_size = world;
  interp::Options io;
  io.seed = 3;
  io.world_size = world;
  // The reference of the original graph, every rank.
  auto lockstep = [&](ir::Module& m, const std::function<void(int, const ir::Node&, size_t, interp::RValue&)>& hook) {
    auto group = std::make_shared<interp::RankGroup>(world, 60);
    std::vector<std::unique_ptr<interp::Interpreter>> owned;
    std::vector<interp::Interpreter*> ranks;
    std::vector<std::vector<interp::RValue>> inputs;
    for (int r = 0; r < world; ++r) {
      interp::Options o = io;
      o.collective = group;
      o.rank = r;
      if (hook) o.after_output = [hook, r](const ir::Node& n, size_t k, interp::RValue& v) { hook(r, n, k, v); };
      owned.push_back(std::make_unique<interp::Interpreter>(m, o));
      ranks.push_back(owned.back().get());
      inputs.push_back(owned.back()->makeInputs(io.seed));
    }
    return std::make_pair(interp::runLockstep(ranks, inputs), inputs);
  };
  auto original = ir::loadModule(graph);
  auto ref_and_inputs = lockstep(*original, nullptr);  // (no structured binding: lambdas capture these)
  const std::vector<std::vector<interp::RValue>>& ref = ref_and_inputs.first;
  const std::vector<std::vector<interp::RValue>>& inputs = ref_and_inputs.second;

  // The stand-in GPU: the compiled graph, every node exposed, in lockstep (a changed node's
  // later nodes, and the other rank's collectives, see the changed value).
  auto compiled = ir::loadModule(graph);
  compiler::compileModule(*compiled, co);
  const size_t n_user = compiled->entry().outputs().size();
  cli::exposeEveryNode(*compiled);
  bool changed = false;
  auto gpu = lockstep(*compiled, [&](int r, const ir::Node& n, size_t k, interp::RValue& v) {
    if (r != wrong_rank || k != 0 || changed || !v.isTensor() || n.target.find(target) == std::string::npos) return;
    changed = true;
    std::vector<double> x = v.t.values();
    for (size_t i = 0; i < x.size(); i += 7) x[i] = x[i] * 1.5 + 1.0;
    v = interp::RValue::ofTensor(interp::Tensor::fromValues(v.t.shape, v.t.dtype, x));
  }).first;
  if (wrong_rank >= 0) REQUIRE(changed);

  MemoryExchange exchange(world);
  std::vector<RankOutcome> out(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      const auto& mine = gpu[static_cast<size_t>(r)];
      std::vector<std::optional<interp::Tensor>> all;
      for (const auto& v : mine) all.push_back(v.isTensor() ? std::optional<interp::Tensor>(v.t) : std::nullopt);
      std::vector<std::optional<interp::Tensor>> checked(all.begin(), all.begin() + static_cast<long>(n_user));
      interp::CompareOptions tol;
      for (size_t i = 0; i < n_user; ++i)
        if (checked[i] && ref[static_cast<size_t>(r)][i].isTensor())
          out[static_cast<size_t>(r)].outputs_match &= cli::compareWithinOneStep(ref[static_cast<size_t>(r)][i].t, *checked[i]).differing == 0;
      cli::RankLink link;
      link.rank = r;
      link.world_size = world;
      link.all_gather = [&exchange, r](const std::string& tag, const std::string& blob) { return exchange.allGather(r, tag, blob); };
      link.reference = [&, r](ir::Module& m) { return lockstep(m, nullptr).first.at(static_cast<size_t>(r)); };
      interp::Options rank_io = io;
      rank_io.rank = r;
      cli::PlanRunner runner = [all](const plan::v1::Plan& plan) {
        REQUIRE(static_cast<int>(all.size()) == plan.outputs_size());
        return all;
      };
      out[static_cast<size_t>(r)].proof = cli::proveByNodes(graph, co, rank_io, inputs[static_cast<size_t>(r)], ref[static_cast<size_t>(r)],
                                                            checked, runner, tol, share_inputs ? &link : nullptr);
    });
  for (auto& t : threads) t.join();
  return out;
}

const char* kFp8 = "tests/data/vllm/vllm_allreduce_fp8_custom.post_grad.fxg.json";
const char* kBf16 = "tests/data/vllm/vllm_allreduce_custom.post_grad.fxg.json";

}  // namespace

TEST_CASE("checkAllReduce: the fp32 sum in rank order rounded once, within one step") {
  std::vector<interp::Tensor> parts = {noise(1, 64), noise(2, 64)};
  interp::Tensor sum = interp::sumRanksF32(parts);
  CHECK(cli::checkAllReduce(parts, sum).differing == 0);
  // One rounding step off in some elements: passes.
  std::vector<double> v = sum.values();
  for (size_t i = 0; i < v.size(); i += 5) v[i] += cli::roundingStep(v[i], ir::DType::BF16);
  auto one_step = cli::checkAllReduce(parts, interp::Tensor::fromValues(sum.shape, sum.dtype, v));
  CHECK(one_step.differing > 0);
  CHECK(one_step.beyond == 0);
  // Wrong results: rank 1 missing, rank 1 counted twice, the single-rank simulation (2 x rank 0).
  CHECK(cli::checkAllReduce(parts, parts[0]).beyond > 0);
  CHECK(cli::checkAllReduce(parts, interp::sumRanksF32({parts[0], parts[1], parts[1]})).beyond > 0);
  CHECK(cli::checkAllReduce(parts, interp::sumRanksF32({parts[0], parts[0]})).beyond > 0);
  // Ranks that disagree on the shape.
  CHECK(cli::checkAllReduce({noise(1, 64), noise(2, 32)}, sum).beyond == 1);
}

TEST_CASE("checkAllReduce at 3 ranks: NCCL's per-hop rounding is allowed, a missing rank is not") {
  std::vector<interp::Tensor> parts = {noise(1, 256), noise(2, 256), noise(3, 256)};
  CHECK(cli::allReduceAllowance({parts[0], parts[1]}).empty());
  // The ring: round to bf16 after each addition.
  std::vector<double> a = parts[0].values(), b = parts[1].values(), c = parts[2].values(), ring(a.size());
  for (size_t i = 0; i < a.size(); ++i) ring[i] = interp::roundTo(interp::roundTo(a[i] + b[i], ir::DType::BF16) + c[i], ir::DType::BF16);
  auto ring_t = interp::Tensor::fromValues(parts[0].shape, ir::DType::BF16, ring);
  auto d = cli::checkAllReduce(parts, ring_t);
  CHECK(d.beyond == 0);
  CHECK(cli::checkAllReduce(parts, interp::sumRanksF32({parts[0], parts[1]})).beyond > 0);
}

TEST_CASE("encodeTensor / decodeTensor round trip; bad bytes fail") {
  auto t = noise(4, 10);
  auto back = cli::decodeTensor(cli::encodeTensor(t), "test");
  CHECK(back.shape == t.shape);
  CHECK(back.dtype == t.dtype);
  CHECK(back.values() == t.values());
  auto f8 = interp::Tensor::fromValues({2, 2}, ir::DType::F8E4M3FN, {0.5, -448, 1.125, 0});
  CHECK(cli::decodeTensor(cli::encodeTensor(f8), "test").values() == f8.values());
  CHECK_THROWS(cli::decodeTensor(cli::encodeTensor(t).substr(3), "test"));
  CHECK_THROWS(cli::decodeTensor("", "test"));
}

TEST_CASE("node proof at world size 2: correct collectives are proven on both ranks") {
  for (const char* g : {kFp8, kBf16}) {
    INFO(g);
    auto o = proveTwoRanks(g, -1, "");
    for (int r = 0; r < 2; ++r) {
      INFO("rank " << r << "\n" << o[static_cast<size_t>(r)].proof.report);
      CHECK(o[static_cast<size_t>(r)].proof.proven);
      CHECK(o[static_cast<size_t>(r)].proof.report.find("collective nodes computed from all ranks' GPU inputs") != std::string::npos);
      CHECK(o[static_cast<size_t>(r)].proof.report.find(": 0 collective nodes") == std::string::npos);
    }
  }
}

TEST_CASE("node proof at world size 2: a wrong fused all-reduce on rank 1 is named there") {
  auto o = proveTwoRanks(kFp8, 1, "all_reduce");
  INFO("rank 0\n" << o[0].proof.report << "rank 1\n" << o[1].proof.report);
  CHECK_FALSE(o[1].outputs_match);
  CHECK_FALSE(o[1].proof.proven);
  CHECK(o[1].proof.report.find("fxfuse.all_reduce") != std::string::npos);
  CHECK(o[1].proof.report.find("beyond one rounding step") != std::string::npos);
}

TEST_CASE("node proof at world size 2 without the other ranks' inputs is not proven") {
  // The single-rank simulation of a collective (N copies of this rank's value) is not the sum
  // of the ranks' different values: the gathered inputs are what proves the collectives.
  auto o = proveTwoRanks(kBf16, -1, "", false);
  INFO("rank 1\n" << o[1].proof.report);
  CHECK_FALSE(o[1].proof.proven);
}
