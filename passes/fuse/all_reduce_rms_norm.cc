// allreduce-rmsnorm-fusion: a tensor-parallel all-reduce followed by the RMSNorm of its
// result (and optionally the static FP8 quant of the norm) becomes one fused collective
// (vLLM's AllReduceFusionPass, world size 2/4/8, under a per-world-size size cap).
//
//   x ── all_reduce ── a ─┬─ rms_norm(a, w, eps) ─────────────── n ─[ quant_fp8(n, s, static) ── q ]
//                         └─ (or) fused_add_rms_norm(a, r, w, eps) ── (n, r')
//   ==>
//   all_reduce_rms_norm[_quant](x, r?, w, eps, [s], world_size) ── (n | q, residual_out)
//
// residual_out is r' for the fused-add norm and a itself for the plain one. A graph whose
// token count can exceed the cap keeps the fusion with `max_token_num`: larger batches run
// the unfused ops at run time.
#include <fmt/format.h>

#include "passes/canonicalize/canonical_util.h"
#include "passes/fuse/checks.h"

namespace fxfuse::passes::fuse {
namespace {

struct AllReduceNormSite {
  ir::Node* all_reduce = nullptr;
  ir::Value* input = nullptr;    // x
  ir::Value* reduced = nullptr;  // a
  ir::Node* norm = nullptr;
  bool fused_add = false;
  ir::Node* quant = nullptr;  // the optional static quant of the norm
  int world_size = 0;
  int64_t max_tokens = 0;  // set when some batch may exceed the size cap
  std::string note;
};

class AllReduceRmsNormPattern : public SitePattern<AllReduceNormSite> {
 public:
  std::string_view name() const override { return "all_reduce_rms_norm"; }
  std::string_view anchorOp() const override { return "all_reduce"; }

 protected:
  std::variant<AllReduceNormSite, Rejection> match(ir::Node& ar, const FusionScope&) const override {
    AllReduceNormSite s;
    s.all_reduce = &ar;
    s.reduced = ar.output(0);
    s.input = valueArg(ar, "input");
    if (!s.reduced || !s.input) return Rejection{"all_reduce result unused"};
    for (ir::Node* u : compiler::usersOf(s.reduced))
      if ((isCanonical(u, "rms_norm") || isCanonical(u, "fused_add_rms_norm")) && valueArg(*u, "input") == s.reduced)
        s.norm = u;
    if (!s.norm) return Rejection{"not followed by an RMSNorm of its result"};
    s.fused_add = isCanonical(s.norm, "fused_add_rms_norm");
    // The quant is optional: only a static per-tensor one with a one-element scale joins.
    auto quant = onlyQuantUser(s.norm->output(0));
    if (auto* q = std::get_if<ir::Node*>(&quant);
        q && fxString(**q, "kind") == "static_tensor" && !checkStaticScale(**q))
      s.quant = *q;
    return s;
  }

  CheckResult check(AllReduceNormSite& s, const FusionScope& scope) const override {
    const auto& opts = scope.options;
    s.world_size = opts.world_size;
    if (s.world_size != 2 && s.world_size != 4 && s.world_size != 8)
      return Rejection{fmt::format("world size {} is not 2, 4 or 8", s.world_size)};
    if (auto failed = checkNormForFusedKernel(*s.norm, s.reduced, opts)) return failed;
    if (s.fused_add && !compiler::onlyUsedBy(s.reduced, s.norm))
      return Rejection{"the all-reduce result has other users besides the norm"};
    return checkSizeCap(s, scope);
  }

