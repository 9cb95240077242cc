// canonicalize-activation: SiLU-and-mul -> fxfuse.silu_and_mul. Anchored at every `mul`:
//
//   h = silu(G) | cast(div(f32(G), add(exp(neg(f32(G))), 1)), dtype(G))
//       | cast(mul(f32(G), sigmoid(f32(G))), dtype(G))     (computed in f32; the sigmoid
//         form differs from the div form only by the f32 accuracy of exp/sigmoid)
//   out = mul(h, U)
//   G = slice(x, -1, 0, d), U = slice(x, -1, d, end), last(x) == 2d  -> silu_and_mul(x)
//     (d may be symbolic, s // 2: "s is even" is proved, or recorded as a module guard)
//   otherwise, shape(G) == shape(U)                                   -> silu_and_mul(G, up=U)
//
// `sigmoid(x) * x` computed in a 16-bit dtype is not rewritten: it rounds twice.
#include <fmt/format.h>

#include "passes/toolkit/match.h"
#include "passes/canonicalize/canonical_util.h"
#include "passes/passes.h"

namespace fxfuse::passes {
namespace {

using compiler::PassContext;
using compiler::valueArg;
namespace m = compiler::m;

// Matches a silu value; returns its gate input.
ir::Value* matchSilu(ir::Value* h, std::vector<ir::Node*>* nodes, std::string* why) {
  ir::Node* p = h ? h->producer() : nullptr;
  if (!p) return nullptr;
  if (p->target == "aten.silu.default") {
    nodes->push_back(p);
    return valueArg(*p, "self");
  }
  // Only a cast, a div or a mul can end the decomposed forms.
  if (!compiler::isCast(*p) && p->target != "aten.div.Tensor" && p->target != "aten.mul.Tensor") return nullptr;
  ir::Value* gf = nullptr;
  ir::Node *dv = nullptr, *ad = nullptr, *ex = nullptr, *ng = nullptr;
  auto denom = m::Ops({"aten.add.Tensor", "aten.add.Scalar"},
                     {{"self", m::Op("aten.exp.default", {{"self", m::Op("aten.neg.default", {{"self", m::Same(&gf)}}).node(&ng)}})
                                   .node(&ex)},
                      {"other", m::Const(1.0)}})
                   .commutative()
                   .node(&ad);
  auto core = m::Op("aten.div.Tensor", {{"self", m::Any(&gf)}, {"other", denom}}).node(&dv);
  m::MatchState st;
  ir::DType to = ir::DType::DTYPE_UNSPECIFIED;
  ir::Value* g = nullptr;
  ir::Node* cast = nullptr;
  if (m::Cast(core, std::nullopt, &to).node(&cast).match(h, st)) {
    g = compiler::stripWidening(gf);
    if (g->type.dtype != to) {
      *why = fmt::format("silu result is cast to {} but its input is {}", ir::dtypeName(to), ir::dtypeName(g->type.dtype));
      return nullptr;
    }
    nodes->insert(nodes->end(), {ng, ex, ad, dv, cast});
    if (gf->producer() && gf != g) nodes->push_back(gf->producer());
    return g;
  }
  m::MatchState st2;
  if (core.match(h, st2) && gf->type.dtype == ir::DType::F32) {
    nodes->insert(nodes->end(), {ng, ex, ad, dv});
    return gf;
  }
  // torch's decomposition of silu: f32(x) * sigmoid(f32(x)), then cast (core ATen).
  ir::Node *sg = nullptr, *ml = nullptr;
  gf = nullptr;
  auto sig = m::Op("aten.mul.Tensor", {{"self", m::Any(&gf)},
                                       {"other", m::Op("aten.sigmoid.default", {{"self", m::Same(&gf)}}).node(&sg)}})
                 .commutative()
                 .node(&ml);
  m::MatchState st3;
  cast = nullptr;
  if (m::Cast(sig, std::nullopt, &to).node(&cast).match(h, st3) && gf->type.dtype == ir::DType::F32) {
    g = compiler::stripWidening(gf);
    if (g->type.dtype != to) return nullptr;
    nodes->insert(nodes->end(), {sg, ml, cast});
    if (gf->producer() && gf != g) nodes->push_back(gf->producer());
    return g;
  }
  m::MatchState st4;
  gf = nullptr;
  if (sig.match(h, st4) && gf->type.dtype == ir::DType::F32 && h->type.dtype == ir::DType::F32) {
    nodes->insert(nodes->end(), {sg, ml});
    return gf;
  }
  return nullptr;
}

struct Slice {
  ir::Value* base = nullptr;
  ir::SymExpr start;                // 0 by default
  std::optional<ir::SymExpr> end;   // none: to the end
};

// A slice of the last dim with step 1; start/end may be symbolic (`s // 2`).
std::optional<Slice> lastDimSlice(ir::Value* v) {
  ir::Node* p = v ? v->producer() : nullptr;
  if (!p || p->target != "aten.slice.Tensor") return std::nullopt;
  Slice s;
  s.base = valueArg(*p, "self");
  if (!s.base) return std::nullopt;
  auto dim = compiler::intArg(*p, "dim");
  if (compiler::normDim(dim.value_or(0), s.base->type.rank()) != static_cast<int64_t>(s.base->type.rank()) - 1)
    return std::nullopt;
  auto step = compiler::intArg(*p, "step");
  if (step && *step != 1) return std::nullopt;
  const ir::Attr* st = compiler::argOf(*p, "start");
  const ir::Attr* en = compiler::argOf(*p, "end");
  if (st && !st->isNone()) {
    auto x = st->asSize();
    if (!x) return std::nullopt;
    s.start = *x;
  }
  if (en && !en->isNone()) {
    auto x = en->asSize();
    if (!x) return std::nullopt;
    if (!compiler::isSliceToTheEnd(*x)) s.end = *x;
  }
  return s;
}

// `gate = x[..., :d]`, `up = x[..., d:]` with the last dim F of x equal to 2d. With a
// symbolic F (d = F // 2), "F is even" is proved from the expression (F = 2*s) or the
// symbol's range (a single value), or else recorded as a guard on the module.
bool isPackedHalves(ir::Module& mod, const Slice& gs, const Slice& us, const std::string& site) {
  if (gs.base != us.base || gs.base->type.rank() == 0) return false;
  const ir::SymExpr full = gs.base->type.shape.back();
  const ir::SymExpr d = ir::floorDiv(full, ir::SymExpr::integer(2));
  auto eq = [&](const ir::SymExpr& a, const ir::SymExpr& b) { return a == b || mod.symbols.knownEqual(a, b); };
  bool g_ok = eq(gs.start, ir::SymExpr::integer(0)) && gs.end && eq(*gs.end, d);
  bool u_ok = eq(us.start, d) && (!us.end || eq(*us.end, full));
  if (!g_ok || !u_ok) return false;
  if (full.isInt()) return full.intValue() % 2 == 0;
  if (eq(d * ir::SymExpr::integer(2), full)) return true;  // proved: F = 2*(F//2)
  ir::SymExpr even = ir::SymExpr::apply(ir::SymExpr::Kind::Eq,
                                        {ir::SymExpr::apply(ir::SymExpr::Kind::Mod, {full, ir::SymExpr::integer(2)}),
                                         ir::SymExpr::integer(0)});
  mod.addGuard(even, fmt::format("silu_and_mul at {}: gate {} and up {} are the halves of {}", site, d.str(),
                                 (full - d).str(), full.str()));
  return true;
}

class CanonicalizeActivationPass : public Pass {
 public:
  std::string_view name() const override { return "canonicalize-activation"; }
  std::string_view summary() const override { return "SiLU(gate) * up (sliced or separate) -> fxfuse.silu_and_mul"; }

