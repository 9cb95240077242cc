// Small helpers over nodes and values shared by the passes: schema-aware argument lookup,
// scalar reading, shape comparisons on symbolic sizes, target families (casts, views).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/op_schema.h"
#include "kernels/types.h"

namespace fxfuse::compiler {

// The schema of a node's target: module schemas first, then the built-in registry.
const ir::OpSchema* schemaOf(const ir::Node& n);
const ir::OpSchema* schemaOf(const ir::Module* m, std::string_view target);

// Argument by schema name, falling back to the schema position for unnamed arguments.
// Returns null when absent (the caller applies the schema default).
const ir::Attr* argOf(const ir::Node& n, std::string_view name);
ir::Value* valueArg(const ir::Node& n, std::string_view name);
std::optional<double> numberArg(const ir::Node& n, std::string_view name);
std::optional<int64_t> intArg(const ir::Node& n, std::string_view name);

// A tensor value's dtype/shape helpers.
inline ir::DType dtypeOf(const ir::Value* v) { return v ? v->type.dtype : ir::DType::DTYPE_UNSPECIFIED; }
bool hasKnownType(const ir::Value* v);
// Every dim statically known equal (same rank).
bool sameShape(const ir::Module& m, const std::vector<ir::SymExpr>& a, const std::vector<ir::SymExpr>& b);
// Number of elements if constant.
std::optional<int64_t> constNumel(const ir::Value* v);
// Last dim as a constant.
std::optional<int64_t> lastDim(const ir::Value* v);
// Normalizes a dim index against a rank (-1 -> rank-1); nullopt if out of range.
std::optional<int64_t> normDim(int64_t dim, size_t rank);
// A slice end that means "to the end": torch writes sys.maxsize (INT64_MAX); anything from
// 2^62 up is past every real size.
inline bool isSliceToTheEnd(const ir::SymExpr& end) { return end.isInt() && end.intValue() >= (int64_t{1} << 62); }

// Cast ops: prims.convert_element_type, aten._to_copy, aten.to.dtype(_layout), aten.type_as.
// Returns the cast input and sets *to to the destination dtype when `n` is a pure dtype
// cast (no device/layout/memory-format change).
ir::Value* castInput(const ir::Node& n, ir::DType* to);
bool isCast(const ir::Node& n);
// Exact widening to fp32 of a 16-bit float (or f32 -> f32).
bool isExactWidening(ir::DType from, ir::DType to);
// If `v` is produced by a widening cast of a 16-bit value, that value; else v.
ir::Value* stripWidening(ir::Value* v);

// Users of `v` in node order of the graph (deduplicated).
std::vector<ir::Node*> usersOf(const ir::Value* v);
// True if the only uses of `v` are by node `user` (one or more arguments) and no graph output.
bool onlyUsedBy(const ir::Value* v, const ir::Node* user);

// Target with the `torch.ops.` prefix and `.default` overload removed, for messages.
std::string shortTarget(const std::string& target);

// Float comparison with relative tolerance.
bool approxEqual(double a, double b, double rel = 1e-6);

// fxfuse op target from its short name: "rms_norm" -> "fxfuse.rms_norm.default".
inline std::string fxfuseTarget(std::string_view short_name) {
  return "fxfuse." + std::string(short_name) + ".default";
}
// Short name of an fxfuse op target, or empty.
std::string fxfuseName(const std::string& target);

constexpr double kFp8Max = kernels::kFp8E4m3Max;  // kernels/types.h is the home of both
constexpr double kFp8MinScale = kernels::kFp8MinScale;

}  // namespace fxfuse::compiler
