// The four fusion families, on canonical ops, in vLLM's priority order. Every candidate
// site gets a Decision: applied, or the first failing check.
//
// allreduce-rmsnorm-fusion (world size 2/4/8, size cap):
//   all_reduce(x) = a ─ rms_norm(a) | fused_add_rms_norm(a, r) = n [─ quant_fp8(n, s, static)]
//     -> all_reduce_rms_norm[_quant](x, r?, w, eps, [s], world_size)
//        outputs (n | q, residual_out) where residual_out = a for the plain norm
//
// rmsnorm-quant-fusion (fused-add first, so no residual add is left behind):
//   fused_add_rms_norm(x, r) = (n, r') ─ quant_fp8(n, ...)  -> fused_add_rms_norm_quant -> (q, r', s)
//   rms_norm(x) = n ─ quant_fp8(n, ...)                     -> rms_norm_quant           -> (q, s)
//   quant kinds: static_tensor, dynamic_token, dynamic_group (no fused dynamic_tensor kernel)
//
// silu-mul-quant-fusion:
//   silu_and_mul(x) = h ─ quant_fp8(h, s, static)            -> silu_and_mul_quant(x, s)
//
// attention-quant-fusion:
//   attention(q, k, v) = o [─ reshape] ─ quant_fp8(·, s, static) -> attention_quant(q, k, v, s) [─ reshape]
//
// Checks (not graph shape): 16-bit input; weight dtype == input dtype (vLLM #48324);
// the intermediate has no other users; static scale is a one-element f32; hidden size
// alignment; reciprocal-multiply scale application where the fused op defines it.
#include <fmt/format.h>

#include "passes/toolkit/options.h"
#include "ir/fxg.h"
#include "ir/lifted_scalar.h"
#include "passes/canonicalize/canonical_util.h"
#include "passes/passes.h"

namespace fxfuse::passes {
namespace {

using compiler::PassContext;

bool isFx(const ir::Node* n, const char* name) { return n && n->target == compiler::fxfuseTarget(name); }

ir::Value* in0(const ir::Node& n, const char* name) {
  const ir::Attr* a = fxArg(n, name);
  return (a && a->isValue()) ? a->value : nullptr;
}

// The single user of `v` if it is a quant_fp8 reading `v` as its input.
ir::Node* onlyQuantUser(ir::Value* v, std::string* why) {
  if (!v) return nullptr;
  auto users = compiler::usersOf(v);
  ir::Node* q = nullptr;
  for (ir::Node* u : users)
    if (isFx(u, "quant_fp8") && in0(*u, "input") == v) q = u;
  if (!q) {
    *why = "not followed by an FP8 quant";
    return nullptr;
  }
  if (users.size() != 1 || v->graphOutputUses() > 0 || v->users().size() != 1) {
    *why = fmt::format("the intermediate has {} other use(s) besides the quant", v->numUses() - 1);
    return nullptr;
  }
  return q;
}

std::string dt(ir::DType d) { return std::string(ir::dtypeName(d)); }

// Common checks of a norm feeding a fused kernel. Empty string = OK.
std::string checkNorm(const ir::Node& norm, ir::Value* input, const compiler::CompileOptions& opts) {
  if (!input || !ir::isHalf16(input->type.dtype))
    return fmt::format("input dtype is {}, the fused kernel takes f16/bf16", input ? dt(input->type.dtype) : "?");
  ir::Value* w = in0(norm, "weight");
  if (!w) return "the norm has no weight";
  if (w->type.dtype != input->type.dtype)
    return fmt::format("weight dtype {} != input dtype {} (vLLM #48324)", dt(w->type.dtype), dt(input->type.dtype));
  const ir::Attr* nd = fxArg(norm, "norm_dtype");
  if (nd && nd->kind == ir::Attr::Kind::DType && nd->dtype != input->type.dtype)
    return fmt::format("normalized value is rounded to {}, not the input dtype {}", dt(nd->dtype), dt(input->type.dtype));
  if (norm.output(0) && norm.output(0)->type.dtype != input->type.dtype)
    return fmt::format("norm output dtype {} != input dtype {}", dt(norm.output(0)->type.dtype), dt(input->type.dtype));
  if (ir::Value* r = in0(norm, "residual"); r && r->type.dtype != input->type.dtype)
    return fmt::format("residual dtype {} != input dtype {}", dt(r->type.dtype), dt(input->type.dtype));
  const ir::Attr* eps = fxArg(norm, "epsilon");
  if (opts.vllm_eps_only) {
    auto e = eps ? eps->asDouble() : std::nullopt;
    if (!e && eps && eps->isValue()) {  // a lifted scalar: its recorded / --const value
      e = ir::liftedScalarValue(eps->value);
      if (ir::Value* in = ir::liftedScalarSource(eps->value); in && !e)
        return "eps (vLLM-compatible mode): " + ir::constFlagHint(*in);
    }
    if (!e || !(compiler::approxEqual(*e, 1e-5) || compiler::approxEqual(*e, 1e-6)))
      return "eps is not 1e-5 or 1e-6 (vLLM-compatible mode)";
  }
  return {};
}

std::string checkStaticScale(const ir::Node& quant) {
  ir::Value* s = in0(quant, "scale");
  if (!s || s->type.dtype != ir::DType::F32 || compiler::constNumel(s).value_or(0) != 1)
    return fmt::format("scale is not a one-element f32 tensor ({})", s ? ir::typeStr(*s) : "none");
  return {};
}

void copyQuantAttrs(const ir::Node& quant, std::vector<ir::Arg>& args, bool with_scale) {
  for (const char* k : {"scale", "kind", "group_size", "column_major_scales", "scale_ub", "divide", "min_abs",
                        "min_scale", "scale_ue8m0"}) {
    if (!with_scale && std::string(k) == "scale") continue;
    if (const ir::Attr* a = fxArg(quant, k)) args.push_back(A(k, *a));
  }
}

void copyNormAttrs(const ir::Node& norm, std::vector<ir::Arg>& args, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (const ir::Attr* a = fxArg(norm, k)) args.push_back(A(k, *a));
}

// ------------------------------------------------------------------ allreduce + rmsnorm

class AllReduceRmsNormFusion : public Pass {
 public:
  std::string_view name() const override { return "allreduce-rmsnorm-fusion"; }
  std::string_view summary() const override {
    return "all_reduce + (fused_add_)rms_norm (+ static quant_fp8) -> all_reduce_rms_norm[_quant]";
  }

