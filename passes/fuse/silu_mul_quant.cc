// silu-mul-quant-fusion: SiLU-and-multiply whose only user is a static FP8 quant becomes one
// fused activation+quant op (vLLM's ActivationQuantFusionPass).
//
//   silu_and_mul(x [, up]) ── h ── quant_fp8(h, s, static) ── q
//     ==>  silu_and_mul_quant(x, s [, up]) ── q
//
// The fused kernel multiplies by the scale's reciprocal, so a dividing quant stays unfused.
#include "passes/canonicalize/canonical_util.h"
#include "passes/fuse/checks.h"

namespace fxfuse::passes::fuse {
namespace {

struct SiluQuantSite {
  ir::Node* silu = nullptr;
  ir::Node* quant = nullptr;
  ir::Value* input = nullptr;
  ir::Value* up = nullptr;  // the separate up operand, when there is one
};

class SiluMulQuantPattern : public SitePattern<SiluQuantSite> {
 public:
  std::string_view name() const override { return "silu_and_mul_quant"; }
  std::string_view anchorOp() const override { return "silu_and_mul"; }

 protected:
  std::variant<SiluQuantSite, Rejection> match(ir::Node& silu, const FusionScope&) const override {
    auto quant = onlyQuantUser(silu.output(0));
    if (auto* r = std::get_if<Rejection>(&quant)) return *r;
    return SiluQuantSite{&silu, std::get<ir::Node*>(quant), valueArg(silu, "input"), valueArg(silu, "up")};
  }

  CheckResult check(SiluQuantSite& s, const FusionScope&) const override {
    if (!s.input || !ir::isHalf16(s.input->type.dtype)) return Rejection{"input is not f16/bf16"};
    if (s.up && s.up->type.dtype != s.input->type.dtype) return Rejection{"gate and up dtypes differ"};
    if (s.silu->output(0)->type.dtype != s.input->type.dtype)
      return Rejection{"silu_and_mul output dtype differs from its input"};
    if (fxString(*s.quant, "kind") != "static_tensor")
      return Rejection{"quant is not static per-tensor (fused kernel: static only)"};
    if (auto failed = checkStaticScale(*s.quant)) return failed;
    if (fxBool(*s.quant, "divide"))
      return Rejection{"quant divides by the scale; the fused kernel multiplies by its reciprocal"};
    return std::nullopt;
  }

  Applied rewrite(const SiluQuantSite& s, compiler::Rewriter& rw) const override {
    std::vector<ir::Arg> args = {A("input", V(s.input)), A("scale", V(valueArg(*s.quant, "scale")))};
    if (s.up) args.push_back(A("up", V(s.up)));
    std::vector<Out> outs(1);
    outs[0].replaces = s.quant->output(0);
    ir::Node* c = rw.create(compiler::fxfuseTarget("silu_and_mul_quant"), std::move(args), outs,
                            rw.latest({s.silu, s.quant}), {s.silu, s.quant}, "silu_and_mul_quant");
    rw.replaceOutputs(c, outs);
    rw.eraseDead({s.quant, s.silu});
    return Applied{"silu_and_mul_quant", c, ""};
  }
};

const FusionRegistration kRegistration({
    "silu-mul-quant-fusion",
    "silu_and_mul + static quant_fp8 -> silu_and_mul_quant",
    /*priority=*/30,
    onePattern<SiluMulQuantPattern>,
});

}  // namespace
}  // namespace fxfuse::passes::fuse
