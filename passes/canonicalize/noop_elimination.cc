// noop-elimination: removes shape/dtype operations that do nothing, deciding on the
// symbolic *shapes* of input and output (ir::SymbolTable::knownEqual), never on the
// arguments (vLLM #24880: `x[0:-1]` looks like `reshape(-1)` but drops a row).
//
//   reshape(reshape(x, a), b)            -> reshape(x, b)
//   reshape|view|slice|expand(x) : shape(x) -> x        (shapes statically equal)
//   slice_scatter(base, src) : shape(base) == shape(src) -> src
//   permute(x, [0..n-1]), transpose(x, d, d)            -> x
//   clone|alias|detach|contiguous|lift_fresh_copy(x)    -> x
//   convert|_to_copy|to(x, dtype(x))                    -> x
//   _assert_tensor_metadata(...)                        -> (erased)
//
// REQUIRES: a functional graph (functionalize), output types on nodes.
#include <unordered_set>

#include <fmt/format.h>

#include "passes/toolkit/op_util.h"
#include "passes/passes.h"

namespace fxfuse::passes {
namespace {

using compiler::PassContext;
using compiler::valueArg;

bool isReshape(const std::string& t) {
  return t == "aten.reshape.default" || t == "aten.view.default" || t == "aten._unsafe_view.default";
}

class NoopEliminationPass : public Pass {
 public:
  std::string_view name() const override { return "noop-elimination"; }
  std::string_view summary() const override {
    return "remove reshapes/slices/casts/copies whose output equals the input (symbolic shapes)";
  }

  bool run(ir::Graph& g, PassContext& ctx) override {
    const ir::Module& m = *g.module();
    bool changed = false;
    std::unordered_set<const ir::Node*> erased;  // a snapshot must not touch freed nodes
    auto erase = [&](ir::Node* x) {
      erased.insert(x);
      g.erase(x);
    };
    for (ir::Node* n : g.nodeList()) {
      if (erased.count(n)) continue;  // erased as a dead reshape in a chain
      const std::string& t = n->target;
      if (t == "aten._assert_tensor_metadata.default") {
        erase(n);
        ctx.addMatch("assert_tensor_metadata");
        changed = true;
        continue;
      }
      ir::Value* out = n->output(0);
      if (!out || !compiler::hasKnownType(out) || n->numOutputs() != 1) continue;
      ir::Value* in = nullptr;
      const char* what = nullptr;
      if (isReshape(t)) {
        in = valueArg(*n, "self");
        // Chain collapse: reshape(reshape(base)) -> reshape(base).
        if (in && in->producer() && isReshape(in->producer()->target) && t != "aten.view.default") {
          ir::Node* inner = in->producer();
          ir::Value* base = valueArg(*inner, "self");
          if (base && base->type.dtype == in->type.dtype) {
            n->replaceUsesOfWith(in, base);
            if (!inner->hasUsers()) {
              erase(inner);
              ctx.addMatch("reshape_chain");
            }
            changed = true;
            in = base;
          }
        }
        what = "reshape";
      } else if (t == "aten.slice.Tensor") {
        in = valueArg(*n, "self");
        what = "slice";
      } else if (t == "aten.expand.default" || t == "aten.squeeze.dim" || t == "aten.squeeze.dims" ||
                 t == "aten.squeeze.default" || t == "aten.unsqueeze.default") {
        in = valueArg(*n, "self");
        what = "expand_or_squeeze";
      } else if (t == "aten.slice_scatter.default") {
        ir::Value* base = valueArg(*n, "self");
        ir::Value* src = valueArg(*n, "src");
        if (base && src && compiler::hasKnownType(base) && compiler::hasKnownType(src) &&
            base->type.dtype == src->type.dtype && compiler::sameShape(m, base->type.shape, src->type.shape) &&
            compiler::sameShape(m, out->type.shape, src->type.shape)) {
          out->replaceAllUsesWith(src);
          erase(n);
          ctx.addMatch("slice_scatter");
          changed = true;
        }
        continue;
      } else if (t == "aten.permute.default") {
        auto dims = compiler::argOf(*n, "dims");
        auto list = dims ? dims->asIntList() : std::nullopt;
        in = valueArg(*n, "self");
        if (!list || !in) continue;
        bool identity = true;
        for (size_t i = 0; i < list->size(); ++i)
          if (compiler::normDim((*list)[i], list->size()) != static_cast<int64_t>(i)) identity = false;
        if (!identity) continue;
        what = "permute";
      } else if (t == "aten.transpose.int") {
        auto d0 = compiler::intArg(*n, "dim0"), d1 = compiler::intArg(*n, "dim1");
        in = valueArg(*n, "self");
        if (!in || !d0 || !d1 || compiler::normDim(*d0, in->type.rank()) != compiler::normDim(*d1, in->type.rank()))
          continue;
        what = "transpose";
      } else if (t == "aten.clone.default" || t == "aten.alias.default" || t == "aten.detach.default" ||
                 t == "aten.lift_fresh_copy.default" || t == "aten.contiguous.default") {
        in = valueArg(*n, "self");
        if (t == "aten.contiguous.default" && in && !in->type.isContiguous()) continue;
        what = "copy";
      } else if (compiler::isCast(*n)) {
        ir::DType to;
        in = compiler::castInput(*n, &to);
        if (!in || to != in->type.dtype) continue;
        what = "cast";
      } else {
        continue;
      }
      if (!in || !compiler::hasKnownType(in) || in->type.dtype != out->type.dtype) continue;
      if (!compiler::sameShape(m, in->type.shape, out->type.shape)) continue;
      out->replaceAllUsesWith(in);
      erase(n);
      ctx.addMatch(what);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> createNoopEliminationPass() { return std::make_unique<NoopEliminationPass>(); }

}  // namespace fxfuse::passes
