// functionalize: one functional form for every mutating call.
//
//   auto_functionalized_v2(op, _x_base_index=i, _all_bases=[b...], ...)  -> auto_functionalized(op, x=b_i, ...)
//   op(x!, ...)  (direct call; later uses read x)                         -> x' = auto_functionalized(op, x=x, ...)[k]
//   aten.add_.Tensor(self!, other)                                        -> aten.add.Tensor(self, other)
//
// After this pass the graph has no mutation: later readers of a mutated value read the new
// value, and auto_functionalized v1 (outputs: the op's returns — one null slot for `-> ()`
// — then the new value of each mutable argument in schema order) is the only form of a
// mutating custom op. Cases that cannot be expressed exactly (mutation of a graph input,
// of a partial view whose base is read later, of a list argument) are left alone and
// recorded.
#include <unordered_map>

#include <fmt/format.h>

#include "passes/toolkit/op_util.h"
#include "passes/toolkit/rewriter.h"
#include "passes/passes.h"

namespace fxfuse::passes {
namespace {

using compiler::argOf;
using compiler::PassContext;
using compiler::schemaOf;

constexpr const char* kAfV1 = "higher_order.auto_functionalized";
constexpr const char* kAfV2 = "higher_order.auto_functionalized_v2";

bool isViewLike(const std::string& t) {
  static const char* const kViews[] = {
      "aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.slice.Tensor",
      "aten.select.int", "aten.as_strided.default", "aten.permute.default", "aten.transpose.int", "aten.t.default",
      "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default", "aten.expand.default",
      "aten.alias.default", "aten.detach.default", "aten.split.Tensor", "aten.split_with_sizes.default",
      "aten.unbind.int", "aten.chunk.default",
  };
  for (const char* v : kViews)
    if (t == v) return true;
  return false;
}

bool isFullReshape(const ir::Node& n) {
  return n.target == "aten.view.default" || n.target == "aten.reshape.default" ||
         n.target == "aten._unsafe_view.default" || n.target == "aten.alias.default" ||
         n.target == "aten.detach.default";
}

size_t returnSlots(const ir::OpSchema& s) { return s.returns.empty() ? 1 : s.returns.size(); }

class FunctionalizePass : public Pass {
 public:
  std::string_view name() const override { return "functionalize"; }
  std::string_view summary() const override {
    return "auto_functionalized v2, direct mutating calls and in-place ops -> auto_functionalized v1 / functional ops";
  }

  bool run(ir::Graph& g, PassContext& ctx) override {
    pos_.clear();
    int64_t i = 0;
    for (auto& np : g.nodes()) pos_[np.get()] = i++;
    bool changed = false;
    compiler::Rewriter rw(g);
    for (ir::Node* n : g.nodeList()) {
      if (n->target == kAfV2) {
        changed |= v2ToV1(g, rw, n, ctx);
        continue;
      }
      if (n->kind != ir::NodeKind::Op) continue;
      const ir::OpSchema* s = schemaOf(*n);
      if (!s || s->mutableArgs().empty()) continue;
      changed |= functionalizeCall(g, rw, n, *s, ctx);
    }
    rw.finish();
    return changed;
  }

 private:
  std::unordered_map<const ir::Node*, int64_t> pos_;

  // Uses of `v` after node `at` (graph order), plus whether graph outputs use it.
  std::vector<ir::Node*> laterUsers(const ir::Value* v, const ir::Node* at) {
    std::vector<ir::Node*> out;
    int64_t p = pos_.at(at);
    for (ir::Node* u : compiler::usersOf(v)) {
      auto it = pos_.find(u);
      if (u != at && it != pos_.end() && it->second > p) out.push_back(u);
    }
    return out;
  }

  void redirectLater(ir::Value* old_v, ir::Value* new_v, const ir::Node* at) {
    for (ir::Node* u : laterUsers(old_v, at)) u->replaceUsesOfWith(old_v, new_v);
    if (old_v->graphOutputUses() > 0) {
      ir::Graph* g = old_v->graph();
      for (size_t i = 0; i < g->outputs().size(); ++i)
        if (g->outputs()[i].value == old_v) g->setOutputValue(i, new_v);
    }
  }

  // Can the mutation of `v` by node `at` be expressed as "later readers read the new value"?
  // Returns an empty string when yes; fills *base_fix with a (view node, base) pair when the
  // base of a full reshape view is read later.
  std::string checkMutable(const ir::Value* v, const ir::Node* at, const ir::Node** view_of_base) {
    *view_of_base = nullptr;
    if (v->isGraphInput()) return fmt::format("mutates graph input '{}'", v->name);
    const ir::Node* p = v->producer();
    if (p && isViewLike(p->target)) {
      ir::Value* base = compiler::valueArg(*p, "self");
      if (!base) return "mutates a view of an unknown base";
      if (laterUsers(base, at).empty() && base->graphOutputUses() == 0) return {};
      if (!isFullReshape(*p)) return fmt::format("mutates a partial view ({}) whose base is read later", p->target);
      if (base->isGraphInput()) return fmt::format("mutates a view of graph input '{}'", base->name);
      *view_of_base = p;
    }
    return {};
  }

