// The node-by-node parity proof (compiler/cli/node_check.h) without a GPU: a stand-in "GPU"
// is the interpreter itself, with one node's value changed the way a GPU might change it,
// later nodes computed from the changed value:
//   * unchanged: every node bit-identical, proven;
//   * a matmul output one bf16 step off in some elements (a cuBLASLt accumulation order):
//     the outputs differ, every node is within one step on its own inputs: proven;
//   * an FP8 matmul 8 steps off in small elements (0.008, under the tensor-core accumulation
//     bound of about 0.015 here, as measured on the H200): proven, reported as such;
//   * the same matmul 5% off (a real bug): not proven, and the report names that node.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "compiler/cli/node_check.h"
#include "compiler/interpreter/interpreter.h"
#include "compiler/lowering/lowering.h"
#include "compiler/pipeline.h"
#include "ir/dtype.h"
#include "ir/io.h"

using namespace fxfuse;

namespace {

const char* kGraph = "tests/data/vllm/vllm_fusion_custom_static_eps1e-5.post_grad.fxg.json";

// What a changed node does to its value.
using Change = std::function<void(interp::Tensor&)>;

// The stand-in GPU: the compiled graph with every node exposed, run by the interpreter; the
// first node whose target contains `target` is changed by `change`.
cli::PlanRunner fakeGpu(const std::vector<interp::RValue>& inputs, const interp::Options& io, const std::string& target,
                        const Change& change, std::string* changed_node) {
  return [=](const plan::v1::Plan& plan) {
    auto m = ir::loadModule(kGraph);
    compiler::compileModule(*m, compiler::CompileOptions{});
    cli::exposeEveryNode(*m);
    interp::Options o = io;
    bool done = false;
    o.after_output = [&](const ir::Node& n, size_t, interp::RValue& v) {
      if (done || !change || !v.isTensor() || n.target.find(target) == std::string::npos) return;
      done = true;
      *changed_node = n.name;
      interp::Tensor t = interp::Tensor::fromValues(v.t.shape, v.t.dtype, v.t.values());
      change(t);
      v = interp::RValue::ofTensor(t);
    };
    interp::Interpreter in(*m, o);
    std::vector<std::optional<interp::Tensor>> out;
    for (auto& r : in.run(inputs)) out.push_back(r.isTensor() ? std::optional<interp::Tensor>(r.t) : std::nullopt);
    REQUIRE(static_cast<int>(out.size()) == plan.outputs_size());
    return out;
  };
}

// Adds `by(x)` to every 7th element.
Change every7th(std::function<double(double, ir::DType)> by) {
  return [by](interp::Tensor& t) {
    std::vector<double> v = t.values();
    for (size_t k = 0; k < v.size(); k += 7) v[k] += by(v[k], t.dtype);
    t = interp::Tensor::fromValues(t.shape, t.dtype, v);
  };
}

struct Outcome {
  cli::NodeProof proof;
  std::string changed_node;
  int64_t output_differing = 0;
};

Outcome prove(const Change& change) {
  auto original = ir::loadModule(kGraph);
  interp::Options io;
  io.seed = 1;
  io.world_size = 1;
  interp::Interpreter ref_in(*original, io);
  std::vector<interp::RValue> inputs = ref_in.makeInputs(1);
  std::vector<interp::RValue> ref = ref_in.run(inputs);
  Outcome o;
  cli::PlanRunner gpu = fakeGpu(inputs, io, "scaled_mm", change, &o.changed_node);
  // The checked plan's outputs: the stand-in's user outputs.
  auto m = ir::loadModule(kGraph);
  compiler::compileModule(*m, compiler::CompileOptions{});
  const size_t n_user = m->entry().outputs().size();
  cli::exposeEveryNode(*m);
  lowering::LowerOptions lo;
  auto all = gpu(lowering::lowerModule(*m, lo));
  std::vector<std::optional<interp::Tensor>> checked(all.begin(), all.begin() + static_cast<long>(n_user));
  for (size_t i = 0; i < n_user; ++i)
    if (checked[i] && ref[i].isTensor()) o.output_differing += cli::compareWithinOneStep(ref[i].t, *checked[i]).differing;
  interp::CompareOptions co;
  co.max_mismatch_frac = 0.01;
  o.proof = cli::proveByNodes(kGraph, compiler::CompileOptions{}, io, inputs, ref, checked, gpu, co);
  return o;
}

}  // namespace

TEST_CASE("roundingStep is the spacing of representable values") {
  CHECK(cli::roundingStep(1.0, ir::DType::BF16) == std::ldexp(1.0, -7));
  CHECK(cli::roundingStep(1.99, ir::DType::BF16) == std::ldexp(1.0, -7));
  CHECK(cli::roundingStep(-3.0, ir::DType::BF16) == std::ldexp(1.0, -6));
  CHECK(cli::roundingStep(1.0, ir::DType::F8E4M3FN) == 0.125);
  CHECK(cli::roundingStep(448.0, ir::DType::F8E4M3FN) == 32.0);
  CHECK(cli::roundingStep(0.0, ir::DType::F8E4M3FN) == std::ldexp(1.0, -9));  // subnormal spacing
  CHECK(cli::roundingStep(1.0, ir::DType::F32) == std::ldexp(1.0, -23));
  CHECK(cli::roundingStep(5.0, ir::DType::I64) == 0);
}

