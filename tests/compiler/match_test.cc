// Unit tests of the pattern matcher combinators (passes/toolkit/match.h).
#include <catch2/catch.hpp>

#include "passes/toolkit/match.h"
#include "ir/fxg.h"

namespace m = fxfuse::compiler::m;
using fxfuse::ir::Value;

namespace {

std::unique_ptr<fxfuse::ir::Module> parse(const char* text) { return fxfuse::ir::parseFxg(text, "test.fxg"); }

// The value produced by the node named `name`.
Value* out(fxfuse::ir::Module& mod, const std::string& name, size_t i = 0) {
  for (auto& n : mod.entry().nodes())
    if (n->name == name) return n->output(i);
  FAIL("no node " << name);
  return nullptr;
}

const char* kNorm = R"(fxfuse.module {
  graph @main {
    input %1 "x": f32[4, 8]
    input %2 "w": bf16[8]
    input %3 "eps": SymFloat(0.5)
    %4: f32[4, 8] = aten.pow.Tensor_Scalar(self=%1, exponent=2)  // pow
    %5: f32[4, 1] = aten.mean.dim(self=%4, dim=[-1], keepdim=true)  // mean
    %6: f32[4, 1] = aten.add.Tensor(self=1e-06, other=%5)  // add_swapped
    %7: f32[4, 1] = aten.rsqrt.default(self=%6)  // rsqrt
    %8: f32[4, 8] = aten.mul.Tensor(self=%7, other=%1)  // mul_swapped
    %9: f32[4, 8] = aten.clamp_max.default(self=%8, max=448.0)  // hi
    %10: f32[4, 8] = aten.clamp_min.default(self=%9, min=-448.0)  // lo
    %11: bf16[4, 8] = prims.convert_element_type.default(a=%10, dtype=bf16)  // convert
    %12: f32[4, 1] = aten.add.Tensor(self=%5, other=%3)  // add_eps_value
    output %11
    output %8
    output %12
  }
})";

}  // namespace

TEST_CASE("Op matches by schema argument name and binds values", "[match]") {
  auto mod = parse(kNorm);
  Value* x = nullptr;
  fxfuse::ir::Node* pow = nullptr;
  auto p = m::Op("aten.mean.dim", {{"self", m::Op("aten.pow.Tensor_Scalar", {{"self", m::Any(&x)}, {"exponent", m::Const(2)}})
                                                .node(&pow)}});
  m::MatchState st;
  REQUIRE(p.match(out(*mod, "mean"), st));
  CHECK(x == mod->entry().inputs()[0].value);
  CHECK(pow->name == "pow");
}

TEST_CASE("commutative() accepts swapped operands; without it the swap fails with a reason", "[match]") {
  auto mod = parse(kNorm);
  Value* x = nullptr;
  auto rsqrt = m::Op("aten.rsqrt.default");
  auto ordered = m::Op("aten.mul.Tensor", {{"self", m::Any(&x)}, {"other", rsqrt}});
  m::MatchState st;
  CHECK_FALSE(ordered.match(out(*mod, "mul_swapped"), st));
  CHECK(st.failure() == "expected aten.rsqrt, got graph input 'x'");
  m::MatchState st2;
  CHECK(ordered.commutative().match(out(*mod, "mul_swapped"), st2));
  CHECK(x == mod->entry().inputs()[0].value);
}

TEST_CASE("a failed commutative alternative rolls its bindings back", "[match]") {
  auto mod = parse(kNorm);
  Value* x = nullptr;
  // First try binds x to rsqrt's output, then fails on Same(&x); the swap must start clean.
  auto p = m::Op("aten.mul.Tensor", {{"self", m::Any(&x)}, {"other", m::Same(&x)}}).commutative();
  m::MatchState st;
  CHECK_FALSE(p.match(out(*mod, "mul_swapped"), st));
  CHECK(x == nullptr);
}

TEST_CASE("Const compares numbers with a relative tolerance", "[match]") {
  auto mod = parse(kNorm);
  m::MatchState st;
  CHECK(m::Op("aten.add.Tensor", {{"self", m::Const(1e-6)}}).match(out(*mod, "add_swapped"), st));
  m::MatchState st2;
  CHECK(m::Op("aten.add.Tensor", {{"self", m::Const(1.0000001e-6, 1e-6)}}).match(out(*mod, "add_swapped"), st2));
  m::MatchState st3;
  CHECK_FALSE(m::Op("aten.add.Tensor", {{"self", m::Const(1e-5)}}).match(out(*mod, "add_swapped"), st3));
  CHECK(st3.failure() == "expected the constant 1e-05, got the number 1e-06");
}

TEST_CASE("Scalar binds a number argument or a scalar graph input", "[match]") {
  auto mod = parse(kNorm);
  const fxfuse::ir::Attr* eps = nullptr;
  m::MatchState st;
  REQUIRE(m::Op("aten.add.Tensor", {{"other", m::Scalar(&eps)}}).match(out(*mod, "add_eps_value"), st));
  REQUIRE(eps != nullptr);
  CHECK(eps->isValue());
  CHECK(eps->value->name == "eps");
}

TEST_CASE("Clamp accepts clamp_min/clamp_max in either order; Cast checks the dtype", "[match]") {
  auto mod = parse(kNorm);
  fxfuse::ir::DType to{};
  auto p = m::Cast(m::Clamp(m::Op("aten.mul.Tensor"), -448.0, 448.0), std::nullopt, &to);
  m::MatchState st;
  CHECK(p.match(out(*mod, "convert"), st));
  CHECK(to == fxfuse::ir::DType::BF16);
  m::MatchState st2;
  CHECK_FALSE(m::Cast(m::Any(), fxfuse::ir::DType::F8E4M3FN).match(out(*mod, "convert"), st2));
  CHECK(st2.failure() == "expected a cast to f8e4m3fn, got a cast to bf16 (node convert)");
}

TEST_CASE("predicates: dtype, oneUse, output index; explain keeps the deepest failure", "[match]") {
  auto mod = parse(kNorm);
  m::MatchState st;
  CHECK(m::Op("aten.mul.Tensor").dtype(fxfuse::ir::DType::F32).match(out(*mod, "mul_swapped"), st));
  m::MatchState st2;
  // mul_swapped is used by clamp_max and by a graph output: two uses.
  CHECK_FALSE(m::Op("aten.mul.Tensor").oneUse().match(out(*mod, "mul_swapped"), st2));
  CHECK(st2.failure() == "aten.mul.Tensor (node mul_swapped) has 2 uses, expected 1");
  m::MatchState st3;
  auto deep = m::Op("aten.rsqrt.default",
                    {{"self", m::Op("aten.add.Tensor", {{"self", m::Op("aten.mean.dim")}, {"other", m::Const(1e-6)}})}});
  CHECK_FALSE(deep.match(out(*mod, "rsqrt"), st3));
  CHECK(st3.failure() == "expected aten.mean.dim, got the number 1e-06");
  m::MatchState st4;
  CHECK(deep.match(out(*mod, "rsqrt"), st4) == false);
  CHECK(m::OneOf({m::Op("aten.exp.default"), m::Op("aten.rsqrt.default")}).match(out(*mod, "rsqrt"), st4));
}
