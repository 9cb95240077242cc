// canonicalize-ops: single-node spellings -> fxfuse canonical ops.
//
//   auto_functionalized(_C.rms_norm, result, input, weight, epsilon)[1]     -> fxfuse.rms_norm
//   auto_functionalized(_C.fused_add_rms_norm, input, residual, ...)[1,2]  -> fxfuse.fused_add_rms_norm
//   auto_functionalized(_C.static_scaled_fp8_quant | _C.dynamic_*_fp8_quant |
//                       _C.per_token_group_fp8_quant)                      -> fxfuse.quant_fp8
//   auto_functionalized(_C.silu_and_mul, result, input)[1]                 -> fxfuse.silu_and_mul
//   auto_functionalized(vllm.unified_attention_with_output, ...)[1], vllm.unified_attention
//                                                                          -> fxfuse.attention (layout 'vllm')
//   vllm.all_reduce(x), _c10d_functional.wait_tensor(_c10d_functional.all_reduce(x, "sum"))
//                                                                          -> fxfuse.all_reduce
//   aten.rms_norm, aten._fused_rms_norm                                    -> fxfuse.rms_norm
//   aten.scaled_dot_product_attention and _flash/_efficient/_cudnn/_for_cpu -> fxfuse.attention
//   vLLM's fused ops (_C.rms_norm_static_fp8_quant, ...)                   -> fxfuse fused ops
//   ATen spellings of one ATen op (kAtenSpellings: concat, true_divide, clip, hardtanh,
//   __xor__, dot and mv, min/max.other, flatten, expand_as, view_copy, _reshape_alias,
//   device_put, lift_fresh)                                                -> that op
//   aten.dropout / native_dropout(x, p, train=false)                       -> x (, ones_like(x, bool))
//
// REQUIRES: functionalize (custom ops in auto_functionalized v1 form).
// Semantics and attribute values: docs/canonical-ops.md.
#include <functional>
#include <map>

#include <fmt/format.h>

#include "passes/canonicalize/canonical_util.h"
#include "passes/passes.h"

namespace fxfuse::passes {
namespace {

using compiler::PassContext;
using compiler::valueArg;
using compiler::argOf;

constexpr double kF32Eps = 1.1920928955078125e-07;

class CanonicalizeOpsPass : public Pass {
 public:
  std::string_view name() const override { return "canonicalize-ops"; }
  std::string_view summary() const override {
    return "vLLM custom ops, torch built-ins and collectives -> fxfuse canonical ops";
  }

  bool run(ir::Graph& g, PassContext& ctx) override {
    compiler::Rewriter rw(g);
    bool changed = false;
    for (ir::Node* n : g.nodeList()) {
      if (!rw.alive(n)) continue;
      bool did = false;
      if (auto af = AfCall::of(n)) {
        did = customOp(rw, *af, ctx);
      } else {
        did = builtin(rw, n, ctx);
      }
      changed |= did;
    }
    rw.finish();
    return changed;
  }

 private:
  ir::Node* emit(compiler::Rewriter& rw, const std::string& op, std::vector<ir::Arg> args, std::vector<Out> outs,
                 ir::Node* src, PassContext& ctx, const std::string& counter) {
    ir::Node* c = rw.create(compiler::fxfuseTarget(op), std::move(args), outs, src, {src}, op);
    rw.replaceOutputs(c, outs);
    rw.eraseDead({src});
    ctx.addMatch(counter);
    ctx.applied(op, c, "from " + counter);
    return c;
  }

