#include "tools/interpreter/value.h"

#include <fmt/format.h>

#include <cmath>

namespace fxfuse::interp {

std::string RValue::describe() const {
  switch (kind) {
    case Kind::None: return "None";
    case Kind::Tensor: return t.describe();
    case Kind::Int: return std::to_string(i);
    case Kind::Float: return fmt::format("{}", f);
    case Kind::Bool: return b ? "True" : "False";
    case Kind::Str: return "'" + s + "'";
    case Kind::DType: return std::string(ir::dtypeName(dt));
    case Kind::List: {
      std::string out = "[";
      for (size_t k = 0; k < list.size(); ++k) out += (k ? ", " : "") + list[k].describe();
      return out + "]";
    }
    case Kind::Op: return "@" + s;
    case Kind::Other: return "<other>";
  }
  return "?";
}

std::optional<int64_t> truncatedInt64(double v) {
  constexpr double kTwoTo63 = 9223372036854775808.0;
  if (!(v >= -kTwoTo63 && v < kTwoTo63)) return std::nullopt;  // NaN fails both comparisons
  return static_cast<int64_t>(v);
}

namespace {

// A float that holds an integer int64 can represent, as that integer.
std::optional<int64_t> integralFloat(double f) {
  if (!(std::floor(f) == f)) return std::nullopt;
  return truncatedInt64(f);
}

}  // namespace

std::optional<int64_t> integerOf(const RValue& v) {
  if (v.kind == RValue::Kind::Int) return v.i;
  if (v.kind == RValue::Kind::Bool) return v.b ? 1 : 0;
  if (v.kind == RValue::Kind::Float) return integralFloat(v.f);
  if (v.isTensor() && v.t.numel() == 1) return integralFloat(v.t.item());
  return std::nullopt;
}

Category category(DType t) {
  if (t == DType::BOOL) return Category::Bool;
  if (ir::isFloating(t)) return Category::Float;
  return Category::Int;
}

namespace {

int floatRank(DType t) {
  switch (t) {
    case DType::F64: return 5;
    case DType::F32: return 4;
    case DType::BF16:
    case DType::F16: return 3;
    default: return 1;  // fp8 and friends
  }
}

bool isSigned(DType t) { return t == DType::I8 || t == DType::I16 || t == DType::I32 || t == DType::I64; }

}  // namespace

DType promoteTypes(DType a, DType b) {
  if (a == DType::DTYPE_UNSPECIFIED) return b;
  if (b == DType::DTYPE_UNSPECIFIED || a == b) return a;
  Category ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == Category::Float) {
    int ra = floatRank(a), rb = floatRank(b);
    if (ra != rb) return ra > rb ? a : b;
    return DType::F32;  // bf16 + f16, or two different fp8 types
  }
  // Integers.
  int wa = ir::dtypeBytes(a), wb = ir::dtypeBytes(b);
  bool sa = isSigned(a), sb = isSigned(b);
  if (sa == sb) return wa >= wb ? a : b;
  // Mixed signedness: the signed type if strictly wider, else the next signed width.
  DType s = sa ? a : b, u = sa ? b : a;
  if (ir::dtypeBytes(s) > ir::dtypeBytes(u)) return s;
  switch (ir::dtypeBytes(u)) {
    case 1: return DType::I16;
    case 2: return DType::I32;
    default: return DType::I64;
  }
}

namespace {

DType combineCategories(DType higher, DType lower) {
  if (higher == DType::DTYPE_UNSPECIFIED) return lower;
  if (lower == DType::DTYPE_UNSPECIFIED) return higher;
  if (category(higher) == Category::Float) return higher;
  if (higher == DType::BOOL || category(lower) == Category::Float) return promoteTypes(higher, lower);
  return higher;
}

}  // namespace

DType resultType(const std::vector<const RValue*>& operands) {
  DType dim = DType::DTYPE_UNSPECIFIED, zero = DType::DTYPE_UNSPECIFIED, wrapped = DType::DTYPE_UNSPECIFIED;
  for (const RValue* v : operands) {
    if (!v) continue;
    if (v->kind == RValue::Kind::Tensor) {
      if (v->t.dim() == 0) {
        zero = promoteTypes(zero, v->t.dtype);
      } else {
        dim = promoteTypes(dim, v->t.dtype);
      }
    } else if (v->kind == RValue::Kind::Float) {
      wrapped = promoteTypes(wrapped, defaultFloat());
    } else if (v->kind == RValue::Kind::Int) {
      wrapped = promoteTypes(wrapped, DType::I64);
    } else if (v->kind == RValue::Kind::Bool) {
      wrapped = promoteTypes(wrapped, DType::BOOL);
    }
  }
  return combineCategories(dim, combineCategories(zero, wrapped));
}

}  // namespace fxfuse::interp
