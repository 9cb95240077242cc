// Matching and checking helpers the fusion patterns share (checks.h).
#include "passes/fuse/checks.h"

#include <fmt/format.h>

#include "ir/fxg.h"
#include "ir/lifted_scalar.h"
#include "passes/canonicalize/canonical_util.h"
#include "passes/toolkit/op_util.h"

namespace fxfuse::passes::fuse {

bool isCanonical(const ir::Node* n, const char* short_name) {
  return n && n->target == compiler::fxfuseTarget(short_name);
}

ir::Value* valueArg(const ir::Node& n, const char* name) {
  const ir::Attr* a = fxArg(n, name);
  return (a && a->isValue()) ? a->value : nullptr;
}

std::string dtypeText(ir::DType d) { return std::string(ir::dtypeName(d)); }

std::variant<ir::Node*, Rejection> onlyQuantUser(ir::Value* v) {
  if (!v) return Rejection{"not followed by an FP8 quant"};
  auto users = compiler::usersOf(v);
  ir::Node* quant = nullptr;
  for (ir::Node* u : users)
    if (isCanonical(u, "quant_fp8") && valueArg(*u, "input") == v) quant = u;
  if (!quant) return Rejection{"not followed by an FP8 quant"};
  if (users.size() != 1 || v->graphOutputUses() > 0 || v->users().size() != 1)
    return Rejection{fmt::format("the intermediate has {} other use(s) besides the quant", v->numUses() - 1)};
  return quant;
}

namespace {

// vLLM's fused kernels exist for eps 1e-5 and 1e-6 only (vLLM-compatible mode).
CheckResult checkVllmEpsilon(const ir::Attr* eps) {
  auto e = eps ? eps->asDouble() : std::nullopt;
  if (!e && eps && eps->isValue()) {  // a lifted scalar: its recorded / --const value
    e = ir::liftedScalarValue(eps->value);
    if (ir::Value* in = ir::liftedScalarSource(eps->value); in && !e)
      return Rejection{"eps (vLLM-compatible mode): " + ir::constFlagHint(*in)};
  }
  if (!e || !(compiler::approxEqual(*e, 1e-5) || compiler::approxEqual(*e, 1e-6)))
    return Rejection{"eps is not 1e-5 or 1e-6 (vLLM-compatible mode)"};
  return std::nullopt;
}

}  // namespace

CheckResult checkNormForFusedKernel(const ir::Node& norm, ir::Value* input, const compiler::CompileOptions& opts) {
  if (!input || !ir::isHalf16(input->type.dtype))
    return Rejection{
        fmt::format("input dtype is {}, the fused kernel takes f16/bf16", input ? dtypeText(input->type.dtype) : "?")};
  const ir::DType in = input->type.dtype;
  ir::Value* w = valueArg(norm, "weight");
  if (!w) return Rejection{"the norm has no weight"};
  if (w->type.dtype != in)
    return Rejection{
        fmt::format("weight dtype {} != input dtype {} (vLLM #48324)", dtypeText(w->type.dtype), dtypeText(in))};
  const ir::Attr* nd = fxArg(norm, "norm_dtype");
  if (nd && nd->kind == ir::Attr::Kind::DType && nd->dtype != in)
    return Rejection{
        fmt::format("normalized value is rounded to {}, not the input dtype {}", dtypeText(nd->dtype), dtypeText(in))};
  if (norm.output(0) && norm.output(0)->type.dtype != in)
    return Rejection{
        fmt::format("norm output dtype {} != input dtype {}", dtypeText(norm.output(0)->type.dtype), dtypeText(in))};
  if (ir::Value* r = valueArg(norm, "residual"); r && r->type.dtype != in)
    return Rejection{fmt::format("residual dtype {} != input dtype {}", dtypeText(r->type.dtype), dtypeText(in))};
  if (opts.vllm_eps_only) return checkVllmEpsilon(fxArg(norm, "epsilon"));
  return std::nullopt;
}

CheckResult checkStaticScale(const ir::Node& quant) {
  ir::Value* s = valueArg(quant, "scale");
  if (!s || s->type.dtype != ir::DType::F32 || compiler::constNumel(s).value_or(0) != 1)
    return Rejection{fmt::format("scale is not a one-element f32 tensor ({})", s ? ir::typeStr(*s) : "none")};
  return std::nullopt;
}

void copyAttrs(const ir::Node& source, std::vector<ir::Arg>& args, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (const ir::Attr* a = fxArg(source, k)) args.push_back(A(k, *a));
}

void copyQuantAttrs(const ir::Node& quant, std::vector<ir::Arg>& args, bool with_scale) {
  if (with_scale) copyAttrs(quant, args, {"scale"});
  copyAttrs(quant, args,
            {"kind", "group_size", "column_major_scales", "scale_ub", "divide", "min_abs", "min_scale", "scale_ue8m0"});
}

}  // namespace fxfuse::passes::fuse
