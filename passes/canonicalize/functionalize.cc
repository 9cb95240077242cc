// functionalize: one functional form for every mutating call.
//
//   auto_functionalized_v2(op, _x_base_index=i, _all_bases=[b...], ...)  -> auto_functionalized(op, x=b_i, ...)
//     x a view of b_i (_x_slice_dim/start/end, or size/stride/offset of such a slice):
//       x = slice(b_i, d, s, e); x' = auto_functionalized(op, x=x, ...); b_i' = slice_scatter(b_i, x', d, s, e)
//     (several arguments may be disjoint slices of one base: the scatters are chained)
//   op(x!, ...)  (direct call; later uses read x)                         -> x' = auto_functionalized(op, x=x, ...)[k]
//   aten.add_.Tensor(self!, other)                                        -> aten.add.Tensor(self, other)
//   a mutation of a view v = view_k(..view_1(r)) whose storage is read later through another
//   alias: r' = scatter_1(r, ..scatter_k(view_{k-1}, v')) (select_scatter / slice_scatter, or
//   a reshape back for views that keep every element); later readers of r read r', older
//   views of r read later are made again on r'
//
// After this pass the graph has no mutation: later readers of a mutated value read the new
// value, and auto_functionalized v1 (outputs: the op's returns — one null slot for `-> ()`
// — then the new value of each mutable argument in schema order) is the only form of a
// mutating custom op. Cases that cannot be expressed exactly (mutation of a graph input,
// of a view other than select/slice/reshape whose storage is read later, of a list argument)
// are left alone and recorded.
#include <functional>
#include <map>
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

  // The view nodes between a mutated value and the storage it writes: v = view_k(...view_1(root)),
  // innermost first; empty when v is not a view.
  static std::vector<const ir::Node*> viewChain(const ir::Value* v) {
    std::vector<const ir::Node*> chain;
    for (const ir::Node* p = v->producer(); p && isViewLike(p->target);) {
      chain.push_back(p);
      v = compiler::valueArg(*p, "self");
      if (!v) break;
      p = v->producer();
    }
    return chain;
  }

  // A view whose new base can be written back from the view's new value.
  static bool isInvertibleView(const ir::Node& n) {
    return isFullReshape(n) || n.target == "aten.select.int" || n.target == "aten.slice.Tensor" ||
           n.target == "aten.unsqueeze.default" || n.target == "aten.squeeze.dim" || n.target == "aten.squeeze.dims" ||
           n.target == "aten.squeeze.default";
  }

  // Every value sharing storage with `root` through view nodes (root included).
  static std::vector<ir::Value*> aliasesOf(ir::Value* root) {
    std::vector<ir::Value*> out{root};
    for (size_t i = 0; i < out.size(); ++i)
      for (ir::Node* u : compiler::usersOf(out[i]))
        if (isViewLike(u->target) && compiler::valueArg(*u, "self") == out[i])
          for (ir::Value* o : u->outputs())
            if (o) out.push_back(o);
    return out;
  }

  // Is `v` read after node `at` (by a later node or as a graph output)?
  bool readLater(const ir::Value* v, const ir::Node* at) { return !laterUsers(v, at).empty() || v->graphOutputUses() > 0; }

  // How a mutation of `v` is written back: nothing more than "later readers of v read the new
  // value" (rebuild = false), or the storage's root is rebuilt from v's new value through
  // `chain` (v's views, innermost first; empty when v is the root) and every other alias of
  // the root that is read later is re-derived from the new root.
  struct WriteBack {
    bool rebuild = false;
    std::vector<const ir::Node*> chain;
    ir::Value* root = nullptr;
  };

  // Can the mutation of `v` by node `at` be expressed functionally? Returns an empty string
  // when yes, with *wb saying how.
  std::string checkMutable(ir::Value* v, const ir::Node* at, WriteBack* wb) {
    *wb = WriteBack{};
    if (v->isGraphInput()) return fmt::format("mutates graph input '{}'", v->name);
    std::vector<const ir::Node*> views = viewChain(v);
    ir::Value* root = views.empty() ? v : compiler::valueArg(*views.back(), "self");
    if (!root) return "mutates a view of an unknown base";
    bool seen_elsewhere = false;
    for (ir::Value* a : aliasesOf(root))
      if (a != v && readLater(a, at)) seen_elsewhere = true;
    if (!seen_elsewhere) return {};
    if (root->isGraphInput()) return fmt::format("mutates a view of graph input '{}'", root->name);
    for (const ir::Node* p : views)
      if (!isInvertibleView(*p) || p->numOutputs() != 1)
        return fmt::format("mutates a view ({}) whose base is read later", p->target);
    wb->rebuild = true;
    wb->chain = std::move(views);
    wb->root = root;
    return {};
  }

  bool functionalizeCall(ir::Graph& g, compiler::Rewriter& rw, ir::Node* n, const ir::OpSchema& s, PassContext& ctx) {
    std::vector<int> muts = s.mutableArgs();
    // Collect the mutated values and check each.
    std::vector<WriteBack> write_back(muts.size());
    for (size_t k = 0; k < muts.size(); ++k) {
      const ir::SchemaArg& sa = s.args[muts[k]];
      if (sa.is_list) {
        ctx.rejected("functionalize", n->name, fmt::format("mutable list argument '{}' is not supported", sa.name));
        return false;
      }
      const ir::Attr* a = argOf(*n, sa.name);
      if (!a || a->isNone()) continue;
      if (!a->isValue()) return false;
      std::string why = checkMutable(a->value, n, &write_back[k]);
      for (size_t j = 0; j < k && why.empty(); ++j)
        if (write_back[k].rebuild && write_back[j].rebuild && write_back[j].root == write_back[k].root)
          why = "two mutable arguments write one storage that is read later";
      if (!why.empty()) {
        ctx.rejected("functionalize", n->name, why);
        return false;
      }
    }
    bool is_aten = n->target.rfind("aten.", 0) == 0;
    if (is_aten) return functionalizeAtenInplace(g, rw, n, s, muts, write_back, ctx);

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
      writeBack(g, rw, v, nv, write_back[k], af);
    }
    std::string nm = n->name;
    g.erase(n);
    af->name = nm;
    ctx.addMatch("auto_functionalized");
    ctx.applied("functionalize", af, "direct call of " + compiler::shortTarget(af->args()[0].value.s));
    return true;
  }

  // After `at` wrote `nv` as the new value of `v`: later readers of v read nv and, when the
  // storage is read through other aliases, the root is rebuilt and those aliases re-derived:
  //
  //   r = f(..)  ─ select ─ slice ─ v ─ copy_(v, src)        root' = select_scatter(r, s', ..)
  //   r ─ later readers                       ==>   s' = slice_scatter(select(r), nv, ..)
  //                                                   later readers of r read root'; an older
  //                                                   view of r read later is re-made on root'
  void writeBack(ir::Graph& g, compiler::Rewriter& rw, ir::Value* v, ir::Value* nv, const WriteBack& wb,
                 ir::Node* at) {
    std::vector<ir::Value*> aliases = wb.rebuild ? aliasesOf(wb.root) : std::vector<ir::Value*>{};
    redirectLater(v, nv, at);
    if (!wb.rebuild) return;
    ir::Node* next = nodeAfter(g, at);
    ir::Value* cur = nv;
    for (const ir::Node* view : wb.chain) cur = invertView(rw, *view, cur, next, at);
    std::unordered_map<const ir::Value*, ir::Value*> remade{{wb.root, cur}};
    for (ir::Value* alias : aliases) {
      if (alias == v || !readLater(alias, at)) continue;
      const ir::Node* p = alias->producer();
      if (alias != wb.root && (!p || pos_.at(p) > pos_.at(at))) continue;  // made later: reads a re-made parent
      redirectLater(alias, remake(rw, alias, remade, next, at), at);
    }
  }

  static ir::TensorType freshType(const ir::TensorType& t) {
    ir::TensorType out = t;
    out.stride = ir::TensorType::contiguousStrides(t.shape);
    out.storage_offset = ir::SymExpr::integer(0);
    return out;
  }

  ir::Node* nodeAfter(ir::Graph& g, const ir::Node* at) {
    for (auto it = g.nodes().begin(); it != g.nodes().end(); ++it)
      if (it->get() == at) return ++it == g.nodes().end() ? nullptr : it->get();
    return nullptr;
  }

  ir::Node* createAfter(compiler::Rewriter& rw, const std::string& target, std::vector<ir::Arg> args,
                        const ir::TensorType& type, ir::Node* next, ir::Node* at, const std::string& hint) {
    std::vector<compiler::Rewriter::Out> outs(1);
    outs[0].type = type;
    ir::Node* n = rw.create(target, std::move(args), outs, next, {at}, hint);
    pos_[n] = pos_.at(at);
    return n;
  }

  // The new value of view's input, given the view's new value `nv`.
  ir::Value* invertView(compiler::Rewriter& rw, const ir::Node& view, ir::Value* nv, ir::Node* next, ir::Node* at) {
    ir::Value* in = compiler::valueArg(view, "self");
    auto copyArg = [&](const char* name) -> std::vector<ir::Arg> {
      const ir::Attr* a = argOf(view, name);
      return a ? std::vector<ir::Arg>{compiler::Rewriter::named(name, *a)} : std::vector<ir::Arg>{};
    };
    std::vector<ir::Arg> args{compiler::Rewriter::named("self", ir::Attr::ofValue(in)),
                              compiler::Rewriter::named("src", ir::Attr::ofValue(nv))};
    if (view.target == "aten.select.int" || view.target == "aten.slice.Tensor") {
      bool select = view.target == "aten.select.int";
      for (const char* k : select ? std::vector<const char*>{"dim", "index"}
                                  : std::vector<const char*>{"dim", "start", "end", "step"})
        for (auto& a : copyArg(k)) args.push_back(std::move(a));
      return createAfter(rw, select ? "aten.select_scatter.default" : "aten.slice_scatter.default", std::move(args),
                         freshType(in->type), next, at, select ? "select_scatter" : "slice_scatter")
          ->output(0);
    }
    // A view that keeps every element (reshape, unsqueeze, squeeze): reshape back.
    std::vector<ir::Attr> dims;
    for (const auto& d : in->type.shape) dims.push_back(ir::Attr::ofSym(d));
    return createAfter(rw, "aten.reshape.default",
                       {compiler::Rewriter::named("self", ir::Attr::ofValue(nv)),
                        compiler::Rewriter::named("shape", ir::Attr::ofList(std::move(dims)))},
                       freshType(in->type), next, at, "reshape")
        ->output(0);
  }

  // `alias` (a view of the rebuilt root) made again on the new root: its view chain cloned.
  ir::Value* remake(compiler::Rewriter& rw, ir::Value* alias, std::unordered_map<const ir::Value*, ir::Value*>& remade,
                    ir::Node* next, ir::Node* at) {
    if (auto it = remade.find(alias); it != remade.end()) return it->second;
    ir::Node* p = alias->producer();
    ir::Value* parent = remake(rw, compiler::valueArg(*p, "self"), remade, next, at);
    std::vector<ir::Arg> args = p->args();
    for (auto& a : args)
      if (a.value.isValue() && a.value.value == compiler::valueArg(*p, "self")) a.value = ir::Attr::ofValue(parent);
    std::vector<compiler::Rewriter::Out> outs(p->numOutputs());
    for (size_t i = 0; i < outs.size(); ++i)
      if (p->output(i)) outs[i].type = p->output(i)->type;
    ir::Node* c = rw.create(p->target, std::move(args), outs, next, {at}, p->name);
    pos_[c] = pos_.at(at);
    for (size_t i = 0; i < outs.size(); ++i)
      if (p->output(i)) remade[p->output(i)] = c->output(i);
    return remade.at(alias);
  }

  bool functionalizeAtenInplace(ir::Graph& g, compiler::Rewriter& rw, ir::Node* n, const ir::OpSchema& s,
                                const std::vector<int>& muts, const std::vector<WriteBack>& write_back,
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
    writeBack(g, rw, self, f->output(0), write_back[0], f);
    std::string nm = n->name;
    g.erase(n);
    f->name = nm;
    ctx.addMatch("inplace_op");
    ctx.applied("functionalize", f, "in-place " + s.target());
    return true;
  }

  // The view of its base a mutable auto_functionalized_v2 argument is: the whole base
  // (no view metadata, or `_x_alias`), or a slice of one dimension (`_x_slice_dim/start/end`,
  // or `_x_size/_stride/_storage_offset` that describe such a slice of the base).
  struct BaseView {
    bool whole = true;
    int64_t dim = 0;
    ir::SymExpr start, end;
  };
  static std::string viewOfBase(const std::function<const ir::Attr*(const std::string&)>& kw, const std::string& arg,
                                const ir::Value& base, BaseView* out) {
    auto opt = [&](const char* suffix) -> const ir::Attr* {
      const ir::Attr* a = kw("_" + arg + suffix);
      return a && !a->isNone() ? a : nullptr;
    };
    const auto& shape = base.type.shape;
    size_t rank = shape.size();
    if (const ir::Attr* al = opt("_alias"); al && al->asInt().value_or(0) != 0) return {};
    if (const ir::Attr* sd = opt("_slice_dim")) {
      auto d = sd->asInt();
      auto nd = d ? compiler::normDim(*d, rank) : std::nullopt;
      if (!nd) return "slice dimension out of range";
      out->whole = false;
      out->dim = *nd;
      const ir::Attr* ss = opt("_slice_start");
      const ir::Attr* se = opt("_slice_end");
      out->start = ss && ss->asSize() ? *ss->asSize() : ir::SymExpr::integer(0);
      out->end = se && se->asSize() ? *se->asSize() : shape[*nd];
      return normalizeSliceBounds(shape[*nd], out);
    }
    const ir::Attr* sz = opt("_size");
    if (!sz) return {};
    // size/stride/offset: a slice of one dim when the strides are the base's and the sizes
    // differ in at most one dim.
    const ir::Attr* st = opt("_stride");
    const ir::Attr* so = opt("_storage_offset");
    if (sz->kind != ir::Attr::Kind::List || sz->list.size() != rank || !st || st->kind != ir::Attr::Kind::List ||
        st->list.size() != rank || base.type.stride.size() != rank)
      return "a strided view that is not a slice of its base";
    ir::SymExpr offset = so && so->asSize() ? *so->asSize() : base.type.storage_offset;
    int differing = -1;
    for (size_t k = 0; k < rank; ++k) {
      auto size_k = sz->list[k].asSize();
      auto stride_k = st->list[k].asSize();
      if (!size_k || !stride_k || *stride_k != base.type.stride[k])
        return "a strided view that is not a slice of its base";
      if (*size_k != shape[k]) {
        if (differing >= 0) return "a strided view that is not a slice of its base";
        differing = static_cast<int>(k);
      }
    }
    ir::SymExpr rel = offset - base.type.storage_offset;
    if (differing < 0) {
      if (rel == ir::SymExpr::integer(0)) return {};
      return "a strided view that is not a slice of its base";
    }
    const ir::SymExpr& stride = base.type.stride[static_cast<size_t>(differing)];
    if (!stride.isInt() || stride.intValue() <= 0 || !rel.isInt() || rel.intValue() % stride.intValue() != 0)
      return "a strided view that is not a slice of its base";
    out->whole = false;
    out->dim = differing;
    out->start = ir::SymExpr::integer(rel.intValue() / stride.intValue());
    out->end = out->start + *sz->list[static_cast<size_t>(differing)].asSize();
    const ir::SymExpr& base_size = shape[static_cast<size_t>(differing)];
    const bool past_the_base = out->end.isInt() && base_size.isInt() && out->end.intValue() > base_size.intValue();
    if (past_the_base || !normalizeSliceBounds(base_size, out).empty())
      return "a strided view that is not a slice of its base";
    return {};
  }

  // Normalizes a slice [start, end) of a base dimension of `size` as torch's exports record it
  // and returns what is wrong with it (empty: nothing). An end past a dimension of known size,
  // or sys.maxsize ("to the end"), becomes the size, as aten.slice clamps it. A negative bound
  // or an end before the start is refused: torch records the bounds of a view that exists,
  // and the slice made from them would have a negative size.
  static std::string normalizeSliceBounds(const ir::SymExpr& size, BaseView* v) {
    if (compiler::isSliceToTheEnd(v->end) || (v->end.isInt() && size.isInt() && v->end.intValue() > size.intValue()))
      v->end = size;
    const bool start_known = v->start.isInt(), end_known = v->end.isInt();
    if ((start_known && v->start.intValue() < 0) || (end_known && v->end.intValue() < 0))
      return fmt::format("a slice with a negative bound ({}:{})", v->start.str(), v->end.str());
    const ir::SymExpr length = v->end - v->start;
    if (length.isInt() && length.intValue() < 0)
      return fmt::format("a slice that ends before it starts ({}:{})", v->start.str(), v->end.str());
    return {};
  }

  // The type of `base[..., start:end, ...]` (a view on base's storage).
  static ir::TensorType sliceType(const ir::Value& base, const BaseView& v) {
    ir::TensorType t = base.type;
    size_t d = static_cast<size_t>(v.dim);
    t.shape[d] = v.end - v.start;
    if (t.stride.size() != t.shape.size()) t.stride = ir::TensorType::contiguousStrides(base.type.shape);
    t.storage_offset = base.type.storage_offset + v.start * t.stride[d];
    return t;
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
    std::vector<BaseView> views(muts.size());
    std::vector<std::pair<size_t, size_t>> sliced;  // (position in nargs, mutable index k) of sliced arguments
    for (const auto& sa : s->args) {
      if (!sa.is_mutable) {
        if (const ir::Attr* a = kw(sa.name)) nargs.push_back(ir::Arg{sa.name, true, *a});
        continue;
      }
      size_t k = 0;
      while (muts[k] != s->argIndex(sa.name)) ++k;
      const ir::Attr* bi = kw("_" + sa.name + "_base_index");
      if (!bi || bi->isNone() || !bases || bases->kind != ir::Attr::Kind::List) {
        nargs.push_back(ir::Arg{sa.name, true, ir::Attr::none()});
        continue;
      }
      auto idx = bi->asInt();
      if (!idx || *idx < 0 || static_cast<size_t>(*idx) >= bases->list.size()) return false;
      const ir::Attr& base = bases->list[*idx];
      if (!base.isValue() || !base.value->isTensor()) return false;
      std::string why = viewOfBase(kw, sa.name, *base.value, &views[k]);
      if (!why.empty()) {
        ctx.rejected("functionalize", n->name, fmt::format("auto_functionalized_v2: argument '{}' is {}", sa.name, why));
        return false;
      }
      for (size_t j = 0; j < k; ++j)
        if (base_of_mut[j] == *idx && (views[j].whole || views[k].whole || views[j].dim != views[k].dim ||
                                       !disjoint(views[j], views[k]))) {
          ctx.rejected("functionalize", n->name,
                       "auto_functionalized_v2: two mutable arguments share one base and may overlap");
          return false;
        }
      base_of_mut[k] = static_cast<int>(*idx);
      if (!views[k].whole) sliced.push_back({nargs.size(), k});  // the argument is base[..., start:end]
      nargs.push_back(ir::Arg{sa.name, true, base});
    }
    // The slices are made only now that every mutable argument is accepted: a refusal above
    // leaves the graph unchanged (the pass reports no change).
    for (const auto& [pos, k] : sliced) {
      const ir::Attr& base = bases->list[base_of_mut[k]];
      std::vector<compiler::Rewriter::Out> vo(1);
      vo[0].type = sliceType(*base.value, views[k]);
      ir::Node* sl = rw.create("aten.slice.Tensor",
                               {compiler::Rewriter::named("self", base), compiler::Rewriter::named("dim", ir::Attr::ofInt(views[k].dim)),
                                compiler::Rewriter::named("start", ir::Attr::ofSym(views[k].start)),
                                compiler::Rewriter::named("end", ir::Attr::ofSym(views[k].end)),
                                compiler::Rewriter::named("step", ir::Attr::ofInt(1))},
                               vo, n, {n}, nargs[pos].name + "_view");
      pos_[sl] = pos_.at(n);
      nargs[pos].value = ir::Attr::ofValue(sl->output(0));
    }
    std::vector<compiler::Rewriter::Out> outs(nret + muts.size());
    for (size_t r = 0; r < nret && r < n->numOutputs(); ++r) outs[r].replaces = n->output(r);
    for (size_t k = 0; k < muts.size(); ++k) {
      if (base_of_mut[k] < 0) continue;
      size_t slot = nret + static_cast<size_t>(base_of_mut[k]);
      if (!views[k].whole) {
        // The new value of the slice: a fresh contiguous tensor of its shape.
        ir::TensorType t = sliceType(*bases->list[base_of_mut[k]].value, views[k]);
        t.stride = ir::TensorType::contiguousStrides(t.shape);
        t.storage_offset = ir::SymExpr::integer(0);
        outs[nret + k].type = t;
        continue;
      }
      if (slot < n->numOutputs() && n->output(slot)) outs[nret + k].replaces = n->output(slot);
    }
    ir::Node* v1 = rw.create(kAfV1, std::move(nargs), outs, n, {n}, n->name);
    pos_[v1] = pos_.at(n);
    rw.replaceOutputs(v1, outs);
    if (bases) scatterViewsIntoBases(rw, n, v1, nret, base_of_mut, views, *bases);  // none: nothing was a view
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

  // Slices of one dim whose [start, end) ranges are provably disjoint.
  static bool disjoint(const BaseView& a, const BaseView& b) {
    auto nonNegative = [](const ir::SymExpr& e) { return e.isInt() && e.intValue() >= 0; };
    return nonNegative(b.start - a.end) || nonNegative(a.start - b.end);
  }

  // The new value of a base whose mutable arguments were slices of it: the old base with each
  // slice's new value written back (slice_scatter, chained in argument order); uses of the
  // v2 node's base output read it.
  void scatterViewsIntoBases(compiler::Rewriter& rw, ir::Node* v2, ir::Node* v1, size_t nret,
                             const std::vector<int>& base_of_mut, const std::vector<BaseView>& views,
                             const ir::Attr& bases) {
    std::map<int, ir::Value*> current;  // base index -> its value so far
    for (size_t k = 0; k < views.size(); ++k) {
      if (base_of_mut[k] < 0 || views[k].whole) continue;
      int b = base_of_mut[k];
      ir::Value* old_base = current.count(b) ? current[b] : bases.list[b].value;
      std::vector<compiler::Rewriter::Out> so(1);
      so[0].type = bases.list[b].value->type;
      ir::Node* sc = rw.create(
          "aten.slice_scatter.default",
          {compiler::Rewriter::named("self", ir::Attr::ofValue(old_base)),
           compiler::Rewriter::named("src", ir::Attr::ofValue(v1->output(nret + k))),
           compiler::Rewriter::named("dim", ir::Attr::ofInt(views[k].dim)),
           compiler::Rewriter::named("start", ir::Attr::ofSym(views[k].start)),
           compiler::Rewriter::named("end", ir::Attr::ofSym(views[k].end)), compiler::Rewriter::named("step", ir::Attr::ofInt(1))},
          so, v2, {v2}, "slice_scatter");
      pos_[sc] = pos_.at(v2);
      current[b] = sc->output(0);
    }
    for (const auto& [b, v] : current) {
      size_t slot = nret + static_cast<size_t>(b);
      if (slot < v2->numOutputs() && v2->output(slot)) rw.replace(v2->output(slot), v);
    }
  }
};

}  // namespace

std::unique_ptr<Pass> createFunctionalizePass() { return std::make_unique<FunctionalizePass>(); }

}  // namespace fxfuse::passes
