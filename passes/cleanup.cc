// Generic cleanups: dead-code elimination, common-subexpression elimination, and the
// post-fusion cleanup (stable topological sort + DCE, vLLM's PostCleanupPass).
#include <string>
#include <unordered_map>

#include "compiler/op_util.h"
#include "ir/fxg.h"
#include "passes/passes.h"

namespace fxfuse::passes {
namespace {

using compiler::PassContext;

// dce: removes nodes none of whose outputs is used and that have no side effects.
// REQUIRES: a functional graph (run functionalize first); in-place calls are kept anyway
// because they have no outputs.
class DcePass : public Pass {
 public:
  std::string_view name() const override { return "dce"; }
  std::string_view summary() const override { return "remove nodes whose outputs are unused (functional graphs)"; }
  bool run(ir::Graph& g, PassContext& ctx) override {
    size_t n = g.eliminateDeadCode();
    if (n) ctx.addMatch("dead_node", static_cast<int64_t>(n));
    return n > 0;
  }
};

bool cseExcluded(const ir::Node& n) {
  if (n.numOutputs() == 0 || ir::hasSideEffects(n)) return true;
  if (n.kind == ir::NodeKind::Hop) return true;
  const std::string& t = n.target;
  // Fresh buffers and random ops are distinct per call.
  for (const char* p : {"aten.empty", "aten.rand", "aten.randn", "aten.randint", "aten.bernoulli", "aten.dropout",
                        "aten.native_dropout", "aten.normal", "aten.uniform", "aten.new_empty", "aten.empty_like",
                        "_c10d_functional.", "vllm.", "_C."})
    if (t.rfind(p, 0) == 0) return true;
  return false;
}

std::string attrKey(const ir::Attr& a) {
  switch (a.kind) {
    case ir::Attr::Kind::Value: return "%" + std::to_string(reinterpret_cast<uintptr_t>(a.value));
    case ir::Attr::Kind::Float: return "f" + ir::formatFloat(a.f);
    case ir::Attr::Kind::Int: return "i" + std::to_string(a.i);
    case ir::Attr::Kind::Bool: return a.b ? "T" : "F";
    case ir::Attr::Kind::String: return "s" + a.s;
    case ir::Attr::Kind::DType: return "d" + std::to_string(static_cast<int>(a.dtype));
    case ir::Attr::Kind::Device: return "D" + a.device.str();
    case ir::Attr::Kind::Layout: return "L" + std::to_string(static_cast<int>(a.layout));
    case ir::Attr::Kind::MemoryFormat: return "M" + std::to_string(static_cast<int>(a.memory_format));
    case ir::Attr::Kind::Sym: return "y" + a.sym->str();
    case ir::Attr::Kind::Op: return "@" + a.s;
    case ir::Attr::Kind::SpecialFloat: return "x" + a.s;
    case ir::Attr::Kind::List: {
      std::string s = "[";
      for (const auto& x : a.list) s += attrKey(x) + ",";
      return s + "]";
    }
    case ir::Attr::Kind::None: return "N";
    default: return "?" + std::to_string(static_cast<int>(a.kind)) + a.s + a.s2 + std::to_string(a.graph);
  }
}

// cse: merges pure nodes with the same target, arguments and output types.
//   f(a, b); f(a, b)  ->  f(a, b) used twice
class CsePass : public Pass {
 public:
  std::string_view name() const override { return "cse"; }
  std::string_view summary() const override { return "merge identical pure nodes (same target, arguments, output types)"; }
  bool run(ir::Graph& g, PassContext& ctx) override {
    std::unordered_map<std::string, ir::Node*> seen;
    bool changed = false;
    for (ir::Node* n : g.nodeList()) {
      if (cseExcluded(*n)) continue;
      std::string key = n->target + "(";
      for (const auto& a : n->args()) key += a.name + "=" + attrKey(a.value) + ";";
      key += ")->";
      for (ir::Value* v : n->outputs()) key += v ? ir::typeStr(*v) + "," : "_,";
      auto [it, inserted] = seen.emplace(key, n);
      if (inserted) continue;
      ir::Node* first = it->second;
      if (first->numOutputs() != n->numOutputs()) continue;
      bool ok = true;
      for (size_t i = 0; i < n->numOutputs(); ++i)
        if (n->output(i) && !first->output(i)) ok = false;
      if (!ok) continue;
      for (size_t i = 0; i < n->numOutputs(); ++i)
        if (n->output(i)) n->output(i)->replaceAllUsesWith(first->output(i));
      g.erase(n);
      ctx.addMatch("merged_node");
      changed = true;
    }
    return changed;
  }
};

// cleanup: stable topological sort, then DCE (vLLM's PostCleanupPass).
class CleanupPass : public Pass {
 public:
  std::string_view name() const override { return "cleanup"; }
  std::string_view summary() const override { return "stable topological sort and dead-code elimination"; }
  bool run(ir::Graph& g, PassContext& ctx) override {
    std::vector<ir::Node*> before = g.nodeList();
    g.topoSort();
    size_t n = g.eliminateDeadCode();
    if (n) ctx.addMatch("dead_node", static_cast<int64_t>(n));
    return n > 0 || g.nodeList() != before;
  }
};

}  // namespace

std::unique_ptr<Pass> createDcePass() { return std::make_unique<DcePass>(); }
std::unique_ptr<Pass> createCsePass() { return std::make_unique<CsePass>(); }
std::unique_ptr<Pass> createCleanupPass() { return std::make_unique<CleanupPass>(); }

}  // namespace fxfuse::passes
