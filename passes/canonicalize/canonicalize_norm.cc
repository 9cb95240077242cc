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
  bool rewrite(ir::Graph& g, compiler::Rewriter& rw, ir::Node* rsqrt, PassContext& ctx, std::string* why) {
    // 1. The variance subtree, matched upwards from rsqrt's input.
    NormMatch nm;
    ir::Node* mean_node = nullptr;
    auto sq = m::OneOf({m::Op("aten.pow.Tensor_Scalar", {{"self", m::Any(&nm.x)}, {"exponent", m::Const(2)}}),
                        m::Op("aten.mul.Tensor", {{"self", m::Any(&nm.x)}, {"other", m::Same(&nm.x)}})});
    auto var = m::Op("aten.mean.dim", {{"self", sq}}).node(&mean_node);
    auto arg = m::Ops({"aten.add.Tensor", "aten.add.Scalar"}, {{"self", var}, {"other", m::Scalar(&nm.eps)}}).commutative();
    m::MatchState st;
    if (!arg.match(valueArg(*rsqrt, "self"), st)) {
      *why = "variance: " + st.failure();
      return false;
    }
    ir::Value* X = nm.x;
    if (X->type.dtype != ir::DType::F32) {
      *why = fmt::format("the normalization is computed in {}, not f32", ir::dtypeName(X->type.dtype));
      return false;
    }
    // mean over the last dim, keepdim.
    {
      const ir::Attr* dim = compiler::argOf(*mean_node, "dim");
      auto dims = dim ? dim->asIntList() : std::nullopt;
      const ir::Attr* kd = compiler::argOf(*mean_node, "keepdim");
      if (!dims || dims->size() != 1 || compiler::normDim((*dims)[0], X->type.rank()) !=
                                            static_cast<int64_t>(X->type.rank()) - 1) {
        *why = fmt::format("mean (node {}) is not over the last dimension", mean_node->name);
        return false;
      }
      if (!kd || kd->kind != ir::Attr::Kind::Bool || !kd->b) {
        *why = fmt::format("mean (node {}) does not keep the reduced dimension", mean_node->name);
        return false;
      }
      if (const ir::Attr* dt = compiler::argOf(*mean_node, "dtype"); dt && !dt->isNone()) {
        *why = "mean with an explicit dtype";
        return false;
      }
    }
    // 2. M = mul(X, rsqrt).
    ir::Node* M = nullptr;
    for (ir::Node* u : compiler::usersOf(rsqrt->output(0))) {
      if (u->target != "aten.mul.Tensor") continue;
      ir::Value* a = valueArg(*u, "self");
      ir::Value* b = valueArg(*u, "other");
      if ((a == X && b == rsqrt->output(0)) || (b == X && a == rsqrt->output(0))) {
        M = u;
        break;
      }
    }
    if (!M || !M->output(0)) {
      *why = "no mul(x, rsqrt(...)) user of the rsqrt";
      return false;
    }
    ir::Value* mv = M->output(0);
    // 3. The tail: optional cast to N, optional weight mul.
    ir::Value* root = mv;
    ir::DType N = ir::DType::F32;
    ir::Value* weight = nullptr;
    std::vector<ir::Node*> sources = {mean_node, rsqrt, M};
    auto weightMul = [&](ir::Value* v, ir::Value** w_out) -> ir::Node* {
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
    };
    auto isGemmaWeight = [&](ir::Value* w) {
      const ir::Node* p = w ? w->producer() : nullptr;
      if (!p || (p->target != "aten.add.Tensor" && p->target != "aten.add.Scalar")) return false;
      for (const char* k : {"self", "other"}) {
        const ir::Attr* a = compiler::argOf(*p, k);
        if (a && !a->isValue() && a->asDouble() && *a->asDouble() == 1.0) return true;
      }
      return false;
    };
    {
      auto users = compiler::usersOf(mv);
      ir::DType to;
      ir::Node* cast = (users.size() == 1 && mv->graphOutputUses() == 0 && compiler::castInput(*users[0], &to) == mv)
                           ? users[0]
                           : nullptr;
      ir::Value* w = nullptr;
      if (ir::Node* wm = weightMul(mv, &w); wm && isGemmaWeight(w)) {
        *why = fmt::format("gemma: weight applied as x * (1 + w) (node {}); a different op, left alone", wm->name);
        return false;
      }
      if (cast) {
        compiler::castInput(*cast, &N);
        root = cast->output(0);
        sources.push_back(cast);
        if (!root) return false;
        ir::Value* w2 = nullptr;
        if (ir::Node* wm = weightMul(root, &w2)) {
          if (isGemmaWeight(w2)) {
            *why = fmt::format("gemma: weight applied as x * (1 + w) (node {}); a different op, left alone", wm->name);
            return false;
          }
          if (weightOk(g, w2, root)) {
            weight = w2;
            root = wm->output(0);
            sources.push_back(wm);
          }
        }
      } else if (ir::Node* wm = weightMul(mv, &w)) {
        if (weightOk(g, w, mv)) {
          weight = w;
          root = wm->output(0);
          sources.push_back(wm);
        }
      }
    }
    // 4. The input side: plain, or a residual add.
    ir::Value* input = nullptr;
    ir::Value* residual = nullptr;
    bool rounded_sum = false;
    std::vector<ir::Value*> residual_outs;  // values replaced by residual_out
    ir::Node* add = X->producer();
    if (isPlainAdd(add) && X->type.dtype == ir::DType::F32) {
      // Native fused add: s = f32(x) + r (mixed, or both f32 widenings).
      ir::Value* a = valueArg(*add, "self");
      ir::Value* b = valueArg(*add, "other");
      if (a && b && a->isTensor() && b->isTensor() && sameFullShape(g, a, X) && sameFullShape(g, b, X)) {
        ir::Value* sa = compiler::stripWidening(a);
        ir::Value* sb = compiler::stripWidening(b);
        // The residual is the 16-bit operand (vLLM adds the D16 residual to the f32 input).
        if (a->type.dtype == ir::DType::F32 && ir::isHalf16(b->type.dtype)) {
          input = sa, residual = b;
        } else if (b->type.dtype == ir::DType::F32 && ir::isHalf16(a->type.dtype)) {
          input = sb, residual = a;
        } else if (ir::isHalf16(sa->type.dtype) && ir::isHalf16(sb->type.dtype)) {
          bool a_res = isFusedAddResidualOut(sa) || !isFusedAddResidualOut(sb);
          input = a_res ? sb : sa;
          residual = a_res ? sa : sb;
        }
        if (input) {
          for (ir::Node* u : compiler::usersOf(X)) {
            ir::DType to;
            if (compiler::castInput(*u, &to) == X && to == residual->type.dtype && u->output(0))
              residual_outs.push_back(u->output(0));
          }
          sources.insert(sources.begin(), add);
        }
      }
    } else if (X->producer()) {
      ir::DType to;
      ir::Value* t = compiler::castInput(*X->producer(), &to);
      ir::Node* add16 = t ? t->producer() : nullptr;
      if (t && ir::isHalf16(t->type.dtype) && isPlainAdd(add16)) {
        ir::Value* a = valueArg(*add16, "self");
        ir::Value* b = valueArg(*add16, "other");
        if (a && b && a->type.dtype == t->type.dtype && b->type.dtype == t->type.dtype && sameFullShape(g, a, t) &&
            sameFullShape(g, b, t)) {
          // transformers: hidden = residual + hidden (D16 add), then norm(f32(hidden)).
          bool b_res = isFusedAddResidualOut(b) && !isFusedAddResidualOut(a);
          residual = b_res ? b : a;
          input = b_res ? a : b;
          rounded_sum = true;
          residual_outs.push_back(t);
          sources.insert(sources.begin(), {add16, X->producer()});
        }
      }
    }
    ir::Value* out_value = root;
    if (!input) {
      // Plain RMSNorm.
      input = compiler::stripWidening(X);
      std::vector<Out> outs(1);
      outs[0].replaces = out_value;
      ir::Node* c = rw.create(compiler::fxfuseTarget("rms_norm"),
                              {A("input", V(input)), A("weight", V(weight)), A("epsilon", *nm.eps), A("norm_dtype", D(N))},
                              outs, rw.latest(sources), sources, "rms_norm");
      rw.replaceOutputs(c, outs);
      rw.eraseDead(sources);
      ctx.addMatch("rms_norm");
      ctx.applied("rms_norm", c, weight ? "native RMSNorm" : "native RMSNorm without weight");
      return true;
    }
    std::vector<Out> outs(2);
    outs[0].replaces = out_value;
    if (!residual_outs.empty()) outs[1].replaces = residual_outs[0];
    ir::Node* before = rw.latest(sources);
    for (ir::Value* v : residual_outs)
      if (v->producer() && std::find(sources.begin(), sources.end(), v->producer()) == sources.end())
        sources.push_back(v->producer());
    ir::Node* c = rw.create(compiler::fxfuseTarget("fused_add_rms_norm"),
                            {A("input", V(input)), A("residual", V(residual)), A("weight", V(weight)),
                             A("epsilon", *nm.eps), A("variance_of_rounded_sum", B(rounded_sum)), A("norm_dtype", D(N))},
                            outs, before, sources, "fused_add_rms_norm");
    rw.replaceOutputs(c, outs);
    for (size_t i = 1; i < residual_outs.size(); ++i) rw.replace(residual_outs[i], c->output(1));
    std::vector<ir::Node*> dead = sources;
    for (ir::Value* v : residual_outs)
      if (v->producer()) dead.push_back(v->producer());
    rw.eraseDead(dead);
    ctx.addMatch("fused_add_rms_norm");
    ctx.applied("fused_add_rms_norm", c,
                rounded_sum ? "residual add in the activation dtype + RMSNorm" : "native residual add (f32) + RMSNorm");
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