TEST_CASE("compareWithinOneStep: one step passes, two steps do not, integers must be equal") {
  auto bf = [](std::vector<double> v) { return interp::Tensor::fromValues({static_cast<int64_t>(v.size())}, ir::DType::BF16, v); };
  // Large first element: the RMS floor (2^-12 of the RMS) stays below the steps tested.
  auto ref = bf({1.0, 2.0, 4.0});
  auto d1 = cli::compareWithinOneStep(ref, bf({1.0 + std::ldexp(1.0, -7), 2.0, 4.0 - std::ldexp(1.0, -6)}));
  CHECK(d1.differing == 2);
  CHECK(d1.beyond == 0);
  auto d2 = cli::compareWithinOneStep(ref, bf({1.0 + std::ldexp(1.0, -6), 2.0, 4.0}));
  CHECK(d2.beyond == 1);
  auto i64 = [](std::vector<double> v) { return interp::Tensor::fromValues({static_cast<int64_t>(v.size())}, ir::DType::I64, v); };
  CHECK(cli::compareWithinOneStep(i64({1, 2}), i64({1, 3})).beyond == 1);
  CHECK(cli::compareWithinOneStep(ref, bf({1.0, 2.0})).beyond == 1);  // shape
}

TEST_CASE("node proof: an unchanged run is bit-identical at every node") {
  Outcome o = prove(nullptr);
  INFO(o.proof.report);
  CHECK(o.proof.proven);
  CHECK(o.output_differing == 0);
  CHECK(o.proof.report.find("10 bit-identical, 0 within one rounding step") != std::string::npos);
}

TEST_CASE("node proof: a matmul one bf16 step off is rounding carried forward") {
  Outcome o = prove(every7th([](double x, ir::DType dt) { return cli::roundingStep(x, dt); }));
  INFO(o.proof.report);
  REQUIRE(!o.changed_node.empty());
  CHECK(o.output_differing > 0);  // the change reaches the outputs
  CHECK(o.proof.proven);
  CHECK(o.proof.report.find("node " + o.changed_node + " (") != std::string::npos);  // listed as one step apart
}

TEST_CASE("node proof: an FP8 matmul off by less than its accumulation bound is proven") {
  Outcome o = prove(every7th([](double x, ir::DType) { return std::fabs(x) <= 0.25 ? 0.0078125 : 0.0; }));
  INFO(o.proof.report);
  REQUIRE(!o.changed_node.empty());
  CHECK(o.proof.proven);
  CHECK(o.proof.report.find("FP8 GEMM outputs needed the accumulation bound") != std::string::npos);
}

TEST_CASE("fp8GemmAllowance: (K-1) * 2^-21 * sum |a*b| * scales") {
  auto t = [](fxfuse::interp::Shape sh, std::vector<double> v, ir::DType dt) { return interp::Tensor::fromValues(sh, dt, v); };
  auto a = t({1, 3}, {1.0, -2.0, 4.0}, ir::DType::F8E4M3FN);
  auto b = t({3, 2}, {1.0, 2.0, 1.0, -1.0, 0.5, 0.25}, ir::DType::F8E4M3FN);
  auto al = cli::fp8GemmAllowance(a, b, t({1}, {0.5}, ir::DType::F32), t({1}, {2.0}, ir::DType::F32));
  REQUIRE(al.size() == 2);
  CHECK(al[0] == Approx(2 * std::ldexp(1.0, -21) * (1 + 2 + 2)));  // column 0: |1*1|+|-2*1|+|4*0.5|
  CHECK(al[1] == Approx(2 * std::ldexp(1.0, -21) * (2 + 2 + 1)));
  // Per-row scales.
  auto a2 = t({2, 3}, {1, 1, 1, 1, 1, 1}, ir::DType::F8E4M3FN);
  auto al2 = cli::fp8GemmAllowance(a2, b, t({2, 1}, {1.0, 3.0}, ir::DType::F32), t({1}, {1.0}, ir::DType::F32));
  CHECK(al2[2] == Approx(3 * al2[0]));
}

TEST_CASE("node proof: a matmul 5% off is not proven, and the report names it") {
  Outcome o = prove(every7th([](double x, ir::DType) { return 0.05 * x + 0.05; }));
  INFO(o.proof.report);
  REQUIRE(!o.changed_node.empty());
  CHECK_FALSE(o.proof.proven);
  CHECK(o.proof.report.find("node " + o.changed_node + " (") != std::string::npos);
  CHECK(o.proof.report.find("beyond one rounding step") != std::string::npos);
}
