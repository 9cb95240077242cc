// canonicalize-norm: decomposed RMSNorm (and the residual add before it) -> fxfuse.rms_norm /
// fxfuse.fused_add_rms_norm. Anchored at every `rsqrt`:
//
//   X:f32 ──┬─ pow(X,2)|mul(X,X) ─ mean([-1], keepdim) ─ add(·, eps) ─ rsqrt ─┐
//           └──────────────────────────────────────────────────────────── mul(X, ·) = M
//   M ─ cast(N) = C ─ mul(C, W) = out        (weighted, Llama/Qwen/Mistral/Phi, vLLM native)
//   M ─ cast(N) = out | M = out              (no weight; no cast when the model is fp32)
//
//   X = cast(x16, f32)                           -> rms_norm(x16, W, eps, norm_dtype=N)
//   X = add(f32(x), r16) (mixed, f32)            -> fused_add_rms_norm(x, r16, ...,
//       residual_out = cast(X, D16)                  variance_of_rounded_sum=false)
//   X = cast(t, f32), t = add(a16, b16)          -> fused_add_rms_norm(b, a, ...,
//       residual_out = t                             variance_of_rounded_sum=true)
//
// Gemma's `M * (1 + w)` is recognized and left alone (a different op). eps may be a number
// or a scalar graph input. Exactness of each rewrite: docs/canonical-ops.md.
#include <algorithm>

#include <fmt/format.h>

#include "passes/toolkit/match.h"
#include "passes/canonicalize/canonical_util.h"
#include "passes/passes.h"

namespace fxfuse::passes {
namespace {

using compiler::PassContext;
using compiler::valueArg;
namespace m = compiler::m;

struct NormMatch {
  ir::Value* x = nullptr;       // the f32 tensor normalized
  const ir::Attr* eps = nullptr;
  ir::Node* mean = nullptr;
};

// add(a, b) with alpha 1.
bool isPlainAdd(const ir::Node* n) {
  if (!n || n->target != "aten.add.Tensor") return false;
  auto alpha = compiler::numberArg(*n, "alpha");
  return !alpha || *alpha == 1.0;
}

bool isFusedAddResidualOut(const ir::Value* v) {
  const ir::Node* p = v ? v->producer() : nullptr;
  return p && (p->target == compiler::fxfuseTarget("fused_add_rms_norm") ||
               p->target == compiler::fxfuseTarget("fused_add_rms_norm_quant")) &&
         v->resultIndex() == 1;
}

class CanonicalizeNormPass : public Pass {
 public:
  std::string_view name() const override { return "canonicalize-norm"; }
  std::string_view summary() const override {
    return "decomposed RMSNorm / residual add + RMSNorm -> fxfuse.rms_norm / fxfuse.fused_add_rms_norm";
  }

  bool run(ir::Graph& g, PassContext& ctx) override {
    compiler::Rewriter rw(g);
    bool changed = false;
    for (ir::Node* n : g.nodeList()) {
      if (!rw.alive(n) || n->target != "aten.rsqrt.default") continue;
      std::string why;
      if (rewrite(g, rw, n, ctx, &why)) {
        changed = true;
      } else if (!why.empty()) {
        ctx.rejected(why.rfind("gemma", 0) == 0 ? "gemma_rms_norm" : "rms_norm", n->name, why);
      }
    }
    rw.finish();
    return changed;
  }

 private:
  // One site, filled stage by stage from the rsqrt outwards (the picture above).
  struct Site {
    NormMatch nm;
    ir::Node* mean_node = nullptr;
    ir::Value* X = nullptr;         // the f32 value normalized
    ir::Value* root = nullptr;      // the value the canonical op replaces
    ir::DType N = ir::DType::F32;   // norm_dtype: the cast after mul(X, rsqrt), else f32
    ir::Value* weight = nullptr;
    std::vector<ir::Node*> sources;
    ir::Value* input = nullptr;     // set with `residual` when a residual add feeds X
    ir::Value* residual = nullptr;
    bool rounded_sum = false;
    std::vector<ir::Value*> residual_outs;  // values replaced by residual_out
  };