  Applied rewrite(const AllReduceNormSite& s, compiler::Rewriter& rw) const override {
    std::vector<ir::Arg> args = {A("input", V(s.input)),
                                 A("residual", V(s.fused_add ? valueArg(*s.norm, "residual") : nullptr)),
                                 A("weight", V(valueArg(*s.norm, "weight")))};
    copyAttrs(*s.norm, args, {"epsilon"});
    if (s.quant) args.push_back(A("scale", V(valueArg(*s.quant, "scale"))));
    args.push_back(A("world_size", I(s.world_size)));
    const ir::Attr* group = fxArg(*s.all_reduce, "group_name");
    args.push_back(A("group_name", group ? *group : S("")));
    copyAttrs(*s.norm, args, {"variance_of_rounded_sum", "norm_dtype"});
    if (s.quant) copyAttrs(*s.quant, args, {"divide"});
    args.push_back(A("max_token_num", I(s.note.empty() ? 0 : s.max_tokens)));

    std::vector<Out> outs(2);
    outs[0].replaces = s.quant ? s.quant->output(0) : s.norm->output(0);
    outs[1].replaces = s.fused_add ? s.norm->output(1) : s.reduced;
    if (!outs[1].replaces || outs[1].replaces->numUses() == 0) {
      outs[1].replaces = nullptr;
      outs[1].type = s.reduced->type;  // keep the slot typed: the all-reduce result / new residual
    }
    std::vector<ir::Node*> sources = {s.all_reduce, s.norm};
    if (s.quant) sources.push_back(s.quant);
    std::string fused = s.quant ? "all_reduce_rms_norm_quant" : "all_reduce_rms_norm";
    ir::Node* c = rw.create(compiler::fxfuseTarget(fused), std::move(args), outs, rw.latest(sources), sources, fused);
    rw.replaceOutputs(c, outs);
    rw.eraseDead({s.quant ? s.quant : s.norm, s.norm, s.all_reduce});
    return Applied{
        fused, c,
        fmt::format("world size {}{}{}", s.world_size, s.fused_add ? ", with residual add" : ", no residual", s.note)};
  }

 private:
  // T * H * element size must fit the world size's cap (divided in two steps: H * element
  // size may overflow). A symbolic T whose range crosses the cap is fused with a note.
  static CheckResult checkSizeCap(AllReduceNormSite& s, const FusionScope& scope) {
    const ir::Value* a = s.reduced;
    auto h = compiler::lastDim(a);
    if (!h) return Rejection{"hidden size is not static"};
    if (*h <= 0) return Rejection{fmt::format("hidden size {} is not positive", *h)};
    if (*h % 8 != 0) return Rejection{fmt::format("hidden size {} is not a multiple of 8 (16-byte vectors)", *h)};
    int64_t elem = ir::dtypeBytes(a->type.dtype);
    if (elem <= 0) return Rejection{"the all-reduce dtype has no byte size"};
    const auto& caps = scope.options.allreduce_max_bytes;
    auto cap_it = caps.find(s.world_size);
    int64_t cap = cap_it == caps.end() ? 0 : cap_it->second;
    s.max_tokens = cap / elem / *h;
    if (s.max_tokens <= 0) return Rejection{fmt::format("size cap {} bytes is smaller than one token", cap)};
    ir::SymExpr tokens = ir::SymExpr::integer(1);
    for (size_t i = 0; i + 1 < a->type.rank(); ++i) tokens = tokens * a->type.shape[i];
    auto range = scope.graph.module()->symbols.range(tokens);
    if (tokens.isInt()) {
      if (tokens.intValue() > s.max_tokens)
        return Rejection{fmt::format("{} tokens x {} x {} B exceed the world-size-{} cap of {} bytes (max {} tokens)",
                                     tokens.intValue(), *h, elem, s.world_size, cap, s.max_tokens)};
    } else if (range.lo && *range.lo > s.max_tokens) {
      return Rejection{fmt::format("at least {} tokens exceed the world-size-{} cap of {} bytes (max {} tokens)",
                                   *range.lo, s.world_size, cap, s.max_tokens)};
    } else if (!range.hi || *range.hi > s.max_tokens) {
      s.note = fmt::format("; batches above {} tokens fall back to the unfused ops at run time", s.max_tokens);
    }
    return std::nullopt;
  }
};

const FusionRegistration kRegistration({
    "allreduce-rmsnorm-fusion",
    "all_reduce + (fused_add_)rms_norm (+ static quant_fp8) -> all_reduce_rms_norm[_quant]",
    /*priority=*/10,
    onePattern<AllReduceRmsNormPattern>,
});

}  // namespace
}  // namespace fxfuse::passes::fuse
