// Runtime values of the interpreter and torch's type promotion.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/interpreter/tensor.h"
#include "ir/graph.h"

namespace fxfuse::interp {

// A runtime value: a tensor, a Python scalar / SymInt / SymFloat / SymBool, a string, a
// dtype, a list of values, an op reference, or None.
struct RValue {
  enum class Kind : uint8_t { None, Tensor, Int, Float, Bool, Str, DType, List, Op, Other };
  Kind kind = Kind::None;
  Tensor t;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  DType dt = DType::DTYPE_UNSPECIFIED;
  std::vector<RValue> list;
  const ir::Attr* attr = nullptr;  // for Other (device, layout, memory format, graph)

  static RValue none() { return RValue{}; }
  static RValue ofTensor(Tensor x) { RValue v; v.kind = Kind::Tensor; v.t = std::move(x); return v; }
  static RValue ofInt(int64_t x) { RValue v; v.kind = Kind::Int; v.i = x; return v; }
  static RValue ofFloat(double x) { RValue v; v.kind = Kind::Float; v.f = x; return v; }
  static RValue ofBool(bool x) { RValue v; v.kind = Kind::Bool; v.b = x; return v; }
  static RValue ofStr(std::string x) { RValue v; v.kind = Kind::Str; v.s = std::move(x); return v; }
  static RValue ofList(std::vector<RValue> x) { RValue v; v.kind = Kind::List; v.list = std::move(x); return v; }

  bool isNone() const { return kind == Kind::None; }
  bool isTensor() const { return kind == Kind::Tensor; }
  bool isNumber() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  double number() const { return kind == Kind::Int ? static_cast<double>(i) : kind == Kind::Float ? f : b ? 1.0 : 0.0; }
  std::string describe() const;
};

// `v` truncated toward zero, when that fits int64; none for NaN, an infinity or a value at or
// past +-2^63 (converting those to int64 is undefined). The one home of that range test.
std::optional<int64_t> truncatedInt64(double v);

// The integer a number (or a one-element tensor) holds exactly; none for a fraction, a float
// outside int64, or anything else. Integers are read exactly, never through a double.
std::optional<int64_t> integerOf(const RValue& v);

// Type promotion categories.
enum class Category : uint8_t { Bool = 0, Int = 1, Float = 2 };
Category category(DType t);
DType promoteTypes(DType a, DType b);
// torch.result_type over tensors and Python scalars (dimensioned tensors, then zero-dim
// tensors, then wrapped numbers; a higher category from a lower-priority group promotes).
DType resultType(const std::vector<const RValue*>& operands);
inline DType defaultFloat() { return DType::F32; }

}  // namespace fxfuse::interp