  bool rewrite(ir::Graph& g, compiler::Rewriter& rw, ir::Node* rsqrt, PassContext& ctx, std::string* why) {
    Site s;
    if (!matchVariance(rsqrt, s, why) || !matchScaling(rsqrt, s, why) || !matchTail(g, s, why)) return false;
    matchResidualAdd(g, s);
    if (!s.input) return emitRmsNorm(rw, s, ctx);
    return emitFusedAddRmsNorm(rw, s, ctx);
  }

  // 1. The variance subtree, matched upwards from rsqrt's input: mean over the last dim,
  // keepdim, of X^2 in f32, plus eps.
  static bool matchVariance(ir::Node* rsqrt, Site& s, std::string* why) {
    auto sq = m::OneOf({m::Op("aten.pow.Tensor_Scalar", {{"self", m::Any(&s.nm.x)}, {"exponent", m::Const(2)}}),
                        m::Op("aten.mul.Tensor", {{"self", m::Any(&s.nm.x)}, {"other", m::Same(&s.nm.x)}})});
    auto var = m::Op("aten.mean.dim", {{"self", sq}}).node(&s.mean_node);
    auto arg = m::Ops({"aten.add.Tensor", "aten.add.Scalar"}, {{"self", var}, {"other", m::Scalar(&s.nm.eps)}}).commutative();
    m::MatchState st;
    if (!arg.match(valueArg(*rsqrt, "self"), st)) {
      *why = "variance: " + st.failure();
      return false;
    }
    s.X = s.nm.x;
    if (s.X->type.dtype != ir::DType::F32) {
      *why = fmt::format("the normalization is computed in {}, not f32", ir::dtypeName(s.X->type.dtype));
      return false;
    }
    const ir::Attr* dim = compiler::argOf(*s.mean_node, "dim");
    auto dims = dim ? dim->asIntList() : std::nullopt;
    const ir::Attr* kd = compiler::argOf(*s.mean_node, "keepdim");
    if (!dims || dims->size() != 1 ||
        compiler::normDim((*dims)[0], s.X->type.rank()) != static_cast<int64_t>(s.X->type.rank()) - 1) {
      *why = fmt::format("mean (node {}) is not over the last dimension", s.mean_node->name);
      return false;
    }
    if (!kd || kd->kind != ir::Attr::Kind::Bool || !kd->b) {
      *why = fmt::format("mean (node {}) does not keep the reduced dimension", s.mean_node->name);
      return false;
    }
    if (const ir::Attr* dt = compiler::argOf(*s.mean_node, "dtype"); dt && !dt->isNone()) {
      *why = "mean with an explicit dtype";
      return false;
    }
    return true;
  }

  // 2. M = mul(X, rsqrt): the normalized value.
  static bool matchScaling(ir::Node* rsqrt, Site& s, std::string* why) {
    ir::Node* M = nullptr;
    for (ir::Node* u : compiler::usersOf(rsqrt->output(0))) {
      if (u->target != "aten.mul.Tensor") continue;
      ir::Value* a = valueArg(*u, "self");
      ir::Value* b = valueArg(*u, "other");
      if ((a == s.X && b == rsqrt->output(0)) || (b == s.X && a == rsqrt->output(0))) {
        M = u;
        break;
      }
    }
    if (!M || !M->output(0)) {
      *why = "no mul(x, rsqrt(...)) user of the rsqrt";
      return false;
    }
    s.root = M->output(0);
    s.sources = {s.mean_node, rsqrt, M};
    return true;
  }

  // The single mul(v, w) user of `v` (w then in *w_out), or null.
  static ir::Node* weightMul(ir::Value* v, ir::Value** w_out) {
    auto users = compiler::usersOf(v);
    if (users.size() != 1 || v->graphOutputUses() > 0) return nullptr;
    ir::Node* u = users[0];
    if (u->target != "aten.mul.Tensor" || !u->output(0)) return nullptr;
    ir::Value* a = valueArg(*u, "self");
    ir::Value* b = valueArg(*u, "other");
    ir::Value* w = a == v ? b : (b == v ? a : nullptr);
    if (!w || w == v || !w->isTensor()) return nullptr;
    *w_out = w;
    return u;
  }