  bool functionalizeCall(ir::Graph& g, compiler::Rewriter& rw, ir::Node* n, const ir::OpSchema& s, PassContext& ctx) {
    std::vector<int> muts = s.mutableArgs();
    // Collect the mutated values and check each.
    std::vector<const ir::Node*> view_fix(muts.size(), nullptr);
    for (size_t k = 0; k < muts.size(); ++k) {
      const ir::SchemaArg& sa = s.args[muts[k]];
      if (sa.is_list) {
        ctx.rejected("functionalize", n->name, fmt::format("mutable list argument '{}' is not supported", sa.name));
        return false;
      }
      const ir::Attr* a = argOf(*n, sa.name);
      if (!a || a->isNone()) continue;
      if (!a->isValue()) return false;
      std::string why = checkMutable(a->value, n, &view_fix[k]);
      if (!why.empty()) {
        ctx.rejected("functionalize", n->name, why);
        return false;
      }
    }
    bool is_aten = n->target.rfind("aten.", 0) == 0;
    if (is_aten) return functionalizeAtenInplace(g, rw, n, s, muts, view_fix, ctx);

    // Custom op -> auto_functionalized v1 with every argument by schema name.
    std::vector<ir::Arg> args;
    args.push_back(ir::Arg{"", false, ir::Attr::ofOp(n->target)});
    for (const auto& sa : s.args) {
      const ir::Attr* a = argOf(*n, sa.name);
      ir::Attr v = a ? *a : ir::Attr::none();
      if (!a && sa.default_value && *sa.default_value != "None") {
        // Keep defaults implicit: only pass what the call passed.
        continue;
      }
      args.push_back(ir::Arg{sa.name, true, v});
    }
    size_t nret = returnSlots(s);
    std::vector<compiler::Rewriter::Out> outs(nret + muts.size());
    for (size_t r = 0; r < n->numOutputs() && r < nret; ++r) outs[r].replaces = n->output(r);
    for (size_t k = 0; k < muts.size(); ++k) {
      ir::Value* v = compiler::valueArg(*n, s.args[muts[k]].name);
      if (v) outs[nret + k].type = v->type;
    }
    ir::Node* af = rw.create(kAfV1, std::move(args), outs, n, {n}, n->name);
    pos_[af] = pos_.at(n);
    rw.replaceOutputs(af, outs);
    for (size_t k = 0; k < muts.size(); ++k) {
      ir::Value* v = compiler::valueArg(*n, s.args[muts[k]].name);
      if (!v) continue;
      ir::Value* nv = af->output(nret + k);
      nv->name = v->name.empty() ? "" : v->name + "_new";
      redirectBaseAndValue(g, rw, v, nv, view_fix[k], af);
    }
    std::string nm = n->name;
    g.erase(n);
    af->name = nm;
    ctx.addMatch("auto_functionalized");
    ctx.applied("functionalize", af, "direct call of " + compiler::shortTarget(af->args()[0].value.s));
    return true;
  }

  void redirectBaseAndValue(ir::Graph& g, compiler::Rewriter& rw, ir::Value* v, ir::Value* nv,
                            const ir::Node* view_fix, ir::Node* at) {
    redirectLater(v, nv, at);
    if (!view_fix) return;
    ir::Value* base = compiler::valueArg(*view_fix, "self");
    // base' = reshape(v', base.shape)
    std::vector<ir::Attr> dims;
    for (const auto& d : base->type.shape) dims.push_back(ir::Attr::ofSym(d));
    std::vector<compiler::Rewriter::Out> outs(1);
    outs[0].type = base->type;
    ir::Node* r = rw.create("aten.reshape.default",
                            {ir::Arg{"self", false, ir::Attr::ofValue(nv)},
                             ir::Arg{"shape", false, ir::Attr::ofList(std::move(dims))}},
                            outs, nullptr, {}, "reshape");
    // Place right after `at`.
    auto it = at->graph()->nodes().begin();
    for (; it != at->graph()->nodes().end(); ++it)
      if (it->get() == at) break;
    ++it;
    g.moveBefore(r, it == g.nodes().end() ? nullptr : it->get());
    pos_[r] = pos_.at(at);
    redirectLater(base, r->output(0), at);
  }