  bool run(ir::Graph& g, PassContext& ctx) override {
    compiler::Rewriter rw(g);
    bool changed = false;
    for (ir::Node* ar : g.nodeList()) {
      if (!rw.alive(ar) || !isFx(ar, "all_reduce")) continue;
      std::string why = tryFuse(g, rw, ar, ctx);
      if (!why.empty()) ctx.rejected("all_reduce_rms_norm", ar->name, why);
      else changed = true;
    }
    rw.finish();
    return changed;
  }

 private:
  std::string tryFuse(ir::Graph& g, compiler::Rewriter& rw, ir::Node* ar, PassContext& ctx) {
    const auto& opts = ctx.options();
    ir::Value* a = ar->output(0);
    ir::Value* x = in0(*ar, "input");
    if (!a || !x) return "all_reduce result unused";
    ir::Node* norm = nullptr;
    for (ir::Node* u : compiler::usersOf(a))
      if ((isFx(u, "rms_norm") || isFx(u, "fused_add_rms_norm")) && in0(*u, "input") == a) norm = u;
    if (!norm) return "not followed by an RMSNorm of its result";
    int ws = opts.world_size;
    if (ws != 2 && ws != 4 && ws != 8) return fmt::format("world size {} is not 2, 4 or 8", ws);
    if (std::string c = checkNorm(*norm, a, opts); !c.empty()) return c;
    bool fused_add = isFx(norm, "fused_add_rms_norm");
    if (fused_add && !compiler::onlyUsedBy(a, norm)) return "the all-reduce result has other users besides the norm";
    auto h = compiler::lastDim(a);
    if (!h) return "hidden size is not static";
    if (*h <= 0) return fmt::format("hidden size {} is not positive", *h);
    if (*h % 8 != 0) return fmt::format("hidden size {} is not a multiple of 8 (16-byte vectors)", *h);
    // Size cap: T * H * element size <= cap (divided in two steps: H * element size may overflow).
    int64_t elem = ir::dtypeBytes(a->type.dtype);
    if (elem <= 0) return "the all-reduce dtype has no byte size";
    auto cap_it = opts.allreduce_max_bytes.find(ws);
    int64_t cap = cap_it == opts.allreduce_max_bytes.end() ? 0 : cap_it->second;
    int64_t max_tokens = cap / elem / *h;
    if (max_tokens <= 0) return fmt::format("size cap {} bytes is smaller than one token", cap);
    ir::SymExpr tokens = ir::SymExpr::integer(1);
    for (size_t i = 0; i + 1 < a->type.rank(); ++i) tokens = tokens * a->type.shape[i];
    auto range = g.module()->symbols.range(tokens);
    std::string note;
    if (tokens.isInt()) {
      if (tokens.intValue() > max_tokens)
        return fmt::format("{} tokens x {} x {} B exceed the world-size-{} cap of {} bytes (max {} tokens)",
                           tokens.intValue(), *h, elem, ws, cap, max_tokens);
    } else if (range.lo && *range.lo > max_tokens) {
      return fmt::format("at least {} tokens exceed the world-size-{} cap of {} bytes (max {} tokens)", *range.lo, ws,
                         cap, max_tokens);
    } else if (!range.hi || *range.hi > max_tokens) {
      note = fmt::format("; batches above {} tokens fall back to the unfused ops at run time", max_tokens);
    }
    // Optional static quant of the normed output.
    std::string qwhy;
    ir::Node* quant = onlyQuantUser(norm->output(0), &qwhy);
    if (quant && (fxString(*quant, "kind") != "static_tensor" || !checkStaticScale(*quant).empty())) quant = nullptr;
    std::vector<ir::Arg> args = {A("input", V(x)), A("residual", V(fused_add ? in0(*norm, "residual") : nullptr)),
                                 A("weight", V(in0(*norm, "weight")))};
    copyNormAttrs(*norm, args, {"epsilon"});
    if (quant) args.push_back(A("scale", V(in0(*quant, "scale"))));
    args.push_back(A("world_size", I(ws)));
    args.push_back(A("group_name", fxArg(*ar, "group_name") ? *fxArg(*ar, "group_name") : S("")));
    copyNormAttrs(*norm, args, {"variance_of_rounded_sum", "norm_dtype"});
    if (quant) copyNormAttrs(*quant, args, {"divide"});
    args.push_back(A("max_token_num", I(note.empty() ? 0 : max_tokens)));
    std::vector<Out> outs(2);
    outs[0].replaces = quant ? quant->output(0) : norm->output(0);
    outs[1].replaces = fused_add ? norm->output(1) : a;
    if (!outs[1].replaces || outs[1].replaces->numUses() == 0) {
      outs[1].replaces = nullptr;
      outs[1].type = a->type;  // keep the slot typed: the allreduce result / new residual
    }
    std::vector<ir::Node*> sources = {ar, norm};
    if (quant) sources.push_back(quant);
    std::string fusion = quant ? "all_reduce_rms_norm_quant" : "all_reduce_rms_norm";
    ir::Node* c = rw.create(compiler::fxfuseTarget(fusion), std::move(args), outs, rw.latest(sources), sources, fusion);
    rw.replaceOutputs(c, outs);
    rw.eraseDead({quant ? quant : norm, norm, ar});
    ctx.addMatch(fusion);
    ctx.applied(fusion, c,
                fmt::format("world size {}{}{}", ws, fused_add ? ", with residual add" : ", no residual", note));
    return {};
  }
};

// ------------------------------------------------------------------ rmsnorm + quant

class RmsNormQuantFusion : public Pass {
 public:
  std::string_view name() const override { return "rmsnorm-quant-fusion"; }
  std::string_view summary() const override {
    return "(fused_add_)rms_norm + quant_fp8 (static, per-token, per-group) -> (fused_add_)rms_norm_quant";
  }

