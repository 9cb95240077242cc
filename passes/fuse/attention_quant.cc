// attention-quant-fusion: attention whose output (possibly through one reshape) is only read
// by a static FP8 quant writes FP8 directly from its epilogue (vLLM's
// AttnFusionPass: attention with `output_scale`).
//
//   attention(q, k, v) ── o [── reshape(o, shape) ── o'] ── quant_fp8(·, s, static) ── y
//     ==>  attention_quant(q, k, v, output_scale=s) ── o8 [── reshape(o8, shape)] ── y
//
// The epilogue multiplies by the scale's reciprocal, so a dividing quant stays unfused.
#include <fmt/format.h>

#include "passes/canonicalize/canonical_util.h"
#include "passes/fuse/checks.h"

namespace fxfuse::passes::fuse {
namespace {

bool isReshape(const ir::Node* n) {
  return n && (n->target == "aten.reshape.default" || n->target == "aten.view.default" ||
               n->target == "aten._unsafe_view.default");
}

struct AttentionQuantSite {
  ir::Node* attention = nullptr;
  ir::Value* output = nullptr;  // o
  ir::Node* reshape = nullptr;  // optional, between attention and quant
  ir::Node* quant = nullptr;
  std::string layout;
};

class AttentionQuantPattern : public SitePattern<AttentionQuantSite> {
 public:
  std::string_view name() const override { return "attention_quant"; }
  std::string_view anchorOp() const override { return "attention"; }

 protected:
  std::variant<AttentionQuantSite, Rejection> match(ir::Node& attn, const FusionScope&) const override {
    AttentionQuantSite s;
    s.attention = &attn;
    s.output = attn.output(0);
    if (!s.output) return Rejection{"attention output unused"};
    ir::Value* quant_input = s.output;
    auto users = compiler::usersOf(s.output);
    if (users.size() == 1 && isReshape(users[0]) && s.output->graphOutputUses() == 0 && s.output->users().size() == 1) {
      s.reshape = users[0];
      quant_input = s.reshape->output(0);
    }
    auto quant = onlyQuantUser(quant_input);
    if (auto* r = std::get_if<Rejection>(&quant)) return *r;
    s.quant = std::get<ir::Node*>(quant);
    s.layout = fxString(attn, "layout", "bhsd");
    return s;
  }

  CheckResult check(AttentionQuantSite& s, const FusionScope&) const override {
    if (!ir::isHalf16(s.output->type.dtype))
      return Rejection{fmt::format("attention output dtype is {}", dtypeText(s.output->type.dtype))};
    if (fxString(*s.quant, "kind") != "static_tensor") return Rejection{"quant is not static per-tensor"};
    if (auto failed = checkStaticScale(*s.quant)) return failed;
    if (fxBool(*s.quant, "divide"))
      return Rejection{"quant divides by the scale; the fused epilogue multiplies by its reciprocal"};
    if (s.layout != "bhsd" && s.layout != "vllm")
      return Rejection{"attention layout '" + s.layout + "' has no FP8-output kernel"};
    return std::nullopt;
  }

  Applied rewrite(const AttentionQuantSite& s, compiler::Rewriter& rw) const override {
    std::vector<ir::Arg> args;
    for (const auto& a : s.attention->args()) {
      args.push_back(a);
      if (a.name == "value") args.push_back(A("output_scale", V(valueArg(*s.quant, "scale"))));
    }
    std::vector<ir::Node*> sources = {s.attention};
    if (s.reshape) sources.push_back(s.reshape);
    sources.push_back(s.quant);
    std::vector<Out> outs(1);
    if (s.reshape) {
      ir::TensorType fp8 = s.output->type;
      fp8.dtype = ir::DType::F8E4M3FN;
      outs[0].type = fp8;
    } else {
      outs[0].replaces = s.quant->output(0);
    }
    ir::Node* c = rw.create(compiler::fxfuseTarget("attention_quant"), std::move(args), outs, rw.latest(sources),
                            sources, "attention_quant");
    if (s.reshape)
      reshapeFused(s, c, rw, rw.latest(sources));
    else
      rw.replaceOutputs(c, outs);
    rw.eraseDead({s.quant, s.reshape, s.attention});
    return Applied{"attention_quant", c, "layout " + s.layout};
  }

 private:
  // reshape(attention_quant(...)) with the original reshape's shape arguments, in FP8.
  static void reshapeFused(const AttentionQuantSite& s, ir::Node* fused, compiler::Rewriter& rw, ir::Node* after) {
    std::vector<ir::Arg> args(s.reshape->args().begin(), s.reshape->args().end());
    for (auto& a : args)
      if (a.value.isValue() && a.value.value == s.output) a.value = ir::Attr::ofValue(fused->output(0));
    std::vector<Out> outs(1);
    outs[0].replaces = s.quant->output(0);
    ir::Node* r = rw.create(s.reshape->target, std::move(args), outs, after, {s.reshape}, s.reshape->name);
    rw.replaceOutputs(r, outs);
  }
};

const FusionRegistration kRegistration({
    "attention-quant-fusion",
    "attention [+ reshape] + static quant_fp8 of its output -> attention_quant (FP8 output)",
    /*priority=*/40,
    onePattern<AttentionQuantPattern>,
});

}  // namespace
}  // namespace fxfuse::passes::fuse
