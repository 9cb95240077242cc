// canonicalize-quant: decomposed FP8 quantization -> fxfuse.quant_fp8. Anchored at every
// cast to float8_e4m3fn:
//
//   q = cast(clamp(mul(X, reciprocal(S)) | div(X, S), -448, 448), f8e4m3fn)
//   X = f32(x) | x                               (a D16 x promotes in the mul/div)
//
//   S one-element f32, not computed from x       -> quant_fp8(x, S, "static_tensor")
//   S = clamp_min(div(f32(unsqueeze(max.dim(abs(x), -1)[0] | amax(abs(x), [-1], keepdim))), 448), MIN_SCALE)
//                                                -> quant_fp8(x, None, "dynamic_token"), scale_out = S
//   S = ... max(abs(x)) (full reduction) ...     -> quant_fp8(x, None, "dynamic_tensor"), scale_out = S
//   X = view(x, [-1, H/g, g]), S per group, q followed by reshape(q, shape(x)), scale squeezed
//                                                -> quant_fp8(x, None, "dynamic_group", group_size=g)
//
// `divide` records reciprocal-multiply vs divide (not bit-identical). The clamp may be
// `clamp` or `clamp_min`+`clamp_max` in either order.
#include <fmt/format.h>

#include "passes/toolkit/match.h"
#include "ir/fxg.h"
#include "passes/canonicalize/canonical_util.h"
#include "passes/passes.h"

namespace fxfuse::passes {
namespace {

using compiler::PassContext;
using compiler::valueArg;
namespace m = compiler::m;

struct DynScale {
  ir::Value* x = nullptr;      // the tensor whose absmax is taken
  std::string kind;            // dynamic_token | dynamic_tensor
  int64_t group = 0;           // for groups: the last dim of x (a view)
  std::vector<ir::Node*> nodes;
};

// S = clamp_min(div(cast?(unsqueeze?(reduce(abs(x)))), 448), MIN_SCALE)
bool matchDynamicScale(ir::Value* s, DynScale* out, std::string* why) {
  ir::Value* absmax = nullptr;
  ir::Node *cmin = nullptr, *dv = nullptr;
  auto pat = m::OneOf({m::Op("aten.clamp_min.default",
                             {{"self", m::Op("aten.div.Tensor", {{"self", m::Any(&absmax)}, {"other", m::Const(compiler::kFp8Max)}})
                                           .node(&dv)},
                              {"min", m::Const(compiler::kFp8MinScale)}}),
                       m::Op("aten.clamp.default",
                             {{"self", m::Op("aten.div.Tensor", {{"self", m::Any(&absmax)}, {"other", m::Const(compiler::kFp8Max)}})
                                           .node(&dv)},
                              {"min", m::Const(compiler::kFp8MinScale)}})})
                 .node(&cmin);
  m::MatchState st;
  if (!pat.match(s, st)) {
    *why = st.failure();
    return false;
  }
  if (cmin->target == "aten.clamp.default") {
    const ir::Attr* mx = compiler::argOf(*cmin, "max");
    if (mx && !mx->isNone()) {
      *why = "dynamic scale clamp has an upper bound";
      return false;
    }
  }
  out->nodes = {dv, cmin};
  // Peel casts and unsqueeze(-1) down to the reduction.
  ir::Value* v = absmax;
  for (int i = 0; i < 4 && v && v->producer(); ++i) {
    ir::Node* p = v->producer();
    ir::DType to;
    if (ir::Value* in = compiler::castInput(*p, &to)) {
      out->nodes.push_back(p);
      v = in;
      continue;
    }
    if (p->target == "aten.unsqueeze.default") {
      out->nodes.push_back(p);
      v = valueArg(*p, "self");
      continue;
    }
    break;
  }
  ir::Node* red = v ? v->producer() : nullptr;
  if (!red) {
    *why = "dynamic scale: no absmax reduction";
    return false;
  }
  ir::Value* abs_v = valueArg(*red, "self");
  ir::Node* abs_n = abs_v ? abs_v->producer() : nullptr;
  if (!abs_n || abs_n->target != "aten.abs.default") {
    *why = fmt::format("dynamic scale: the reduction (node {}) is not over abs(x)", red->name);
    return false;
  }
  out->x = valueArg(*abs_n, "self");
  size_t rank = out->x ? out->x->type.rank() : 0;
  if (red->target == "aten.max.dim" && v->resultIndex() == 0) {
    auto dim = compiler::intArg(*red, "dim");
    if (!dim || compiler::normDim(*dim, rank) != static_cast<int64_t>(rank) - 1) {
      *why = "dynamic scale: max over a dimension other than the last";
      return false;
    }
    out->kind = "dynamic_token";
  } else if (red->target == "aten.amax.default") {
    const ir::Attr* d = compiler::argOf(*red, "dim");
    auto dims = d ? d->asIntList() : std::nullopt;
    if (!dims || dims->empty()) {
      out->kind = "dynamic_tensor";
    } else if (dims->size() == 1 && compiler::normDim((*dims)[0], rank) == static_cast<int64_t>(rank) - 1) {
      out->kind = "dynamic_token";
    } else {
      *why = "dynamic scale: amax over a dimension other than the last";
      return false;
    }
  } else if (red->target == "aten.max.default") {
    out->kind = "dynamic_tensor";
  } else {
    *why = fmt::format("dynamic scale: unexpected reduction {}", compiler::shortTarget(red->target));
    return false;
  }
  out->nodes.push_back(red);
  out->nodes.push_back(abs_n);
  return true;
}

class CanonicalizeQuantPass : public Pass {
 public:
  std::string_view name() const override { return "canonicalize-quant"; }
  std::string_view summary() const override { return "decomposed FP8 quantization -> fxfuse.quant_fp8"; }

