// .fxg text: print → parse → print is the identity; errors name file and line.
#include <catch2/catch.hpp>

#include "ir/fxg.h"
#include "ir/io.h"
#include "ir/proto_io.h"
#include "ir/status.h"
#include "ir/verifier.h"

using namespace fxfuse::ir;

namespace {

const char* kGraph = R"(fxfuse.module {
  symbol s0 range=[2, 8192] hint=16
  graph @main {
    input %1 "x": bf16[s0, 16] cuda:0
    input %2 "w": bf16[16] cuda:0 parameter "norm.weight"
    input %3 "eps": f64[] cpu
    %4: f32[s0, 16] cuda:0 = prims.convert_element_type.default(a=%1, dtype=f32)  // convert
    %5: f32[s0, 16] cuda:0 = aten.pow.Tensor_Scalar(self=%4, exponent=2)  // pow
    %6: f32[s0, 1] cuda:0 = aten.mean.dim(self=%5, dim=[-1], keepdim=true)  // mean
    %7: f32[s0, 1] cuda:0 = aten.add.Tensor(self=%6, other=1e-06)  // add
    %8: Sym(s0) = aten.sym_size.int(self=%1, dim=0)  // sym_size
    %9: Sym(2*s0) = _operator.mul(a=%8, b=2)  // mul_sym
    %10: bf16[s0, 16] cuda:0 = aten.empty.memory_format(size=[%8, 16], *, dtype=bf16, device=device(cuda:0))  // empty
    _, %11: bf16[s0, 16] cuda:0 = higher_order.auto_functionalized(@_C.rms_norm.default, result=%10, input=%1, weight=%2, epsilon=1e-05)  // af
    %12: bf16[16, s0][1, 16] cuda:0 = aten.permute.default(self=%11, dims=[1, 0])  // permute
    %13: f32[s0, 1] cuda:0 = aten.clamp.default(self=%7, min=-inf, max=inf)  // clamp
    output %13
    output %12
    output %9
  }
}
)";

}  // namespace

TEST_CASE("fxg print/parse/print is stable", "[fxg]") {
  auto m = parseFxg(kGraph, "t.fxg");
  REQUIRE(verifyModule(*m).empty());
  std::string once = printFxg(*m);
  CHECK(once == kGraph);
  auto m2 = parseFxg(once, "t2.fxg");
  CHECK(printFxg(*m2) == once);
}

TEST_CASE("fxg survives the protobuf round trip", "[fxg][proto]") {
  auto m = parseFxg(kGraph, "t.fxg");
  auto viaPb = moduleFromBinary(moduleToBinary(*m), "t.pb");
  CHECK(printFxg(*viaPb) == kGraph);
  auto viaJson = moduleFromJson(moduleToJson(*m), "t.json");
  CHECK(printFxg(*viaJson) == kGraph);
}

TEST_CASE("fxg numbers: subnormal doubles read back, overflow and trailing junk do not", "[fxg]") {
  // The printer writes any finite double; one that underflows into the subnormal range
  // (here 1.897e-321, a fuzz finding) must parse back to the same value.
  std::string text = kGraph;
  const std::string from = "other=1e-06", to = "other=1.897e-321";
  text.replace(text.find(from), from.size(), to);
  auto m = parseFxg(text, "t.fxg");
  CHECK(printFxg(*m) == text);
  CHECK(printFxg(*parseFxg(printFxg(*m), "t2.fxg")) == text);
  std::string min_sub = kGraph;
  min_sub.replace(min_sub.find(from), from.size(), "other=5e-324");
  CHECK(printFxg(*parseFxg(min_sub, "t.fxg")) == min_sub);
  for (const char* bad : {"other=1e999", "other=1.5e", "other=1.2.3"}) {
    std::string b = kGraph;
    b.replace(b.find(from), from.size(), bad);
    INFO(bad);
    CHECK_THROWS_WITH(parseFxg(b, "t.fxg"), Catch::Contains("bad number"));
  }
}

TEST_CASE("def-use links are built while parsing", "[fxg]") {
  auto m = parseFxg(kGraph, "t.fxg");
  Graph& g = m->entry();
  Value* x = g.inputs()[0].value;
  CHECK(x->users().size() == 3);  // convert, sym_size, af(input)
  Node* af = nullptr;
  for (auto& n : g.nodes())
    if (n->name == "af") af = n.get();
  REQUIRE(af != nullptr);
  CHECK(af->numOutputs() == 2);
  CHECK(af->output(0) == nullptr);
  CHECK(af->input("weight") == g.inputs()[1].value);
  CHECK(af->arg("epsilon")->asDouble().value() == Approx(1e-5));
}

TEST_CASE("fxg errors name the file and line", "[fxg]") {
  std::string bad = kGraph;
  auto pos = bad.find("dims=[1, 0]");
  bad.replace(pos, 11, "dims=[1, 0");
  CHECK_THROWS_WITH(parseFxg(bad, "bad.fxg"), Catch::StartsWith("bad.fxg:15:"));
  CHECK_THROWS_WITH(parseFxg("fxfuse.module {\n  graph @g {\n    %1: f32[2] = aten.neg.default(self=%7)  // n\n  }\n}\n", "u.fxg"),
                    Catch::Contains("u.fxg:3: use of undefined value %7"));
  CHECK_THROWS_WITH(parseFxg("hello\n", "h.fxg"), Catch::StartsWith("h.fxg:1:"));
  CHECK_THROWS_WITH(parseFxg("fxfuse.module {\n  graph @g {\n", "t.fxg"), Catch::Contains("unexpected end of file"));
  CHECK_THROWS_AS(parseFxg("fxfuse.module {\n  graph @g {\n    input %1 \"x\": q16[2]\n  }\n}\n", "d.fxg"), fxfuse::FxError);
}

TEST_CASE("graph edits keep use lists and order", "[graph]") {
  auto m = parseFxg(kGraph, "t.fxg");
  Graph& g = m->entry();
  Node* clamp = nullptr;
  for (auto& n : g.nodes())
    if (n->name == "clamp") clamp = n.get();
  REQUIRE(clamp);
  Value* add_out = clamp->input("self");
  // Replace the clamp's result by its input and erase it.
  clamp->output(0)->replaceAllUsesWith(add_out);
  g.erase(clamp);
  CHECK(g.outputs()[0].value == add_out);
  CHECK(verifyModule(*m).empty());
  size_t before = g.numNodes();
  CHECK(g.eliminateDeadCode() == 0);  // everything left is used or has effects
  CHECK(g.numNodes() == before);
  g.setOutputValue(1, g.inputs()[0].value);  // permute and the rms_norm chain become dead
  CHECK(g.eliminateDeadCode() == 3);  // permute, af, empty (sym_size is still used by mul_sym)
  CHECK(verifyModule(*m).empty());
}

TEST_CASE("topological sort restores def-before-use", "[graph]") {
  auto m = parseFxg(kGraph, "t.fxg");
  Graph& g = m->entry();
  auto nodes = g.nodeList();
  g.moveBefore(nodes.back(), nodes.front());  // clamp before its producer
  CHECK_FALSE(verifyModule(*m).empty());
  g.topoSort();
  CHECK(verifyModule(*m).empty());
}