  // One computation, two ATen spellings: the node is renamed to the spelling the lowering and
  // the patterns know, its arguments renamed, the ones the new schema lacks dropped, and a
  // size the new spelling needs taken from the recorded output type.
  struct Spelling {
    const char* from;
    const char* to;
    std::vector<std::pair<const char*, const char*>> renames;
    const char* size_from_output;  // argument set to the output's shape, or nullptr
    // Defaults of `from` that `to` lacks, by their new names: added when the node leaves them out.
    std::vector<std::pair<const char*, double>> defaults = {};
  };
  static const std::vector<Spelling>& atenSpellings() {
    static const std::vector<Spelling> kAtenSpellings = {
        {"aten.concat.default", "aten.cat.default", {}, nullptr},
        {"aten.min.other", "aten.minimum.default", {}, nullptr},
        {"aten.max.other", "aten.maximum.default", {}, nullptr},
        {"aten.flatten.using_ints", "aten.view.default", {}, "size"},
        {"aten.unflatten.int", "aten.view.default", {}, "size"},
        {"aten.reshape_as.default", "aten.reshape.default", {}, "shape"},
        {"aten.expand_as.default", "aten.expand.default", {}, "size"},
        {"aten.view_copy.default", "aten.view.default", {}, nullptr},
        {"aten.concatenate.default", "aten.cat.default", {}, nullptr},
        {"aten.true_divide.Tensor", "aten.div.Tensor", {}, nullptr},
        {"aten.true_divide.Scalar", "aten.div.Scalar", {}, nullptr},
        {"aten.clip.default", "aten.clamp.default", {}, nullptr},
        {"aten.hardtanh.default", "aten.clamp.default", {{"min_val", "min"}, {"max_val", "max"}}, nullptr,
         {{"min", -1.0}, {"max", 1.0}}},
        {"aten.__xor__.Tensor", "aten.bitwise_xor.Tensor", {}, nullptr},
        {"aten.__xor__.Scalar", "aten.bitwise_xor.Scalar", {}, nullptr},
        {"aten.dot.default", "aten.matmul.default", {{"tensor", "other"}}, nullptr},
        {"aten.mv.default", "aten.matmul.default", {{"vec", "other"}}, nullptr},
        // Exactly the view it names (the size and strides it was given, the input's offset).
        {"aten._reshape_alias.default", "aten.as_strided.default", {}, nullptr},
        // A transfer between devices: one device in a plan, so the value itself.
        {"prims.device_put.default", "aten.alias.default", {{"a", "self"}}, nullptr},
        {"aten.lift_fresh.default", "aten.alias.default", {}, nullptr},
    };
    return kAtenSpellings;
  }

  bool respell(compiler::Rewriter& rw, ir::Node* n, PassContext& ctx) {
    for (const Spelling& sp : atenSpellings()) {
      if (n->target != sp.from) continue;
      const ir::OpSchema* to = ir::OpRegistry::builtin().find(sp.to);
      ir::Value* out = n->numOutputs() == 1 ? n->output(0) : nullptr;
      if (!to || !out || !out->isTensor()) return false;
      std::vector<ir::Arg> args;
      for (ir::Arg a : n->args()) {
        for (const auto& [from, into] : sp.renames)
          if (a.name == from) a.name = into;
        if (to->argIndex(a.name) >= 0) args.push_back(std::move(a));
      }
      for (const auto& [name, value] : sp.defaults) {
        bool given = false;
        for (const ir::Arg& a : args) given |= a.name == name;
        if (!given) args.push_back({name, false, ir::Attr::ofFloat(value)});
      }
      if (sp.size_from_output) {
        std::vector<ir::Attr> sizes;
        for (const ir::SymExpr& d : out->type.shape) sizes.push_back(ir::Attr::ofSym(d));
        args.push_back({sp.size_from_output, false, ir::Attr::ofList(std::move(sizes))});
      }
      std::vector<Out> outs(1);
      outs[0].replaces = out;
      const std::string name = n->name;
      ir::Node* c = rw.create(sp.to, std::move(args), outs, n, {n}, name);
      rw.replaceOutputs(c, outs);
      rw.eraseDead({n});
      c->graph()->renameNode(c, name);  // the same computation respelled keeps its name
      ctx.applied(sp.to, c, "from " + std::string(sp.from));
      return true;
    }
    return false;
  }

  static bool anyUsed(const std::vector<Out>& outs) {
    for (const auto& o : outs)
      if (o.replaces && o.replaces->numUses() > 0) return true;
    return false;
  }

  using CustomOpRule = bool (CanonicalizeOpsPass::*)(compiler::Rewriter&, const AfCall&, PassContext&);

