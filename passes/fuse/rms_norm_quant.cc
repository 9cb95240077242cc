// rmsnorm-quant-fusion: an RMSNorm (with or without the residual add) whose only user is an
// FP8 quant becomes one fused norm+quant op (vLLM's RMSNormQuantFusionPass).
//
//   fused_add_rms_norm(x, r, w, eps) ── (n, r') ; quant_fp8(n, s | kind) ── (q, scale)
//     ==>  fused_add_rms_norm_quant(x, r, w, eps, s | kind) ── (q, r', scale)
//
//   rms_norm(x, w, eps) ── n ; quant_fp8(n, s | kind) ── (q, scale)
//     ==>  rms_norm_quant(x, w, eps, s | kind) ── (q, scale)
//
// Quant kinds with a fused kernel: static per-tensor, dynamic per-token, dynamic per-group
// (group 64 or 128). The fused-add pattern runs first: the plain one is its subgraph.
#include <fmt/format.h>

#include "passes/canonicalize/canonical_util.h"
#include "passes/fuse/checks.h"

namespace fxfuse::passes::fuse {
namespace {

struct NormQuantSite {
  ir::Node* norm = nullptr;
  ir::Node* quant = nullptr;
  ir::Value* input = nullptr;
  std::string kind;  // the quant kind
};

class RmsNormQuantPattern : public SitePattern<NormQuantSite> {
 public:
  explicit RmsNormQuantPattern(bool fused_add) : fused_add_(fused_add) {}

  std::string_view name() const override { return fused_add_ ? "fused_add_rms_norm_quant" : "rms_norm_quant"; }
  std::string_view anchorOp() const override { return fused_add_ ? "fused_add_rms_norm" : "rms_norm"; }

 protected:
  std::variant<NormQuantSite, Rejection> match(ir::Node& norm, const FusionScope&) const override {
    auto quant = onlyQuantUser(norm.output(0));
    if (auto* r = std::get_if<Rejection>(&quant)) return *r;
    NormQuantSite s;
    s.norm = &norm;
    s.quant = std::get<ir::Node*>(quant);
    s.input = valueArg(norm, "input");
    s.kind = fxString(*s.quant, "kind");
    return s;
  }

  CheckResult check(NormQuantSite& s, const FusionScope& scope) const override {
    if (auto failed = checkNormForFusedKernel(*s.norm, s.input, scope.options)) return failed;
    if (s.kind == "dynamic_tensor") return Rejection{"no fused kernel for dynamic per-tensor quant"};
    if (s.kind == "static_tensor") return checkStaticScale(*s.quant);
    if (s.kind == "dynamic_group") return checkGroupSize(s);
    if (s.kind != "dynamic_token") return Rejection{"unknown quant kind '" + s.kind + "'"};
    return std::nullopt;
  }

  Applied rewrite(const NormQuantSite& s, compiler::Rewriter& rw) const override {
    std::vector<ir::Arg> args = {A("input", V(s.input))};
    if (fused_add_) args.push_back(A("residual", V(valueArg(*s.norm, "residual"))));
    args.push_back(A("weight", V(valueArg(*s.norm, "weight"))));
    copyAttrs(*s.norm, args, {"epsilon"});
    copyQuantAttrs(*s.quant, args, /*with_scale=*/true);
    if (fused_add_)
      copyAttrs(*s.norm, args, {"variance_of_rounded_sum", "norm_dtype"});
    else
      copyAttrs(*s.norm, args, {"norm_dtype"});

    // Outputs: the FP8 value, the new residual (fused add only), the scale.
    std::vector<Out> outs(fused_add_ ? 3 : 2);
    outs[0].replaces = s.quant->output(0);
    if (fused_add_) outs[1].replaces = s.norm->output(1);
    outs.back().replaces = s.quant->output(1);
    std::string fused(name());
    ir::Node* c = rw.create(compiler::fxfuseTarget(fused), std::move(args), outs, rw.latest({s.norm, s.quant}),
                            {s.norm, s.quant}, fused);
    rw.replaceOutputs(c, outs);
    rw.eraseDead({s.quant, s.norm});
    return Applied{fused, c, "quant " + s.kind};
  }

 private:
  static CheckResult checkGroupSize(const NormQuantSite& s) {
    auto h = compiler::lastDim(s.input);
    const ir::Attr* gs = fxArg(*s.quant, "group_size");
    auto group = gs ? gs->asInt() : std::nullopt;
    if (!h || !group || *group <= 0 || *h % *group != 0)
      return Rejection{"hidden size is not a multiple of the quant group size"};
    if (*group != 64 && *group != 128) return Rejection{fmt::format("group size {} (fused kernels: 64, 128)", *group)};
    return std::nullopt;
  }

  bool fused_add_;
};

const FusionRegistration kRegistration({
    "rmsnorm-quant-fusion",
    "(fused_add_)rms_norm + quant_fp8 (static, per-token, per-group) -> (fused_add_)rms_norm_quant",
    /*priority=*/20,
    [] {
      std::vector<std::unique_ptr<FusionPattern>> p;
      p.push_back(std::make_unique<RmsNormQuantPattern>(/*fused_add=*/true));
      p.push_back(std::make_unique<RmsNormQuantPattern>(/*fused_add=*/false));
      return p;
    },
});

}  // namespace
}  // namespace fxfuse::passes::fuse
