// Lifted scalars in the interpreter: a graph whose eps is a 0-d CPU graph input computes
// bit for bit what the same graph with eps as a constant computes (native decomposition and
// canonical op, eps used directly and through a cast), and the input gets its recorded value.
#include <catch2/catch.hpp>

#include "tests/interpreter/test_util.h"

using namespace fxfuse::interp;
using namespace fxfuse::interp::test;

namespace {

const char* kHeader = "symbol s0 range=[2, ?] hint=19\n";

// The same RMSNorm twice: @lifted reads eps from input %3 (EPS_USE spells how), @constant
// has the number in its place.
std::string nativeNorm(const std::string& name, const std::string& extra_input, const std::string& eps_nodes,
                       const std::string& eps) {
  return "graph @" + name + " {\n"
         "input %1 \"x\": bf16[s0, 64] cuda:0\n"
         "input %2 \"w\": bf16[64] cuda:0 parameter \"norm.weight\"\n" + extra_input + eps_nodes +
         "%10: f32[s0, 64] cuda:0 = prims.convert_element_type.default(a=%1, dtype=f32)  // c0\n"
         "%11: f32[s0, 64] cuda:0 = aten.pow.Tensor_Scalar(self=%10, exponent=2)  // pow\n"
         "%12: f32[s0, 1] cuda:0 = aten.mean.dim(self=%11, dim=[-1], keepdim=true)  // mean\n"
         "%13: f32[s0, 1] cuda:0 = aten.add.Tensor(self=%12, other=" + eps + ")  // add\n"
         "%14: f32[s0, 1] cuda:0 = aten.rsqrt.default(self=%13)  // rsqrt\n"
         "%15: f32[s0, 64] cuda:0 = aten.mul.Tensor(self=%10, other=%14)  // mul\n"
         "%16: bf16[s0, 64] cuda:0 = prims.convert_element_type.default(a=%15, dtype=bf16)  // c1\n"
         "%17: bf16[s0, 64] cuda:0 = aten.mul.Tensor(self=%16, other=%2)  // mul_w\n"
         "output %17\n}\n";
}

// Runs @lifted on its own inputs and @constant on the same inputs without the scalar.
void requireSameOutputs(const std::string& graphs) {
  auto m = parse(graphs, kHeader);
  Options o;
  o.graph = "lifted";
  Interpreter lifted(*m, o);
  auto inputs = lifted.makeInputs(11);
  REQUIRE(inputs.size() == 3);
  REQUIRE(inputs[2].isTensor());
  CHECK(inputs[2].t.item() == 1e-05);  // the recorded value
  o.graph = "constant";
  Interpreter constant(*m, o);
  auto a = lifted.run(inputs);
  auto b = constant.run({inputs[0], inputs[1]});
  REQUIRE(a.size() == 1);
  REQUIRE(b.size() == 1);
  CHECK(a[0].t.values() == b[0].t.values());
}

}  // namespace

TEST_CASE("native RMSNorm: eps as an f64[] input equals the constant eps", "[lifted]") {
  requireSameOutputs(nativeNorm("lifted", "input %3 \"eps\": f64[] cpu value=1e-05\n", "", "%3") +
                     nativeNorm("constant", "", "", "1e-05"));
}

TEST_CASE("native RMSNorm: eps cast to f32 first equals the constant eps", "[lifted]") {
  requireSameOutputs(
      nativeNorm("lifted", "input %3 \"eps\": f64[] cpu value=1e-05\n",
                 "%4: f32[] cpu = prims.convert_element_type.default(a=%3, dtype=f32)  // ce\n", "%4") +
      nativeNorm("constant", "", "", "1e-05"));
}

TEST_CASE("canonical rms_norm: epsilon as an input equals the constant epsilon", "[lifted]") {
  requireSameOutputs(
      "graph @lifted {\n"
      "input %1 \"x\": bf16[s0, 64] cuda:0\n"
      "input %2 \"w\": bf16[64] cuda:0 parameter \"norm.weight\"\n"
      "input %3 \"eps\": f64[] cpu value=1e-05\n"
      "%4: bf16[s0, 64] cuda:0 = fxfuse.rms_norm.default(input=%1, weight=%2, epsilon=%3)  // n\n"
      "output %4\n}\n"
      "graph @constant {\n"
      "input %1 \"x\": bf16[s0, 64] cuda:0\n"
      "input %2 \"w\": bf16[64] cuda:0 parameter \"norm.weight\"\n"
      "%3: bf16[s0, 64] cuda:0 = fxfuse.rms_norm.default(input=%1, weight=%2, epsilon=1e-05)  // n\n"
      "output %3\n}\n");
}

TEST_CASE("an unknown lifted scalar is 1.0 and says so", "[lifted]") {
  auto m = parse("graph @main {\ninput %1 \"eps\": f64[] cpu\noutput %1\n}\n");
  Interpreter in(*m, {});
  auto inputs = in.makeInputs(1);
  REQUIRE(inputs.size() == 1);
  CHECK(inputs[0].t.item() == 1.0);
  REQUIRE(in.inputNotes().size() == 1);
  CHECK(in.inputNotes()[0].find("--const eps=VALUE") != std::string::npos);
}