  // One rule per vLLM custom op inside auto_functionalized (the picture above).
  bool customOp(compiler::Rewriter& rw, const AfCall& af, PassContext& ctx) {
    static const std::map<std::string, CustomOpRule> kRules = {
        {"_C.rms_norm.default", &CanonicalizeOpsPass::rmsNorm},
        {"_C.fused_add_rms_norm.default", &CanonicalizeOpsPass::fusedAddRmsNorm},
        {"_C.static_scaled_fp8_quant.default", &CanonicalizeOpsPass::scaledFp8Quant},
        {"_C.dynamic_per_token_scaled_fp8_quant.default", &CanonicalizeOpsPass::scaledFp8Quant},
        {"_C.dynamic_scaled_fp8_quant.default", &CanonicalizeOpsPass::scaledFp8Quant},
        {"_C.per_token_group_fp8_quant.default", &CanonicalizeOpsPass::groupFp8Quant},
        {"_C.silu_and_mul.default", &CanonicalizeOpsPass::siluAndMul},
        {"vllm.unified_attention_with_output.default", &CanonicalizeOpsPass::unifiedAttention},
        {"_C.rms_norm_static_fp8_quant.default", &CanonicalizeOpsPass::rmsNormStaticQuant},
        {"_C.fused_add_rms_norm_static_fp8_quant.default", &CanonicalizeOpsPass::fusedAddRmsNormStaticQuant},
        {"_C.rms_norm_dynamic_per_token_quant.default", &CanonicalizeOpsPass::rmsNormDynamicTokenQuant},
        {"_C.silu_and_mul_quant.default", &CanonicalizeOpsPass::siluAndMulQuant},
    };
    auto it = kRules.find(af.op);
    return it != kRules.end() && (this->*it->second)(rw, af, ctx);
  }

  static ir::Attr epsilonOf(const AfCall& af) {
    const ir::Attr* e = af.kw("epsilon");
    return e ? *e : ir::Attr::none();
  }

  // _C.rms_norm(result, input, weight, epsilon) -> rms_norm.
  bool rmsNorm(compiler::Rewriter& rw, const AfCall& af, PassContext& ctx) {
    ir::Node* n = af.node;
    ir::Value* in = af.value("input");
    std::vector<Out> outs(1);
    outs[0].replaces = af.mutOut("result");
    if (!in || !anyUsed(outs)) return false;
    emit(rw, "rms_norm", {A("input", V(in)), A("weight", V(af.value("weight"))), A("epsilon", epsilonOf(af)),
                          A("norm_dtype", D(in->type.dtype))}, outs, n, ctx, "_C.rms_norm");
    return true;
  }

  // _C.fused_add_rms_norm(input, residual, weight, epsilon), in place -> fused_add_rms_norm.
  bool fusedAddRmsNorm(compiler::Rewriter& rw, const AfCall& af, PassContext& ctx) {
    ir::Node* n = af.node;
    ir::Value* in = af.value("input");
    ir::Value* res = af.value("residual");
    std::vector<Out> outs(2);
    outs[0].replaces = af.mutOut("input");
    outs[1].replaces = af.mutOut("residual");
    if (!in || !res || !anyUsed(outs)) return false;
    emit(rw, "fused_add_rms_norm",
         {A("input", V(in)), A("residual", V(res)), A("weight", V(af.value("weight"))), A("epsilon", epsilonOf(af)),
          A("variance_of_rounded_sum", B(true)), A("norm_dtype", D(res->type.dtype))},
         outs, n, ctx, "_C.fused_add_rms_norm");
    return true;
  }

  // _C.static_scaled_fp8_quant (a one-element scale), _C.dynamic_per_token_scaled_fp8_quant and
  // _C.dynamic_scaled_fp8_quant -> quant_fp8 of kind static_tensor, dynamic_token, dynamic_tensor.
  bool scaledFp8Quant(compiler::Rewriter& rw, const AfCall& af, PassContext& ctx) {
    const std::string& op = af.op;
    ir::Node* n = af.node;
    ir::Value* in = af.value("input");
    std::vector<Out> outs(2);
    outs[0].replaces = af.mutOut("result");
    std::vector<ir::Arg> args = {A("input", V(in))};
    if (op == "_C.static_scaled_fp8_quant.default") {
      ir::Value* scale = af.value("scale");
      if (const ir::Attr* gs = af.kw("group_shape"); gs && !gs->isNone()) {
        ctx.rejected("quant_fp8", n->name, "static quant with a group_shape is not canonicalized");
        return false;
      }
      if (!scale || compiler::constNumel(scale).value_or(0) != 1) {
        ctx.rejected("quant_fp8", n->name, "static scale is not a one-element tensor");
        return false;
      }
      args.push_back(A("scale", V(scale)));
      args.push_back(A("kind", S("static_tensor")));
    } else if (op == "_C.dynamic_per_token_scaled_fp8_quant.default") {
      outs[1].replaces = af.mutOut("scale");
      args.push_back(A("scale", ir::Attr::none()));
      args.push_back(A("kind", S("dynamic_token")));
      ir::Value* ub = af.value("scale_ub");
      if (ub) args.push_back(A("scale_ub", V(ub)));
      args.push_back(A("divide", B(true)));
    } else {
      outs[1].replaces = af.mutOut("scale");
      args.push_back(A("scale", ir::Attr::none()));
      args.push_back(A("kind", S("dynamic_tensor")));
      args.push_back(A("min_scale", F(0.0)));
    }
    if (!in || !anyUsed(outs)) return false;
    emit(rw, "quant_fp8", std::move(args), outs, n, ctx, compiler::shortTarget(op));
    return true;
  }

