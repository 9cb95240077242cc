// Matching and checking helpers the fusion patterns share: the consumer FP8 quant of a
// value, the conditions of an RMSNorm feeding a fused kernel, the static-scale form, and
// copying a source node's attributes onto the fused op.
#pragma once

#include <initializer_list>
#include <string>
#include <variant>
#include <vector>

#include "ir/graph.h"
#include "passes/fuse/pattern.h"

namespace fxfuse::passes::fuse {

// Whether `n` is the canonical op `short_name` ("rms_norm").
bool isCanonical(const ir::Node* n, const char* short_name);

// The value argument `name` of a canonical op, or nullptr.
ir::Value* valueArg(const ir::Node& n, const char* name);

// The one quant_fp8 that reads `v` as its input, with no other use of `v`; or why not.
std::variant<ir::Node*, Rejection> onlyQuantUser(ir::Value* v);

// A norm (rms_norm / fused_add_rms_norm) whose `input` feeds a 16-bit fused kernel: input,
// weight, residual and output dtypes agree, and in vLLM-compatible mode eps is 1e-5 or 1e-6.
CheckResult checkNormForFusedKernel(const ir::Node& norm, ir::Value* input, const compiler::CompileOptions& opts);

// The quant's scale is a one-element f32 tensor.
CheckResult checkStaticScale(const ir::Node& quant);

// Appends the named attributes of `source` that are present, in the order given.
void copyAttrs(const ir::Node& source, std::vector<ir::Arg>& args, std::initializer_list<const char*> keys);

// Appends every quant attribute a fused quant op carries (with or without its scale).
void copyQuantAttrs(const ir::Node& quant, std::vector<ir::Arg>& args, bool with_scale);

std::string dtypeText(ir::DType d);

}  // namespace fxfuse::passes::fuse