  bool run(ir::Graph& g, PassContext& ctx) override {
    compiler::Rewriter rw(g);
    bool changed = false;
    // Fused-add first: the plain pattern is a subgraph of the fused-add one.
    for (const char* kind : {"fused_add_rms_norm", "rms_norm"}) {
      for (ir::Node* n : g.nodeList()) {
        if (!rw.alive(n) || !isFx(n, kind)) continue;
        std::string pattern = std::string(kind) + "_quant";
        std::string why = tryFuse(g, rw, n, kind == std::string("fused_add_rms_norm"), ctx);
        if (!why.empty()) ctx.rejected(pattern, n->name, why);
        else changed = true;
      }
    }
    rw.finish();
    return changed;
  }

 private:
  std::string tryFuse(ir::Graph& g, compiler::Rewriter& rw, ir::Node* norm, bool fused_add, PassContext& ctx) {
    std::string why;
    ir::Node* quant = onlyQuantUser(norm->output(0), &why);
    if (!quant) return why;
    ir::Value* x = in0(*norm, "input");
    if (std::string c = checkNorm(*norm, x, ctx.options()); !c.empty()) return c;
    std::string kind = fxString(*quant, "kind");
    if (kind == "dynamic_tensor") return "no fused kernel for dynamic per-tensor quant";
    if (kind == "static_tensor") {
      if (std::string c = checkStaticScale(*quant); !c.empty()) return c;
    } else if (kind == "dynamic_group") {
      auto h = compiler::lastDim(x);
      const ir::Attr* gs = fxArg(*quant, "group_size");
      auto gsz = gs ? gs->asInt() : std::nullopt;
      if (!h || !gsz || *gsz <= 0 || *h % *gsz != 0) return "hidden size is not a multiple of the quant group size";
      if (*gsz != 64 && *gsz != 128) return fmt::format("group size {} (fused kernels: 64, 128)", *gsz);
    } else if (kind != "dynamic_token") {
      return "unknown quant kind '" + kind + "'";
    }
    std::vector<ir::Arg> args = {A("input", V(x))};
    if (fused_add) args.push_back(A("residual", V(in0(*norm, "residual"))));
    args.push_back(A("weight", V(in0(*norm, "weight"))));
    copyNormAttrs(*norm, args, {"epsilon"});
    copyQuantAttrs(*quant, args, true);
    copyNormAttrs(*norm, args, fused_add ? std::initializer_list<const char*>{"variance_of_rounded_sum", "norm_dtype"}
                                         : std::initializer_list<const char*>{"norm_dtype"});
    std::vector<Out> outs;
    if (fused_add) {
      outs.resize(3);
      outs[0].replaces = quant->output(0);
      outs[1].replaces = norm->output(1);
      outs[2].replaces = quant->output(1);
    } else {
      outs.resize(2);
      outs[0].replaces = quant->output(0);
      outs[1].replaces = quant->output(1);
    }
    std::string fusion = fused_add ? "fused_add_rms_norm_quant" : "rms_norm_quant";
    ir::Node* c = rw.create(compiler::fxfuseTarget(fusion), std::move(args), outs, rw.latest({norm, quant}),
                            {norm, quant}, fusion);
    rw.replaceOutputs(c, outs);
    rw.eraseDead({quant, norm});
    ctx.addMatch(fusion);
    ctx.applied(fusion, c, "quant " + kind);
    return {};
  }
};

// ------------------------------------------------------------------ silu_and_mul + quant

class SiluMulQuantFusion : public Pass {
 public:
  std::string_view name() const override { return "silu-mul-quant-fusion"; }
  std::string_view summary() const override { return "silu_and_mul + static quant_fp8 -> silu_and_mul_quant"; }