  // _C.per_token_group_fp8_quant -> quant_fp8 of kind dynamic_group (fp8_max 448 only).
  bool groupFp8Quant(compiler::Rewriter& rw, const AfCall& af, PassContext& ctx) {
    ir::Node* n = af.node;
    ir::Value* in = af.value("input");
    std::vector<Out> outs(2);
    outs[0].replaces = af.mutOut("output_q");
    outs[1].replaces = af.mutOut("output_s");
    if (!in || !anyUsed(outs)) return false;
    const ir::Attr* gs = af.kw("group_size");
    const ir::Attr* e = af.kw("eps");
    const ir::Attr* fmax = af.kw("fp8_max");
    if (!gs || !gs->asInt() || !e || !e->asDouble()) return false;
    if (fmax && fmax->asDouble() && !compiler::approxEqual(*fmax->asDouble(), compiler::kFp8Max)) {
      ctx.rejected("quant_fp8", n->name, "per_token_group_fp8_quant with fp8_max != 448");
      return false;
    }
    bool col_major = false;
    if (ir::Value* s = af.value("output_s"); s && s->type.rank() == 2 && s->type.stride.size() == 2) {
      const auto& st = s->type.stride;
      col_major = st[0].isInt() && st[0].intValue() == 1 && !(s->type.shape[0].isInt() && s->type.shape[0].intValue() == 1);
    }
    const ir::Attr* ue8m0 = af.kw("scale_ue8m0");
    emit(rw, "quant_fp8",
         {A("input", V(in)), A("scale", ir::Attr::none()), A("kind", S("dynamic_group")), A("group_size", *gs),
          A("column_major_scales", B(col_major)), A("divide", B(true)), A("min_abs", *e), A("min_scale", F(0.0)),
          A("scale_ue8m0", B(ue8m0 && ue8m0->kind == ir::Attr::Kind::Bool && ue8m0->b))},
         outs, n, ctx, "_C.per_token_group_fp8_quant");
    return true;
  }

  // _C.silu_and_mul(result, input) -> silu_and_mul.
  bool siluAndMul(compiler::Rewriter& rw, const AfCall& af, PassContext& ctx) {
    ir::Node* n = af.node;
    ir::Value* in = af.value("input");
    std::vector<Out> outs(1);
    outs[0].replaces = af.mutOut("result");
    if (!in || !anyUsed(outs)) return false;
    emit(rw, "silu_and_mul", {A("input", V(in))}, outs, n, ctx, "_C.silu_and_mul");
    return true;
  }

  // vllm.unified_attention_with_output -> attention (layout vllm), attention_quant with an
  // output scale; NVFP4 block scales refused.
  bool unifiedAttention(compiler::Rewriter& rw, const AfCall& af, PassContext& ctx) {
    ir::Node* n = af.node;
    std::vector<Out> outs(1);
    outs[0].replaces = af.mutOut("output");
    if (!anyUsed(outs)) return false;
    if (ir::Value* bs = af.mutOut("output_block_scale"); bs && bs->numUses() > 0) {
      ctx.rejected("attention", n->name, "output_block_scale (NVFP4) is not supported");
      return false;
    }
    const ir::Attr* layer = af.kw("layer_name");
    std::vector<ir::Arg> args = {A("query", V(af.value("query"))), A("key", V(af.value("key"))),
                                 A("value", V(af.value("value")))};
    ir::Value* oscale = af.value("output_scale");
    std::string op_name = "attention";
    if (oscale) {
      args.insert(args.begin() + 3, A("output_scale", V(oscale)));
      op_name = "attention_quant";
    }
    args.push_back(A("layout", S("vllm")));
    args.push_back(A("layer_name", layer ? *layer : S("")));
    emit(rw, op_name, std::move(args), outs, n, ctx, "vllm.unified_attention_with_output");
    return true;
  }