  bool run(ir::Graph& g, PassContext& ctx) override {
    compiler::Rewriter rw(g);
    bool changed = false;
    for (ir::Node* n : g.nodeList()) {
      if (!rw.alive(n) || n->target != "aten.mul.Tensor" || !n->output(0)) continue;
      ir::Value* a = valueArg(*n, "self");
      ir::Value* b = valueArg(*n, "other");
      if (!a || !b) continue;
      for (int swap = 0; swap < 2; ++swap) {
        ir::Value* h = swap ? b : a;
        ir::Value* u = swap ? a : b;
        std::vector<ir::Node*> nodes;
        std::string why;
        ir::Value* gate = matchSilu(h, &nodes, &why);
        if (!gate) {
          if (!why.empty()) ctx.rejected("silu_and_mul", n->name, why);
          continue;
        }
        if (rewrite(g, rw, n, gate, u, nodes, ctx)) {
          changed = true;
          break;
        }
      }
    }
    rw.finish();
    return changed;
  }

 private:
  bool rewrite(ir::Graph& g, compiler::Rewriter& rw, ir::Node* mul, ir::Value* gate, ir::Value* up,
               std::vector<ir::Node*> nodes, PassContext& ctx) {
    const ir::Module& mod = *g.module();
    std::vector<ir::Arg> args;
    auto gs = lastDimSlice(gate);
    auto us = lastDimSlice(up);
    bool packed = false;
    if (gs && us && isPackedHalves(*g.module(), *gs, *us, mul->name)) {
      packed = true;
      args = {A("input", V(gs->base))};
      nodes.push_back(gate->producer());
      nodes.push_back(up->producer());
    }
    if (!packed) {
      if (!compiler::sameShape(mod, gate->type.shape, up->type.shape) || !compiler::sameShape(mod, gate->type.shape, mul->output(0)->type.shape)) {
        ctx.rejected("silu_and_mul", mul->name, "gate and up have different shapes (broadcasting mul)");
        return false;
      }
      args = {A("input", V(gate)), A("up", V(up))};
    }
    nodes.push_back(mul);
    std::vector<Out> outs(1);
    outs[0].replaces = mul->output(0);
    ir::Node* c = rw.create(compiler::fxfuseTarget("silu_and_mul"), std::move(args), outs, mul, nodes, "silu_and_mul");
    rw.replaceOutputs(c, outs);
    rw.eraseDead(nodes);
    ctx.addMatch(packed ? "silu_and_mul" : "silu_mul_separate");
    ctx.applied("silu_and_mul", c, packed ? "silu(x[..., :d]) * x[..., d:]" : "silu(gate) * up");
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> createCanonicalizeActivationPass() { return std::make_unique<CanonicalizeActivationPass>(); }

}  // namespace fxfuse::passes