  // Gemma's weight: 1 + w.
  static bool isGemmaWeight(ir::Value* w) {
    const ir::Node* p = w ? w->producer() : nullptr;
    if (!p || (p->target != "aten.add.Tensor" && p->target != "aten.add.Scalar")) return false;
    for (const char* k : {"self", "other"}) {
      const ir::Attr* a = compiler::argOf(*p, k);
      if (a && !a->isValue() && a->asDouble() && *a->asDouble() == 1.0) return true;
    }
    return false;
  }

  // 3. The tail: an optional cast to N, then an optional weight mul (Gemma's 1 + w refused).
  static bool matchTail(ir::Graph& g, Site& s, std::string* why) {
    ir::Value* mv = s.root;
    auto users = compiler::usersOf(mv);
    ir::DType to;
    ir::Node* cast =
        (users.size() == 1 && mv->graphOutputUses() == 0 && compiler::castInput(*users[0], &to) == mv) ? users[0] : nullptr;
    auto gemma = [&](ir::Node* wm) {
      *why = fmt::format("gemma: weight applied as x * (1 + w) (node {}); a different op, left alone", wm->name);
      return false;
    };
    ir::Value* w = nullptr;
    if (ir::Node* wm = weightMul(mv, &w); wm && isGemmaWeight(w)) return gemma(wm);
    if (cast) {
      compiler::castInput(*cast, &s.N);
      s.root = cast->output(0);
      s.sources.push_back(cast);
      if (!s.root) return false;
      ir::Value* w2 = nullptr;
      if (ir::Node* wm = weightMul(s.root, &w2)) {
        if (isGemmaWeight(w2)) return gemma(wm);
        if (weightOk(g, w2, s.root)) {
          s.weight = w2;
          s.root = wm->output(0);
          s.sources.push_back(wm);
        }
      }
    } else if (ir::Node* wm = weightMul(mv, &w)) {
      if (weightOk(g, w, mv)) {
        s.weight = w;
        s.root = wm->output(0);
        s.sources.push_back(wm);
      }
    }
    return true;
  }

  // 4. The input side: X = add(f32(x), r16) (native fused add), or X = f32(add(a16, b16))
  // (transformers); sets input, residual and residual_outs, or leaves input null (plain).
  static void matchResidualAdd(ir::Graph& g, Site& s) {
    ir::Value* X = s.X;
    ir::Node* add = X->producer();
    if (isPlainAdd(add) && X->type.dtype == ir::DType::F32) {
      ir::Value* a = valueArg(*add, "self");
      ir::Value* b = valueArg(*add, "other");
      if (!a || !b || !a->isTensor() || !b->isTensor() || !sameFullShape(g, a, X) || !sameFullShape(g, b, X)) return;
      ir::Value* sa = compiler::stripWidening(a);
      ir::Value* sb = compiler::stripWidening(b);
      // The residual is the 16-bit operand (vLLM adds the D16 residual to the f32 input).
      if (a->type.dtype == ir::DType::F32 && ir::isHalf16(b->type.dtype)) {
        s.input = sa, s.residual = b;
      } else if (b->type.dtype == ir::DType::F32 && ir::isHalf16(a->type.dtype)) {
        s.input = sb, s.residual = a;
      } else if (ir::isHalf16(sa->type.dtype) && ir::isHalf16(sb->type.dtype)) {
        bool a_res = isFusedAddResidualOut(sa) || !isFusedAddResidualOut(sb);
        s.input = a_res ? sb : sa;
        s.residual = a_res ? sa : sb;
      }
      if (!s.input) return;
      for (ir::Node* u : compiler::usersOf(X)) {
        ir::DType to;
        if (compiler::castInput(*u, &to) == X && to == s.residual->type.dtype && u->output(0))
          s.residual_outs.push_back(u->output(0));
      }
      s.sources.insert(s.sources.begin(), add);
    } else if (X->producer()) {
      ir::DType to;
      ir::Value* t = compiler::castInput(*X->producer(), &to);
      ir::Node* add16 = t ? t->producer() : nullptr;
      if (!t || !ir::isHalf16(t->type.dtype) || !isPlainAdd(add16)) return;
      ir::Value* a = valueArg(*add16, "self");
      ir::Value* b = valueArg(*add16, "other");
      if (!a || !b || a->type.dtype != t->type.dtype || b->type.dtype != t->type.dtype || !sameFullShape(g, a, t) ||
          !sameFullShape(g, b, t))
        return;
      // transformers: hidden = residual + hidden (D16 add), then norm(f32(hidden)).
      bool b_res = isFusedAddResidualOut(b) && !isFusedAddResidualOut(a);
      s.residual = b_res ? b : a;
      s.input = b_res ? a : b;
      s.rounded_sum = true;
      s.residual_outs.push_back(t);
      s.sources.insert(s.sources.begin(), {add16, X->producer()});
    }
  }