  // vLLM's own fused ops become the equivalent fxfuse fused ops: _C.rms_norm_static_fp8_quant ->
  // rms_norm_quant.
  bool rmsNormStaticQuant(compiler::Rewriter& rw, const AfCall& af, PassContext& ctx) {
    ir::Node* n = af.node;
    std::vector<Out> outs(2);
    outs[0].replaces = af.mutOut("result");
    ir::Value* in = af.value("input");
    if (!in || !anyUsed(outs)) return false;
    emit(rw, "rms_norm_quant",
         {A("input", V(in)), A("weight", V(af.value("weight"))), A("epsilon", epsilonOf(af)), A("scale", V(af.value("scale"))),
          A("kind", S("static_tensor")), A("norm_dtype", D(in->type.dtype))},
         outs, n, ctx, "_C.rms_norm_static_fp8_quant");
    return true;
  }

  // _C.fused_add_rms_norm_static_fp8_quant -> fused_add_rms_norm_quant.
  bool fusedAddRmsNormStaticQuant(compiler::Rewriter& rw, const AfCall& af, PassContext& ctx) {
    ir::Node* n = af.node;
    std::vector<Out> outs(3);
    outs[0].replaces = af.mutOut("result");
    outs[1].replaces = af.mutOut("residual");
    ir::Value* in = af.value("input");
    ir::Value* res = af.value("residual");
    if (!in || !res || !anyUsed(outs)) return false;
    emit(rw, "fused_add_rms_norm_quant",
         {A("input", V(in)), A("residual", V(res)), A("weight", V(af.value("weight"))), A("epsilon", epsilonOf(af)),
          A("scale", V(af.value("scale"))), A("kind", S("static_tensor")), A("variance_of_rounded_sum", B(true)),
          A("norm_dtype", D(res->type.dtype))},
         outs, n, ctx, "_C.fused_add_rms_norm_static_fp8_quant");
    return true;
  }

  // _C.rms_norm_dynamic_per_token_quant (with or without a residual) -> the fused op.
  bool rmsNormDynamicTokenQuant(compiler::Rewriter& rw, const AfCall& af, PassContext& ctx) {
    ir::Node* n = af.node;
    ir::Value* in = af.value("input");
    ir::Value* res = af.value("residual");
    if (!in) return false;
    std::vector<ir::Arg> common = {A("epsilon", epsilonOf(af)), A("scale", ir::Attr::none()), A("kind", S("dynamic_token"))};
    if (ir::Value* ub = af.value("scale_ub")) common.push_back(A("scale_ub", V(ub)));
    if (res) {
      std::vector<Out> outs(3);
      outs[0].replaces = af.mutOut("result");
      outs[1].replaces = af.mutOut("residual");
      outs[2].replaces = af.mutOut("scale");
      if (!anyUsed(outs)) return false;
      std::vector<ir::Arg> args = {A("input", V(in)), A("residual", V(res)), A("weight", V(af.value("weight")))};
      args.insert(args.end(), common.begin(), common.end());
      args.push_back(A("variance_of_rounded_sum", B(false)));
      args.push_back(A("norm_dtype", D(in->type.dtype)));
      args.push_back(A("divide", B(true)));
      emit(rw, "fused_add_rms_norm_quant", std::move(args), outs, n, ctx, "_C.rms_norm_dynamic_per_token_quant");
    } else {
      std::vector<Out> outs(2);
      outs[0].replaces = af.mutOut("result");
      outs[1].replaces = af.mutOut("scale");
      if (!anyUsed(outs)) return false;
      std::vector<ir::Arg> args = {A("input", V(in)), A("weight", V(af.value("weight")))};
      args.insert(args.end(), common.begin(), common.end());
      args.push_back(A("norm_dtype", D(in->type.dtype)));
      args.push_back(A("divide", B(true)));
      emit(rw, "rms_norm_quant", std::move(args), outs, n, ctx, "_C.rms_norm_dynamic_per_token_quant");
    }
    return true;
  }

  // _C.silu_and_mul_quant -> silu_and_mul_quant.
  bool siluAndMulQuant(compiler::Rewriter& rw, const AfCall& af, PassContext& ctx) {
    ir::Node* n = af.node;
    std::vector<Out> outs(1);
    outs[0].replaces = af.mutOut("result");
    if (!anyUsed(outs)) return false;
    emit(rw, "silu_and_mul_quant", {A("input", V(af.value("input"))), A("scale", V(af.value("scale")))}, outs, n,
         ctx, "_C.silu_and_mul_quant");
    return true;
  }

