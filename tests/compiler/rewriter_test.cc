// Unit tests of the rewriter (passes/toolkit/rewriter.h) and of the pipeline's bookkeeping.
#include <catch2/catch.hpp>

#include "passes/pipeline/pipeline.h"
#include "passes/toolkit/rewriter.h"
#include "ir/fxg.h"
#include "ir/verifier.h"

using fxfuse::compiler::Rewriter;
namespace ir = fxfuse::ir;

namespace {

const char* kChain = R"(fxfuse.module {
  graph @main {
    input %1 "x": bf16[4, 8] cuda:0
    %2: f32[4, 8] cuda:0 = prims.convert_element_type.default(a=%1, dtype=f32)  // up
    %3: f32[4, 8] cuda:0 = aten.neg.default(self=%2)  // neg
    %4: f32[4, 8] cuda:0 = aten.exp.default(self=%3)  // exp
    %5: bf16[4, 8] cuda:0 = prims.convert_element_type.default(a=%4, dtype=bf16)  // down
    %6: bf16[4, 8] cuda:0 = aten.mul.Tensor(self=%5, other=%1)  // use
    output %6
    output %4
  }
})";

// One node whose result nobody uses.
const char* kDeadNode = R"(fxfuse.module {
  graph @main {
    input %1 "x": f32[4, 8] cpu
    %2: f32[4, 8] cpu = aten.neg.default(self=%1)  // unused
    %3: f32[4, 8] cpu = aten.exp.default(self=%1)  // used
    output %3
  }
})";

ir::Node* node(ir::Module& m, const std::string& name) {
  for (auto& n : m.entry().nodes())
    if (n->name == name) return n.get();
  return nullptr;
}

}  // namespace

TEST_CASE("create() copies the replaced value's type, records sources, replaceOutputs redirects uses",
          "[rewriter]") {
  auto m = ir::parseFxg(kChain, "t.fxg");
  ir::Graph& g = m->entry();
  Rewriter rw(g);
  ir::Node* down = node(*m, "down");
  std::vector<Rewriter::Out> outs(1);
  outs[0].replaces = down->output(0);
  ir::Node* c = rw.create("fxfuse.silu_and_mul.default", {Rewriter::named("input", ir::Attr::ofValue(g.inputs()[0].value))},
                          outs, down, {node(*m, "neg"), node(*m, "exp"), down}, "fused");
  rw.replaceOutputs(c, outs);
  CHECK(c->output(0)->type == down->output(0)->type);
  CHECK(c->meta["fused_from"] == "neg,exp,down");
  CHECK(c->kind == ir::NodeKind::Fxfuse);
  CHECK(down->output(0)->numUses() == 0);
  // exp's output is a graph output: only `down` is dead.
  CHECK(rw.eraseDead({down}) == 1);
  rw.finish();
  CHECK(ir::verifyModule(*m).empty());
  CHECK(node(*m, "exp") != nullptr);
}

TEST_CASE("eraseDead removes dead producers transitively and keeps side effects", "[rewriter]") {
  auto m = ir::parseFxg(kChain, "t.fxg");
  ir::Graph& g = m->entry();
  g.setOutputValue(1, node(*m, "use")->output(0));  // exp no longer a graph output
  Rewriter rw(g);
  ir::Node* use = node(*m, "use");
  use->output(0)->replaceAllUsesWith(g.inputs()[0].value);
  CHECK(rw.eraseDead({use}) == 5);
  CHECK(g.numNodes() == 0);
  CHECK(ir::verifyModule(*m).empty());
}

TEST_CASE("finish() restores topological order after a replacement moves a use before its def", "[rewriter]") {
  auto m = ir::parseFxg(kChain, "t.fxg");
  ir::Graph& g = m->entry();
  Rewriter rw(g);
  // A new node at the end of the graph replaces `up`, whose users come earlier.
  std::vector<Rewriter::Out> outs(1);
  outs[0].replaces = node(*m, "up")->output(0);
  ir::Node* c = rw.create("aten._to_copy.default",
                          {Rewriter::named("self", ir::Attr::ofValue(g.inputs()[0].value)),
                           Rewriter::named("dtype", ir::Attr::ofDType(ir::DType::F32))},
                          outs, nullptr, {node(*m, "up")}, "to_copy");
  rw.replaceOutputs(c, outs);
  CHECK_FALSE(ir::verifyModule(*m).empty());  // neg now uses a value defined after it
  rw.finish();
  CHECK(ir::verifyModule(*m).empty());
  CHECK(g.nodes().front()->name == "up");  // stable: untouched nodes keep their order
}

TEST_CASE("compileModule reports honest change flags and per-pass match counts", "[pipeline]") {
  auto m = ir::parseFxg(kChain, "t.fxg");
  fxfuse::compiler::CompileOptions opts;
  opts.passes = {"noop-elimination", "canonicalize-activation", "dce", "cleanup"};
  opts.verify_each_pass = true;
  opts.check_change_flags = true;  // the pipeline throws when a pass's "changed" is not honest
  std::string before = ir::printFxg(*m);
  auto r = fxfuse::compiler::compileModule(*m, opts);
  REQUIRE(r.passes.size() == 4);
  for (const auto& p : r.passes) CHECK(p.changed == (p.matches > 0));
  CHECK(ir::printFxg(*m) == before);  // nothing here is a pattern
  CHECK(r.nodes_before == r.nodes_after);

  // A dead node: dce changes the graph and must say so; the other passes must not claim to.
  auto dead = ir::parseFxg(kDeadNode, "dead.fxg");
  auto rd = fxfuse::compiler::compileModule(*dead, opts);
  REQUIRE(rd.passes.size() == 4);
  for (const auto& p : rd.passes) CHECK(p.changed == (p.name == "dce"));
  CHECK(rd.nodes_after == rd.nodes_before - 1);

  opts.passes = {"no-such-pass"};
  CHECK_THROWS_WITH(fxfuse::compiler::compileModule(*m, opts), Catch::Contains("unknown pass 'no-such-pass'"));
}