  bool run(ir::Graph& g, PassContext& ctx) override {
    compiler::Rewriter rw(g);
    bool changed = false;
    for (ir::Node* n : g.nodeList()) {
      if (!rw.alive(n) || !isFx(n, "silu_and_mul")) continue;
      std::string why = tryFuse(g, rw, n, ctx);
      if (!why.empty()) ctx.rejected("silu_and_mul_quant", n->name, why);
      else changed = true;
    }
    rw.finish();
    return changed;
  }

 private:
  std::string tryFuse(ir::Graph& g, compiler::Rewriter& rw, ir::Node* silu, PassContext& ctx) {
    std::string why;
    ir::Node* quant = onlyQuantUser(silu->output(0), &why);
    if (!quant) return why;
    ir::Value* x = in0(*silu, "input");
    if (!x || !ir::isHalf16(x->type.dtype)) return "input is not f16/bf16";
    if (ir::Value* up = in0(*silu, "up"); up && up->type.dtype != x->type.dtype) return "gate and up dtypes differ";
    if (silu->output(0)->type.dtype != x->type.dtype) return "silu_and_mul output dtype differs from its input";
    if (fxString(*quant, "kind") != "static_tensor") return "quant is not static per-tensor (fused kernel: static only)";
    if (std::string c = checkStaticScale(*quant); !c.empty()) return c;
    if (fxBool(*quant, "divide")) return "quant divides by the scale; the fused kernel multiplies by its reciprocal";
    std::vector<ir::Arg> args = {A("input", V(x)), A("scale", V(in0(*quant, "scale")))};
    if (ir::Value* up = in0(*silu, "up")) args.push_back(A("up", V(up)));
    std::vector<Out> outs(1);
    outs[0].replaces = quant->output(0);
    ir::Node* c = rw.create(compiler::fxfuseTarget("silu_and_mul_quant"), std::move(args), outs,
                            rw.latest({silu, quant}), {silu, quant}, "silu_and_mul_quant");
    rw.replaceOutputs(c, outs);
    rw.eraseDead({quant, silu});
    ctx.addMatch("silu_and_mul_quant");
    ctx.applied("silu_and_mul_quant", c, "");
    return {};
  }
};

// ------------------------------------------------------------------ attention + quant

bool isReshape(const ir::Node* n) {
  return n && (n->target == "aten.reshape.default" || n->target == "aten.view.default" ||
               n->target == "aten._unsafe_view.default");
}

class AttentionQuantFusion : public Pass {
 public:
  std::string_view name() const override { return "attention-quant-fusion"; }
  std::string_view summary() const override {
    return "attention [+ reshape] + static quant_fp8 of its output -> attention_quant (FP8 output)";
  }