  // aten.dropout / aten.native_dropout with train=false (an eval-mode trace): ATen returns the
  // input (cloned) and, native_dropout, an all-true mask. The output becomes the input itself,
  // as noop-elimination does with a clone (an alias left here would outlive that pass, which
  // runs first). train=None or true draws random numbers and stays (the lowering refuses it).
  //
  //   out = dropout(x, p, train=false)                ->   uses of out read x
  //   out, mask = native_dropout(x, p, train=false)   ->   uses of out read x
  //                                                        mask = ones_like(x, dtype=bool)
  bool evalDropout(compiler::Rewriter& rw, ir::Node* n, PassContext& ctx) {
    const std::optional<double> train = compiler::numberArg(*n, "train");  // false, or 0 from a dump
    ir::Value* x = valueArg(*n, "input");
    if (!train || *train != 0 || !x || !n->output(0)) return false;
    const std::string name = n->name;
    if (ir::Value* mask = n->numOutputs() > 1 ? n->output(1) : nullptr; mask && mask->numUses() > 0) {
      std::vector<Out> outs(1);
      outs[0].replaces = mask;
      ir::Node* c = rw.create("aten.ones_like.default", {A("self", V(x)), A("dtype", D(ir::DType::BOOL))}, outs, n,
                              {n}, name + "_mask");
      rw.replaceOutputs(c, outs);
      ctx.applied("aten.ones_like.default", c, "from the mask of " + n->target + " (train=false)");
    }
    rw.replace(n->output(0), x);
    ctx.addMatch(n->target + " (train=false)");
    rw.eraseDead({n});
    return true;
  }

  bool builtin(compiler::Rewriter& rw, ir::Node* n, PassContext& ctx) {
    if (respell(rw, n, ctx)) return true;
    const std::string& t = n->target;
    if (t == "aten.dropout.default" || t == "aten.native_dropout.default") return evalDropout(rw, n, ctx);
    if (t == "vllm.all_reduce.default") {
      std::vector<Out> outs(1);
      outs[0].replaces = n->output(0);
      ir::Value* x = valueArg(*n, "tensor");
      if (!x || !outs[0].replaces) return false;
      const ir::Attr* gname = argOf(*n, "group_name");
      emit(rw, "all_reduce", {A("input", V(x)), A("group_name", gname ? *gname : S(""))}, outs, n, ctx,
           "vllm.all_reduce");
      return true;
    }
    if (t == "_c10d_functional.wait_tensor.default") {
      ir::Value* w = valueArg(*n, "tensor");
      ir::Node* ar = w ? w->producer() : nullptr;
      if (!ar || ar->target != "_c10d_functional.all_reduce.default") return false;
      const ir::Attr* op = argOf(*ar, "reduce_op");
      if (!op || op->kind != ir::Attr::Kind::String || (op->s != "sum" && op->s != "SUM")) {
        ctx.rejected("all_reduce", ar->name, "reduce_op is not sum");
        return false;
      }
      ir::Value* x = valueArg(*ar, "input");
      const ir::Attr* gname = argOf(*ar, "group_name");
      std::vector<Out> outs(1);
      outs[0].replaces = n->output(0);
      if (!x || !outs[0].replaces) return false;
      ir::Node* c = rw.create(compiler::fxfuseTarget("all_reduce"),
                              {A("input", V(x)), A("group_name", gname ? *gname : S(""))}, outs, n, {ar, n},
                              "all_reduce");
      rw.replaceOutputs(c, outs);
      // Other readers of the un-waited value read the reduced value too.
      if (ar->output(0)) rw.replace(ar->output(0), c->output(0));
      // wait_tensor has side effects (it is a synchronization): it is now redundant.
      if (!n->hasUsers()) rw.eraseNode(n);
      rw.eraseDead({ar});
      ctx.addMatch("_c10d_functional.all_reduce");
      ctx.applied("all_reduce", c, "from _c10d_functional.all_reduce + wait_tensor");
      return true;
    }
    if (t == "aten.rms_norm.default" || t == "aten._fused_rms_norm.default") {
      ir::Value* x = valueArg(*n, "input");
      ir::Value* out = n->output(0);
      if (!x || !out) return false;
      if (t == "aten._fused_rms_norm.default" && n->output(1) && n->output(1)->numUses() > 0) {
        ctx.rejected("rms_norm", n->name, "the rstd output of _fused_rms_norm is used");
        return false;
      }
      const ir::Attr* shape = argOf(*n, "normalized_shape");
      auto dims = shape ? shape->asIntList() : std::nullopt;
      auto h = compiler::lastDim(x);
      if (!dims || dims->size() != 1 || !h || (*dims)[0] != *h) {
        ctx.rejected("rms_norm", n->name, "normalized_shape is not the last dimension");
        return false;
      }
      const ir::Attr* e = argOf(*n, "eps");
      ir::Attr eps = (e && !e->isNone()) ? *e : F(kF32Eps);
      ir::DType norm = t == "aten.rms_norm.default" ? x->type.dtype : ir::DType::F32;
      std::vector<Out> outs(1);
      outs[0].replaces = out;
      const ir::Attr* w = argOf(*n, "weight");
      emit(rw, "rms_norm", {A("input", V(x)), A("weight", w ? *w : ir::Attr::none()), A("epsilon", eps),
                            A("norm_dtype", D(norm))},
           outs, n, ctx, compiler::shortTarget(t));
      return true;
    }
    if (t == "vllm.unified_attention.default") {
      std::vector<Out> outs(1);
      outs[0].replaces = n->output(0);
      if (!outs[0].replaces) return false;
      const ir::Attr* layer = argOf(*n, "layer_name");
      emit(rw, "attention",
           {A("query", V(valueArg(*n, "query"))), A("key", V(valueArg(*n, "key"))), A("value", V(valueArg(*n, "value"))),
            A("layout", S("vllm")), A("layer_name", layer ? *layer : S(""))},
           outs, n, ctx, "vllm.unified_attention");
      return true;
    }
    return sdpa(rw, n, ctx);
  }