  bool functionalizeAtenInplace(ir::Graph& g, compiler::Rewriter& rw, ir::Node* n, const ir::OpSchema& s,
                                const std::vector<int>& muts, const std::vector<const ir::Node*>& view_fix,
                                PassContext& ctx) {
    // aten.add_.Tensor -> aten.add.Tensor; aten.copy_.default -> aten.copy.default.
    if (muts.size() != 1 || s.args[muts[0]].name != "self") {
      ctx.rejected("functionalize", n->name, "in-place ATen op with several mutable arguments");
      return false;
    }
    std::string name = s.name;
    if (name.empty() || name.back() != '_') {
      ctx.rejected("functionalize", n->name, "out= variants are not supported");
      return false;
    }
    std::string functional = s.ns + "." + name.substr(0, name.size() - 1) + "." + s.overload;
    const ir::OpSchema* fs = schemaOf(g.module(), functional);
    if (!fs) {
      ctx.rejected("functionalize", n->name, "no functional counterpart " + functional + " in the op registry");
      return false;
    }
    ir::Value* self = compiler::valueArg(*n, "self");
    if (!self) return false;
    std::vector<ir::Arg> args;
    for (const auto& sa : s.args) {
      const ir::Attr* a = argOf(*n, sa.name);
      if (a) args.push_back(ir::Arg{sa.name, sa.kwarg_only, *a});
    }
    std::vector<compiler::Rewriter::Out> outs(1);
    if (n->output(0)) outs[0].replaces = n->output(0);
    else outs[0].type = self->type;
    ir::Node* f = rw.create(functional, std::move(args), outs, n, {n}, n->name);
    pos_[f] = pos_.at(n);
    rw.replaceOutputs(f, outs);
    redirectBaseAndValue(g, rw, self, f->output(0), view_fix[0], f);
    std::string nm = n->name;
    g.erase(n);
    f->name = nm;
    ctx.addMatch("inplace_op");
    ctx.applied("functionalize", f, "in-place " + s.target());
    return true;
  }

  bool v2ToV1(ir::Graph& g, compiler::Rewriter& rw, ir::Node* n, PassContext& ctx) {
    const auto& args = n->args();
    if (args.empty() || args[0].value.kind != ir::Attr::Kind::Op) return false;
    std::string op = args[0].value.s;
    const ir::OpSchema* s = schemaOf(g.module(), op);
    if (!s) {
      ctx.rejected("functionalize", n->name, "auto_functionalized_v2 of unknown op " + op);
      return false;
    }
    auto kw = [&](const std::string& k) -> const ir::Attr* {
      for (const auto& a : args)
        if (a.name == k) return &a.value;
      return nullptr;
    };
    const ir::Attr* bases = kw("_all_bases");
    std::vector<ir::Arg> nargs;
    nargs.push_back(args[0]);
    std::vector<int> muts = s->mutableArgs();
    size_t nret = returnSlots(*s);
    std::vector<int> base_of_mut(muts.size(), -1);
    for (const auto& sa : s->args) {
      if (!sa.is_mutable) {
        if (const ir::Attr* a = kw(sa.name)) nargs.push_back(ir::Arg{sa.name, true, *a});
        continue;
      }
      const ir::Attr* bi = kw("_" + sa.name + "_base_index");
      for (const char* suffix : {"_size", "_stride", "_storage_offset", "_slice_dim", "_slice_start", "_slice_end"}) {
        const ir::Attr* view = kw("_" + sa.name + suffix);
        if (view && !view->isNone()) {
          ctx.rejected("functionalize", n->name,
                       fmt::format("auto_functionalized_v2: argument '{}' is a view of its base", sa.name));
          return false;
        }
      }
      if (!bi || bi->isNone() || !bases || bases->kind != ir::Attr::Kind::List) {
        nargs.push_back(ir::Arg{sa.name, true, ir::Attr::none()});
        continue;
      }
      auto idx = bi->asInt();
      if (!idx || *idx < 0 || static_cast<size_t>(*idx) >= bases->list.size()) return false;
      size_t k = 0;
      while (muts[k] != s->argIndex(sa.name)) ++k;
      for (size_t j = 0; j < k; ++j)
        if (base_of_mut[j] == *idx) {
          ctx.rejected("functionalize", n->name, "auto_functionalized_v2: two mutable arguments share one base");
          return false;
        }
      base_of_mut[k] = static_cast<int>(*idx);
      nargs.push_back(ir::Arg{sa.name, true, bases->list[*idx]});
    }
    std::vector<compiler::Rewriter::Out> outs(nret + muts.size());
    for (size_t r = 0; r < nret && r < n->numOutputs(); ++r) outs[r].replaces = n->output(r);
    for (size_t k = 0; k < muts.size(); ++k) {
      if (base_of_mut[k] < 0) continue;
      size_t slot = nret + static_cast<size_t>(base_of_mut[k]);
      if (slot < n->numOutputs() && n->output(slot)) outs[nret + k].replaces = n->output(slot);
    }
    ir::Node* v1 = rw.create(kAfV1, std::move(nargs), outs, n, {n}, n->name);
    pos_[v1] = pos_.at(n);
    rw.replaceOutputs(v1, outs);
    for (ir::Value* o : n->outputs())
      if (o && o->numUses() > 0) {
        ctx.rejected("functionalize", n->name, "auto_functionalized_v2 output without a v1 counterpart is used");
        return true;
      }
    std::string nm = n->name;
    g.erase(n);
    v1->name = nm;
    ctx.addMatch("auto_functionalized_v2");
    ctx.applied("functionalize", v1, "auto_functionalized_v2 of " + compiler::shortTarget(op));
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> createFunctionalizePass() { return std::make_unique<FunctionalizePass>(); }

}  // namespace fxfuse::passes
