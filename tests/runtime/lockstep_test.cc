// The lockstep CPU reference of tensor-parallel runs (tools/interpreter/lockstep.h): ranks
// with different values meet at every all-reduce, which sums in fp32 in rank order and rounds
// once; fused all-reduce + norm ops see the same sum; a failing rank does not hang the others.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "tools/interpreter/interpreter.h"
#include "tools/interpreter/lockstep.h"
#include "ir/fxg.h"

using namespace fxfuse::interp;
using fxfuse::ir::DType;

namespace {

std::unique_ptr<fxfuse::ir::Module> parse(const std::string& body) {
  return fxfuse::ir::parseFxg("fxfuse.module {\n" + body + "\n}\n", "<lockstep_test>");
}

// Runs `m` on `world` ranks; rank r gets inputs[r].
std::vector<std::vector<RValue>> runRanks(fxfuse::ir::Module& m, const std::vector<std::vector<Tensor>>& inputs) {
  const int world = static_cast<int>(inputs.size());
  auto group = std::make_shared<RankGroup>(world, 30.0);
  std::vector<std::unique_ptr<Interpreter>> owned;
  std::vector<Interpreter*> ranks;
  std::vector<std::vector<RValue>> in;
  for (int r = 0; r < world; ++r) {
    Options o;
    o.world_size = world;
    o.collective = group;
    o.rank = r;
    owned.push_back(std::make_unique<Interpreter>(m, o));
    ranks.push_back(owned.back().get());
    std::vector<RValue> v;
    for (const auto& t : inputs[static_cast<size_t>(r)]) v.push_back(RValue::ofTensor(t));
    in.push_back(v);
  }
  return runLockstep(ranks, in);
}

Tensor bf16(const std::vector<double>& v) { return Tensor::fromValues({1, static_cast<int64_t>(v.size())}, DType::BF16, v); }

const char* kAllReduce = R"(
  graph @main {
    input %1 "x": bf16[1, 2]
    %2: bf16[1, 2] = fxfuse.all_reduce.default(input=%1, group_name="tp:0")  // ar
    output %2
  })";

}  // namespace

TEST_CASE("lockstep all-reduce: every rank gets the sum of the ranks' own values") {
  auto m = parse(kAllReduce);
  auto out = runRanks(*m, {{bf16({1.0, -2.0})}, {bf16({2.5, 0.5})}});
  REQUIRE(out.size() == 2);
  for (const auto& o : out) {
    REQUIRE(o.at(0).isTensor());
    CHECK(o[0].t.values() == std::vector<double>{3.5, -1.5});
  }
}

TEST_CASE("lockstep all-reduce: fp32 sum in rank order, rounded once to bf16") {
  // 1 + 2^-8 is not a bf16 value (it rounds to 1); 1 + 2^-8 + 2^-8 = 1 + 2^-7 is. Rounding
  // after every add would give 1.
  auto m = parse(kAllReduce);
  const double e = 1.0 / 256;
  auto out = runRanks(*m, {{bf16({1.0, 0.0})}, {bf16({e, 0.0})}, {bf16({e, 0.0})}});
  for (const auto& o : out) CHECK(o.at(0).t.values()[0] == 1.0 + 2 * e);
  CHECK(sumRanksF32({bf16({1.0}), bf16({e}), bf16({e})}).values()[0] == 1.0 + 2 * e);
}

TEST_CASE("lockstep: the fused all-reduce + RMSNorm sees the ranks' sum") {
  // Residual 0 and weight 1: out = rmsnorm(a), a = x0 + x1 = [3, 4] -> rms = sqrt(12.5).
  auto m = parse(R"(
  graph @main {
    input %1 "x": bf16[1, 2]
    input %2 "r": bf16[1, 2]
    input %3 "w": bf16[2]
    %4: bf16[1, 2], %5: bf16[1, 2] = fxfuse.all_reduce_rms_norm.default(input=%1, residual=%2, weight=%3, epsilon=0.0, world_size=2, variance_of_rounded_sum=true)  // arn
    output %4
    output %5
  })");
  Tensor w = Tensor::fromValues({2}, DType::BF16, {1.0, 1.0});
  Tensor zero = bf16({0.0, 0.0});
  auto out = runRanks(*m, {{bf16({1.0, 3.0}), zero, w}, {bf16({2.0, 1.0}), zero, w}});
  for (const auto& o : out) {
    CHECK(o.at(1).t.values() == std::vector<double>{3.0, 4.0});
    auto n = o.at(0).t.values();
    CHECK(n[0] == Approx(3.0 / std::sqrt(12.5)).epsilon(1e-2));
    CHECK(n[1] == Approx(4.0 / std::sqrt(12.5)).epsilon(1e-2));
  }
}

TEST_CASE("lockstep: ranks that disagree on the shape fail with the node's name, no hang") {
  auto m = parse(R"(
  graph @main {
    input %1 "x": bf16[1, s0]
    %2: bf16[1, s0] = fxfuse.all_reduce.default(input=%1)  // ar_mismatch
    output %2
  })");
  REQUIRE_THROWS_WITH(runRanks(*m, {{bf16({1.0, 2.0})}, {bf16({1.0, 2.0, 3.0})}}),
                      Catch::Contains("ar_mismatch") && Catch::Contains("rank 1"));
}

TEST_CASE("lockstep: a rank that fails before the collective releases the others") {
  RankGroup g(2, 30.0);
  g.abort("another rank failed (rank 1)");
  REQUIRE_THROWS_WITH(g.allReduceSum(0, bf16({1.0}), "ar"), Catch::Contains("rank 1"));
}

TEST_CASE("lockstep: a missing rank times out naming the waiting rank") {
  RankGroup g(2, 0.2);
  REQUIRE_THROWS_WITH(g.allReduceSum(0, bf16({1.0}), "ar_wait"),
                      Catch::Contains("ar_wait") && Catch::Contains("rank 0 waited"));
}

TEST_CASE("lockstep inputs: activations depend on the rank, weights do not") {
  auto m = parse(R"(
  graph @main {
    input %1 "hidden": bf16[4, 8]
    input %2 "norm.weight": bf16[8] parameter "norm.weight"
    %3: bf16[4, 8] = fxfuse.rms_norm.default(input=%1, weight=%2, epsilon=1e-5)  // n
    output %3
  })");
  Options o0, o1;
  o1.rank = 1;
  Interpreter i0(*m, o0), i1(*m, o1);
  auto a = i0.makeInputs(5), b = i1.makeInputs(5);
  CHECK(a[0].t.values() != b[0].t.values());
  CHECK(a[1].t.values() == b[1].t.values());
  Interpreter single(*m, Options{});
  CHECK(single.makeInputs(5)[0].t.values() == a[0].t.values());  // rank 0 = the single-rank inputs
}