  bool sdpa(compiler::Rewriter& rw, ir::Node* n, PassContext& ctx) {
    const std::string& t = n->target;
    static const std::map<std::string, std::string> kMask = {
        {"aten.scaled_dot_product_attention.default", "attn_mask"},
        {"aten._scaled_dot_product_flash_attention.default", ""},
        {"aten._scaled_dot_product_flash_attention_for_cpu.default", "attn_mask"},
        {"aten._scaled_dot_product_efficient_attention.default", "attn_bias"},
        {"aten._scaled_dot_product_cudnn_attention.default", "attn_bias"},
    };
    auto it = kMask.find(t);
    if (it == kMask.end()) return false;
    ir::Value* out = n->output(0);
    if (!out) return false;
    for (size_t i = 1; i < n->numOutputs(); ++i)
      if (n->output(i) && n->output(i)->numUses() > 0) {
        ctx.rejected("attention", n->name, fmt::format("auxiliary output {} of {} is used", i, compiler::shortTarget(t)));
        return false;
      }
    auto dropout = compiler::numberArg(*n, "dropout_p");
    if (dropout && *dropout != 0.0) {
      ctx.rejected("attention", n->name, "dropout_p is not 0");
      return false;
    }
    std::vector<ir::Arg> args = {A("query", V(valueArg(*n, "query"))), A("key", V(valueArg(*n, "key"))),
                                 A("value", V(valueArg(*n, "value")))};
    if (!it->second.empty()) {
      const ir::Attr* mask = argOf(*n, it->second);
      if (mask && !mask->isNone()) args.push_back(A("attn_mask", *mask));
    }
    const ir::Attr* causal = argOf(*n, "is_causal");
    if (causal && causal->kind == ir::Attr::Kind::Bool) args.push_back(A("is_causal", *causal));
    const ir::Attr* scale = argOf(*n, "scale");
    if (scale && !scale->isNone()) args.push_back(A("scale", *scale));
    const ir::Attr* gqa = argOf(*n, "enable_gqa");
    if (gqa && gqa->kind == ir::Attr::Kind::Bool && gqa->b) args.push_back(A("enable_gqa", *gqa));
    args.push_back(A("layout", S("bhsd")));
    std::vector<Out> outs(1);
    outs[0].replaces = out;
    emit(rw, "attention", std::move(args), outs, n, ctx, compiler::shortTarget(t));
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> createCanonicalizeOpsPass() { return std::make_unique<CanonicalizeOpsPass>(); }

}  // namespace fxfuse::passes
