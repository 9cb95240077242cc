#include "tools/interpreter/compare.h"

#include <cmath>

#include <fmt/format.h>

namespace fxfuse::interp {

Tolerance defaultTolerance(DType t) {
  switch (t) {
    case DType::BF16: return {1e-2, 1e-2};
    case DType::F16: return {2e-3, 2e-3};
    case DType::F32: return {1e-4, 1e-4};
    case DType::F64: return {1e-7, 1e-7};
    default: return {0, 0};
  }
}

OutputReport compareValues(const std::string& name, const RValue& ref, const RValue& got, const CompareOptions& opts) {
  OutputReport r;
  r.name = name;
  r.type = ref.describe();
  if (ref.kind != got.kind) {
    r.pass = false;
    r.note = fmt::format("kinds differ: {} vs {}", ref.describe(), got.describe());
    return r;
  }
  if (!ref.isTensor()) {
    r.elements = 1;
    bool eq = ref.describe() == got.describe();
    if (ref.isNumber() && got.isNumber()) eq = ref.number() == got.number() || (std::isnan(ref.number()) && std::isnan(got.number()));
    if (!eq) {
      r.pass = false;
      r.mismatches = 1;
      r.mismatch_frac = 1;
      r.note = fmt::format("{} vs {}", ref.describe(), got.describe());
    }
    r.tolerance = "exact";
    return r;
  }
  const Tensor& a = ref.t;
  const Tensor& b = got.t;
  if (a.shape != b.shape || a.dtype != b.dtype) {
    r.pass = false;
    r.note = fmt::format("reference is {}, got {}", a.describe(), b.describe());
    return r;
  }
  std::vector<double> va = a.values(), vb = b.values();
  r.elements = static_cast<int64_t>(va.size());
  DType t = a.dtype;
  bool fp8 = ir::isFp8(t);
  bool exact = category(t) != Category::Float;
  Tolerance tol = defaultTolerance(t);
  if (opts.atol) tol.atol = *opts.atol;
  if (opts.rtol) tol.rtol = *opts.rtol;
  for (size_t i = 0; i < va.size(); ++i) {
    double x = va[i], y = vb[i];
    if (std::isnan(x)) ++r.ref_nan;
    if (std::isnan(y) && !std::isnan(x)) ++r.got_nan_only;
    bool both_nan = std::isnan(x) && std::isnan(y);
    double diff = both_nan ? 0 : (x == y ? 0 : std::fabs(x - y));
    if (std::isnan(diff)) diff = INFINITY;
    double rel = diff == 0 ? 0 : diff / std::max(std::fabs(x), 1e-30);
    if (diff > r.max_abs) r.max_abs = diff;
    if (rel > r.max_rel) r.max_rel = rel;
    bool bad;
    if (fp8) {
      int64_t steps = stepDistance(x, y, t);
      if (steps > 0) ++r.fp8_differing;
      if (steps > r.fp8_max_step) r.fp8_max_step = steps;
      bad = steps > opts.fp8_max_steps;
    } else if (exact) {
      bad = !(x == y || both_nan);
    } else {
      bad = !(both_nan || x == y || diff <= tol.atol + tol.rtol * std::fabs(x));
    }
    if (bad) ++r.mismatches;
  }
  r.mismatch_frac = r.elements ? static_cast<double>(r.mismatches) / static_cast<double>(r.elements) : 0;
  r.pass = r.mismatch_frac <= opts.max_mismatch_frac;
  if (fp8) {
    double frac = r.elements ? static_cast<double>(r.fp8_differing) / static_cast<double>(r.elements) : 0;
    if (frac > opts.fp8_max_step_frac) r.pass = false;
    r.tolerance = fmt::format("fp8: <= {} step on <= {:g}% of elements", opts.fp8_max_steps, 100 * opts.fp8_max_step_frac);
  } else if (exact) {
    r.tolerance = "exact";
  } else {
    r.tolerance = fmt::format("atol={:g} rtol={:g}", tol.atol, tol.rtol);
  }
  return r;
}

}  // namespace fxfuse::interp