  bool run(ir::Graph& g, PassContext& ctx) override {
    compiler::Rewriter rw(g);
    bool changed = false;
    for (ir::Node* n : g.nodeList()) {
      if (!rw.alive(n) || !isFx(n, "attention")) continue;
      std::string why = tryFuse(g, rw, n, ctx);
      if (!why.empty()) ctx.rejected("attention_quant", n->name, why);
      else changed = true;
    }
    rw.finish();
    return changed;
  }

 private:
  std::string tryFuse(ir::Graph& g, compiler::Rewriter& rw, ir::Node* attn, PassContext& ctx) {
    ir::Value* o = attn->output(0);
    if (!o) return "attention output unused";
    // Optional reshape between attention and quant.
    ir::Node* reshape = nullptr;
    ir::Value* qin = o;
    auto users = compiler::usersOf(o);
    if (users.size() == 1 && isReshape(users[0]) && o->graphOutputUses() == 0 && o->users().size() == 1) {
      reshape = users[0];
      qin = reshape->output(0);
    }
    std::string why;
    ir::Node* quant = onlyQuantUser(qin, &why);
    if (!quant) return why;
    if (!ir::isHalf16(o->type.dtype)) return fmt::format("attention output dtype is {}", dt(o->type.dtype));
    if (fxString(*quant, "kind") != "static_tensor") return "quant is not static per-tensor";
    if (std::string c = checkStaticScale(*quant); !c.empty()) return c;
    if (fxBool(*quant, "divide")) return "quant divides by the scale; the fused epilogue multiplies by its reciprocal";
    std::string layout = fxString(*attn, "layout", "bhsd");
    if (layout != "bhsd" && layout != "vllm") return "attention layout '" + layout + "' has no FP8-output kernel";
    std::vector<ir::Arg> args;
    for (const auto& a : attn->args()) {
      args.push_back(a);
      if (a.name == "value") args.push_back(A("output_scale", V(in0(*quant, "scale"))));
    }
    ir::TensorType f8 = o->type;
    f8.dtype = ir::DType::F8E4M3FN;
    std::vector<Out> outs(1);
    std::vector<ir::Node*> sources = {attn};
    if (reshape) sources.push_back(reshape);
    sources.push_back(quant);
    if (reshape) {
      outs[0].type = f8;
    } else {
      outs[0].replaces = quant->output(0);
    }
    ir::Node* c = rw.create(compiler::fxfuseTarget("attention_quant"), std::move(args), outs, rw.latest(sources),
                            sources, "attention_quant");
    if (reshape) {
      // reshape(attention_quant(...)) with the same shape arguments, F8.
      std::vector<ir::Arg> rargs;
      for (const auto& a : reshape->args()) rargs.push_back(a);
      for (auto& a : rargs)
        if (a.value.isValue() && a.value.value == o) a.value = ir::Attr::ofValue(c->output(0));
      std::vector<Out> routs(1);
      routs[0].replaces = quant->output(0);
      ir::Node* r = rw.create(reshape->target, std::move(rargs), routs, rw.latest(sources), {reshape}, reshape->name);
      rw.replaceOutputs(r, routs);
    } else {
      rw.replaceOutputs(c, outs);
    }
    rw.eraseDead({quant, reshape, attn});
    ctx.addMatch("attention_quant");
    ctx.applied("attention_quant", c, "layout " + layout);
    return {};
  }
};

}  // namespace

std::unique_ptr<Pass> createAllReduceRmsNormFusionPass() { return std::make_unique<AllReduceRmsNormFusion>(); }
std::unique_ptr<Pass> createRmsNormQuantFusionPass() { return std::make_unique<RmsNormQuantFusion>(); }
std::unique_ptr<Pass> createSiluMulQuantFusionPass() { return std::make_unique<SiluMulQuantFusion>(); }
std::unique_ptr<Pass> createAttentionQuantFusionPass() { return std::make_unique<AttentionQuantFusion>(); }

}  // namespace fxfuse::passes
