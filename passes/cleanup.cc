// Generic cleanups: dead-code elimination, common-subexpression elimination, and the
// post-fusion cleanup (stable topological sort + DCE, vLLM's PostCleanupPass).
#include <string>
#include <unordered_map>

#include "passes/toolkit/op_util.h"
#include "passes/toolkit/rewriter.h"
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

size_t attrHash(const ir::Attr& a) {
  size_t h = static_cast<size_t>(a.kind) * 0x9e3779b97f4a7c15ULL;
  auto mix = [&h](size_t x) { h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
  switch (a.kind) {
    case ir::Attr::Kind::Value: mix(std::hash<const void*>()(a.value)); break;
    case ir::Attr::Kind::Int: mix(std::hash<int64_t>()(a.i)); break;
    case ir::Attr::Kind::Float: mix(std::hash<double>()(a.f)); break;
    case ir::Attr::Kind::Bool: mix(a.b); break;
    case ir::Attr::Kind::DType: mix(static_cast<size_t>(a.dtype)); break;
    case ir::Attr::Kind::String:
    case ir::Attr::Kind::Op:
    case ir::Attr::Kind::SpecialFloat: mix(std::hash<std::string>()(a.s)); break;
    case ir::Attr::Kind::Sym: mix(a.sym->hash()); break;
    case ir::Attr::Kind::List:
      for (const auto& x : a.list) mix(attrHash(x));
      break;
    default: break;
  }
  return h;
}

bool attrEqual(const ir::Attr& a, const ir::Attr& b) {
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case ir::Attr::Kind::None: return true;
    case ir::Attr::Kind::Value: return a.value == b.value;
    case ir::Attr::Kind::Int: return a.i == b.i;
    case ir::Attr::Kind::Float: return a.f == b.f;
    case ir::Attr::Kind::Bool: return a.b == b.b;
    case ir::Attr::Kind::DType: return a.dtype == b.dtype;
    case ir::Attr::Kind::String:
    case ir::Attr::Kind::Op:
    case ir::Attr::Kind::SpecialFloat: return a.s == b.s;
    case ir::Attr::Kind::Device: return a.device == b.device;
    case ir::Attr::Kind::Layout: return a.layout == b.layout;
    case ir::Attr::Kind::MemoryFormat: return a.memory_format == b.memory_format;
    case ir::Attr::Kind::Sym: return *a.sym == *b.sym;
    case ir::Attr::Kind::List:
      if (a.list.size() != b.list.size()) return false;
      for (size_t i = 0; i < a.list.size(); ++i)
        if (!attrEqual(a.list[i], b.list[i])) return false;
      return true;
    default: return false;  // opaque, graph references: never merged
  }
}

bool sameNode(const ir::Node& a, const ir::Node& b) {
  if (a.target != b.target || a.args().size() != b.args().size() || a.numOutputs() != b.numOutputs()) return false;
  for (size_t i = 0; i < a.args().size(); ++i) {
    if (a.args()[i].name != b.args()[i].name || !attrEqual(a.args()[i].value, b.args()[i].value)) return false;
  }
  for (size_t i = 0; i < a.numOutputs(); ++i) {
    const ir::Value* x = a.output(i);
    const ir::Value* y = b.output(i);
    if (!x || !y) {
      if (y && !x) return false;  // b's used output must exist on a
      continue;
    }
    if (x->kind != y->kind || !(x->type == y->type)) return false;
  }
  return true;
}

// cse: merges pure nodes with the same target, arguments and output types.
//   f(a, b); f(a, b)  ->  f(a, b) used twice
class CsePass : public Pass {
 public:
  std::string_view name() const override { return "cse"; }
  std::string_view summary() const override { return "merge identical pure nodes (same target, arguments, output types)"; }
  bool run(ir::Graph& g, PassContext& ctx) override {
    std::unordered_map<size_t, std::vector<ir::Node*>> seen;
    seen.reserve(g.numNodes());
    std::vector<ir::Node*> merged;  // erased together at the end (linear; see Graph::erase)
    for (ir::Node* n : g.nodeList()) {
      if (cseExcluded(*n)) continue;
      size_t h = std::hash<std::string>()(n->target);
      for (const auto& a : n->args()) h = h * 31 + attrHash(a.value);
      auto& bucket = seen[h];
      ir::Node* first = nullptr;
      for (ir::Node* c : bucket)
        if (sameNode(*c, *n)) {
          first = c;
          break;
        }
      if (!first) {
        bucket.push_back(n);
        continue;
      }
      for (size_t i = 0; i < n->numOutputs(); ++i)
        if (n->output(i)) n->output(i)->replaceAllUsesWith(first->output(i));
      merged.push_back(n);
      ctx.addMatch("merged_node");
    }
    g.erase(merged);
    return !merged.empty();
  }
};

// cleanup: stable topological sort, then DCE (vLLM's PostCleanupPass).
class CleanupPass : public Pass {
 public:
  std::string_view name() const override { return "cleanup"; }
  std::string_view summary() const override { return "stable topological sort and dead-code elimination"; }
  bool run(ir::Graph& g, PassContext& ctx) override {
    bool reordered = false;
    if (!compiler::isTopologicallyOrdered(g)) {
      std::vector<ir::Node*> before = g.nodeList();
      g.topoSort();
      reordered = g.nodeList() != before;
    }
    size_t n = g.eliminateDeadCode();
    if (n) ctx.addMatch("dead_node", static_cast<int64_t>(n));
    return n > 0 || reordered;
  }
};

}  // namespace

std::unique_ptr<Pass> createDcePass() { return std::make_unique<DcePass>(); }
std::unique_ptr<Pass> createCsePass() { return std::make_unique<CsePass>(); }
std::unique_ptr<Pass> createCleanupPass() { return std::make_unique<CleanupPass>(); }

}  // namespace fxfuse::passes