  // Plain RMSNorm: rms_norm(x16, W, eps, norm_dtype) replaces the tail.
  static bool emitRmsNorm(compiler::Rewriter& rw, Site& s, PassContext& ctx) {
    ir::Value* input = compiler::stripWidening(s.X);
    std::vector<Out> outs(1);
    outs[0].replaces = s.root;
    ir::Node* c = rw.create(compiler::fxfuseTarget("rms_norm"),
                            {A("input", V(input)), A("weight", V(s.weight)), A("epsilon", *s.nm.eps), A("norm_dtype", D(s.N))},
                            outs, rw.latest(s.sources), s.sources, "rms_norm");
    rw.replaceOutputs(c, outs);
    rw.eraseDead(s.sources);
    ctx.addMatch("rms_norm");
    ctx.applied("rms_norm", c, s.weight ? "native RMSNorm" : "native RMSNorm without weight");
    return true;
  }

  // The residual add too: fused_add_rms_norm replaces the tail and every residual_out.
  static bool emitFusedAddRmsNorm(compiler::Rewriter& rw, Site& s, PassContext& ctx) {
    std::vector<Out> outs(2);
    outs[0].replaces = s.root;
    if (!s.residual_outs.empty()) outs[1].replaces = s.residual_outs[0];
    ir::Node* before = rw.latest(s.sources);
    for (ir::Value* v : s.residual_outs)
      if (v->producer() && std::find(s.sources.begin(), s.sources.end(), v->producer()) == s.sources.end())
        s.sources.push_back(v->producer());
    ir::Node* c = rw.create(compiler::fxfuseTarget("fused_add_rms_norm"),
                            {A("input", V(s.input)), A("residual", V(s.residual)), A("weight", V(s.weight)),
                             A("epsilon", *s.nm.eps), A("variance_of_rounded_sum", B(s.rounded_sum)), A("norm_dtype", D(s.N))},
                            outs, before, s.sources, "fused_add_rms_norm");
    rw.replaceOutputs(c, outs);
    for (size_t i = 1; i < s.residual_outs.size(); ++i) rw.replace(s.residual_outs[i], c->output(1));
    std::vector<ir::Node*> dead = s.sources;
    for (ir::Value* v : s.residual_outs)
      if (v->producer()) dead.push_back(v->producer());
    rw.eraseDead(dead);
    ctx.addMatch("fused_add_rms_norm");
    ctx.applied("fused_add_rms_norm", c,
                s.rounded_sum ? "residual add in the activation dtype + RMSNorm" : "native residual add (f32) + RMSNorm");
    return true;
  }

  static bool sameFullShape(ir::Graph& g, const ir::Value* a, const ir::Value* b) {
    return compiler::sameShape(*g.module(), a->type.shape, b->type.shape);
  }

  // The weight broadcasts along the last dim only: shape [H] (or [1, ..., H]).
  static bool weightOk(ir::Graph& g, const ir::Value* w, const ir::Value* normed) {
    if (!w->isTensor() || w->type.rank() == 0 || normed->type.rank() == 0) return false;
    const auto& ws = w->type.shape;
    for (size_t i = 0; i + 1 < ws.size(); ++i)
      if (!(ws[i].isInt() && ws[i].intValue() == 1)) return false;
    return compiler::sameShape(*g.module(), {ws.back()}, {normed->type.shape.back()});
  }
};

}  // namespace

std::unique_ptr<Pass> createCanonicalizeNormPass() { return std::make_unique<CanonicalizeNormPass>(); }

}  // namespace fxfuse::passes
