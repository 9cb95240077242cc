// Output comparison for `fxfuse verify` (docs/interpreter.md "Tolerances").
//
// Floating outputs: an element matches when |got - ref| <= atol + rtol * |ref| (NaN matches
// NaN, infinities match when equal); defaults by dtype follow vLLM's fusion tests: bf16
// 1e-2, f16 2e-3, f32 1e-4, f64 1e-7. FP8 outputs are compared in representable steps: an
// element is a mismatch when it is more than `fp8_max_steps` (1) steps away, and the
// output fails when more than `fp8_max_step_frac` (2%) of its elements differ at all.
// Integer and bool outputs must be equal.
#pragma once

#include <optional>
#include <string>

#include "tools/interpreter/value.h"

namespace fxfuse::interp {

struct CompareOptions {
  std::optional<double> atol, rtol;  // override the per-dtype defaults
  double max_mismatch_frac = 0.0;    // fraction of out-of-tolerance elements allowed
  int64_t fp8_max_steps = 1;
  double fp8_max_step_frac = 0.02;
};

struct Tolerance {
  double atol = 0, rtol = 0;
};
Tolerance defaultTolerance(DType t);

struct OutputReport {
  std::string name;
  std::string type;        // "bf16[64, 1024]"
  bool pass = true;
  double max_abs = 0, max_rel = 0;
  int64_t elements = 0;
  int64_t mismatches = 0;  // out of tolerance (FP8: more than fp8_max_steps apart)
  double mismatch_frac = 0;
  int64_t fp8_differing = 0;  // FP8: elements differing by >= 1 step
  int64_t fp8_max_step = 0;
  int64_t ref_nan = 0;     // NaN elements in the reference (poisoned/unwritten memory?)
  int64_t got_nan_only = 0;  // NaN in the other graph where the reference is a number
  std::string tolerance;   // description of what was applied
  std::string note;        // why it failed (shape/dtype mismatch)
};

OutputReport compareValues(const std::string& name, const RValue& ref, const RValue& got, const CompareOptions& opts);

}  // namespace fxfuse::interp