  bool run(ir::Graph& g, PassContext& ctx) override {
    compiler::Rewriter rw(g);
    bool changed = false;
    for (ir::Node* n : g.nodeList()) {
      if (!rw.alive(n)) continue;
      ir::DType to;
      if (!compiler::castInput(*n, &to) || to != ir::DType::F8E4M3FN) continue;
      std::string why;
      if (rewrite(g, rw, n, ctx, &why)) changed = true;
      else if (!why.empty()) ctx.rejected("quant_fp8", n->name, why);
    }
    rw.finish();
    return changed;
  }

 private:
  bool rewrite(ir::Graph& g, compiler::Rewriter& rw, ir::Node* root, PassContext& ctx, std::string* why) {
    ir::Value *xf = nullptr, *s = nullptr;
    ir::Node *core = nullptr, *recip = nullptr;
    auto mulr = m::Op("aten.mul.Tensor", {{"self", m::Any(&xf)},
                                          {"other", m::Op("aten.reciprocal.default", {{"self", m::Any(&s)}}).node(&recip)}})
                    .commutative()
                    .node(&core);
    auto divs = m::Op("aten.div.Tensor", {{"self", m::Any(&xf)}, {"other", m::Any(&s)}}).node(&core);
    ir::Node* clamp_hi = nullptr;
    auto pat = m::Cast(m::Clamp(m::OneOf({mulr, divs}), -compiler::kFp8Max, compiler::kFp8Max).node(&clamp_hi),
                       ir::DType::F8E4M3FN);
    m::MatchState st;
    if (!pat.match(root->output(0), st)) {
      *why = st.failure();
      return false;
    }
    bool divide = core->target == "aten.div.Tensor";
    std::vector<ir::Node*> sources = {core, root};
    if (recip) sources.insert(sources.begin(), recip);
    // The clamp node(s).
    sources.push_back(clamp_hi);
    if (clamp_hi->target != "aten.clamp.default" && clamp_hi->target != "aten.clamp.Tensor")
      if (ir::Value* in = valueArg(*clamp_hi, "self"); in && in->producer()) sources.push_back(in->producer());
    if (!xf->isTensor() || !(xf->type.dtype == ir::DType::F32 || ir::isHalf16(xf->type.dtype))) {
      *why = "quantized value is not f32 or 16-bit";
      return false;
    }
    ir::Value* x = compiler::stripWidening(xf);
    if (x != xf && xf->producer()) sources.insert(sources.begin(), xf->producer());
    DynScale dyn;
    std::string dyn_why;
    bool is_dyn = matchDynamicScale(s, &dyn, &dyn_why);
    if (is_dyn && compiler::stripWidening(dyn.x) != x && dyn.x != xf) {
      *why = "dynamic scale is computed from a different tensor than the one quantized";
      return false;
    }
    std::vector<Out> outs(2);
    outs[0].replaces = root->output(0);
    std::vector<ir::Arg> args;
    const char* counter = "static_tensor";
    if (is_dyn) {
      ir::Node* view = x->producer();
      bool grouped = false;
      // Group quant: x is a [.., H/g, g] view of the real input, q reshaped back.
      if (view && (view->target == "aten.view.default" || view->target == "aten.reshape.default") &&
          dyn.kind == "dynamic_token") {
        ir::Value* base = valueArg(*view, "self");
        auto users = compiler::usersOf(root->output(0));
        auto g_size = compiler::lastDim(x);
        if (base && g_size && x->type.rank() == base->type.rank() + 1 && users.size() == 1 &&
            root->output(0)->graphOutputUses() == 0 &&
            (users[0]->target == "aten.view.default" || users[0]->target == "aten.reshape.default" ||
             users[0]->target == "aten._unsafe_view.default") &&
            users[0]->output(0) && compiler::sameShape(*g.module(), users[0]->output(0)->type.shape, base->type.shape)) {
          // Scale output: squeeze(S, -1).
          ir::Value* scale_out = nullptr;
          for (ir::Node* u : compiler::usersOf(s)) {
            if (u == core) continue;
            if ((u->target == "aten.squeeze.dim" || u->target == "aten.view.default" ||
                 u->target == "aten.reshape.default") &&
                u->output(0) && u->output(0)->type.rank() == base->type.rank())
              scale_out = u->output(0);
            else {
              *why = "group quant: the per-group scale has an unexpected user";
              return false;
            }
          }
          grouped = true;
          outs[0].replaces = users[0]->output(0);
          outs[1].replaces = scale_out;
          sources.push_back(users[0]);
          if (scale_out) sources.push_back(scale_out->producer());
          x = base;
          args = {A("input", V(x)), A("scale", ir::Attr::none()), A("kind", S("dynamic_group")), A("group_size", I(*g_size)),
                  A("divide", B(divide))};
          counter = "dynamic_group";
        }
      }
      if (!grouped) {
        outs[1].replaces = s;
        args = {A("input", V(x)), A("scale", ir::Attr::none()), A("kind", S(dyn.kind)), A("divide", B(divide))};
        counter = dyn.kind == "dynamic_token" ? "dynamic_token" : "dynamic_tensor";
      }
      sources.insert(sources.begin(), dyn.nodes.rbegin(), dyn.nodes.rend());
    } else {
      if (!s->isTensor() || s->type.dtype != ir::DType::F32 || compiler::constNumel(s).value_or(0) != 1) {
        *why = fmt::format("static scale is not a one-element f32 tensor ({}); dynamic scale: {}",
                           s->isTensor() ? ir::typeStr(*s) : std::string("not a tensor"), dyn_why);
        return false;
      }
      args = {A("input", V(x)), A("scale", V(s)), A("kind", S("static_tensor")), A("divide", B(divide))};
    }
    ir::Node* c = rw.create(compiler::fxfuseTarget("quant_fp8"), std::move(args), outs, rw.latest(sources), sources,
                            "quant_fp8");
    rw.replaceOutputs(c, outs);
    rw.eraseDead(sources);
    ctx.addMatch(counter);
    ctx.applied("quant_fp8", c, std::string("native ") + counter + (divide ? " (divide)" : ""));
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> createCanonicalizeQuantPass() { return std::make_unique<CanonicalizeQuantPass>(); }

}  // namespace fxfuse::passes
