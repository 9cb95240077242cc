// Elementwise ops: arithmetic, comparisons, logical/bitwise ops, where/masked_fill,
// clamp, activations, triu/tril and casts.
#include <cmath>
#include <limits>

#include "tools/interpreter/ops_common.h"

namespace fxfuse::interp {
namespace {

using namespace ops;

constexpr double kPi = 3.14159265358979323846;

bool isFloatType(DType t) { return category(t) == Category::Float; }

// Binary op over self/other (either may be a scalar) with torch's promotion.
enum class Promo { Same, IntToFloat, Bool };

template <typename F>
void binary(Call& c, const RValue& a, const RValue& b, Promo promo, F f) {
  Operand oa = operand(a, "self"), ob = operand(b, "other");
  DType common = resultType({&a, &b});
  if (promo == Promo::IntToFloat && !isFloatType(common)) common = defaultFloat();
  DType out = promo == Promo::Bool ? DType::BOOL : common;
  Operand both[2] = {oa, ob};
  Shape shape = broadcastOperands(both, 2);
  Tensor r = c.alloc(0, shape, out);
  mapInto<2>(r, {oa, ob}, common, [&](const std::array<double, 2>& x) { return f(x[0], x[1], common); });
  c.out(0, r);
}

template <typename F>
void regBinary(OpTable& t, const std::string& name, Promo promo, F f) {
  t.add(name, [promo, f](Call& c) { binary(c, c.get("self", 0), c.get("other", 1), promo, f); });
}

template <typename F>
void unary(Call& c, bool int_to_float, F f, DType out_override = DType::DTYPE_UNSPECIFIED) {
  Tensor x = c.tensor("self", 0);
  DType common = x.dtype;
  if (int_to_float && !isFloatType(common)) common = defaultFloat();
  DType out = out_override == DType::DTYPE_UNSPECIFIED ? common : out_override;
  Tensor r = c.alloc(0, x.shape, out);
  mapInto<1>(r, {Operand{&x, 0}}, common, [&](const std::array<double, 1>& v) { return f(v[0], common); });
  c.out(0, r);
}

template <typename F>
void regUnary(OpTable& t, const std::string& name, bool int_to_float, F f) {
  t.add(name, [int_to_float, f](Call& c) { unary(c, int_to_float, f); });
}

double truthy(double v) { return v != 0 ? 1.0 : 0.0; }

// C++'s truncating integer quotient and remainder of two int64 elements, refusing what C++
// leaves undefined: division by zero, and INT64_MIN / -1 (its quotient is not an int64).
int64_t truncQuotient(double a, double b) {
  const int64_t x = asI64(a), y = asI64(b);
  if (y == 0) fail("integer division by zero");
  if (y == -1 && x == std::numeric_limits<int64_t>::min()) fail("integer division overflows int64 ({} / -1)", x);
  return x / y;
}

int64_t truncRemainder(double a, double b) {
  const int64_t x = asI64(a), y = asI64(b);
  if (y == 0) fail("integer division by zero");
  return y == -1 ? 0 : x % y;
}

double floorDiv(double a, double b, DType t) {
  if (!isFloatType(t)) {
    int64_t q = truncQuotient(a, b), r = truncRemainder(a, b);
    if (r != 0 && ((r < 0) != (asI64(b) < 0))) --q;
    return static_cast<double>(q);
  }
  if (b == 0) return a / b;
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  double fl;
  if (div != 0) {
    fl = std::floor(div);
    if (div - fl > 0.5) fl += 1.0;
  } else {
    fl = std::copysign(0.0, a / b);
  }
  return fl;
}

double remainderOp(double a, double b, DType t) {
  if (!isFloatType(t)) {
    int64_t r = truncRemainder(a, b);
    if (r != 0 && ((r < 0) != (asI64(b) < 0))) r += asI64(b);
    return static_cast<double>(r);
  }
  double m = std::fmod(a, b);
  if (m != 0 && ((b < 0) != (m < 0))) m += b;
  return m;
}

double clampOne(double x, const double* lo, const double* hi) {
  if (std::isnan(x)) return x;
  if (lo) x = std::isnan(*lo) ? *lo : std::max(x, *lo);
  if (hi) x = std::isnan(*hi) ? *hi : std::min(x, *hi);
  return x;
}

double geluErf(double x) { return x * 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))); }
double geluTanh(double x) {
  double inner = std::sqrt(2.0 / kPi) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(inner));
}

// Casting: the result dtype from the dtype arguments, else the recorded output dtype.
void castOp(Call& c, std::optional<DType> dt, bool may_alias) {
  Tensor x = c.tensor(c.find("self") ? "self" : "a", 0);
  DType to = dt ? *dt : c.outDType(0, x.dtype);
  if (may_alias && to == x.dtype && !c.flag("copy", false)) {
    c.out(0, x);
    return;
  }
  // _to_copy keeps the input's strides when it is dense (memory_format=preserve).
  Tensor r;
  if (x.isNonOverlappingAndDense() && !x.isContiguous()) {
    r = Tensor::emptyStrided(x.shape, x.strides, to, kNaN);
  } else {
    r = c.alloc(0, x.shape, to);
  }
  copyInto(r, x);
  c.out(0, r);
}

void triangle(Call& c, bool upper) {
  Tensor x = c.tensor("self", 0);
  int64_t k = c.integer("diagonal", 0, 1);
  if (x.dim() < 2) fail("{} needs at least 2 dims, got {}", upper ? "triu" : "tril", x.describe());
  Tensor r = c.alloc(0, x.shape, x.dtype);
  std::vector<double> v = x.values();
  int64_t rows = x.shape[x.dim() - 2], cols = x.shape[x.dim() - 1];
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t col = static_cast<int64_t>(i) % cols;
    int64_t row = (static_cast<int64_t>(i) / cols) % rows;
    bool keep = upper ? col - row >= k : col - row <= k;
    if (!keep) v[i] = 0;
  }
  writeValues(r, v);
  c.out(0, r);
}

}  // namespace

namespace {

// Arithmetic: add/sub/mul/div/pow and their variants, in opmath with one rounding.
void registerArithmeticOps(OpTable& t) {
  // ------------------------------------------------------------------ arithmetic
  auto addLike = [](double sign) {
    return [sign](Call& c) {
      const RValue& a = c.get("self", 0);
      const RValue& b = c.get("other", 1);
      double alpha = c.number("alpha", 1.0, 2);
      binary(c, a, b, Promo::Same, [alpha, sign](double x, double y, DType common) {
        if (alpha == 1.0) return sign > 0 ? x + y : x - y;
        double al = roundTo(alpha, opmathType(common));
        return sign > 0 ? x + al * y : x - al * y;
      });
    };
  };
  t.add("aten.add", addLike(1));
  t.add("aten.sub", addLike(-1));
  t.add("aten.rsub", [](Call& c) {
    const RValue& a = c.get("self", 0);
    const RValue& b = c.get("other", 1);
    double alpha = c.number("alpha", 1.0, 2);
    binary(c, b, a, Promo::Same, [alpha](double x, double y, DType common) {
      return alpha == 1.0 ? x - y : x - roundTo(alpha, opmathType(common)) * y;
    });
  });
  regBinary(t, "aten.mul", Promo::Same, [](double x, double y, DType common) {
    return common == DType::BOOL ? truthy(x) * truthy(y) : x * y;
  });
  t.add("aten.div", [](Call& c) {
    std::string mode = c.str("rounding_mode", "", 2);
    const RValue& a = c.get("self", 0);
    const RValue& b = c.get("other", 1);
    if (mode.empty()) {
      binary(c, a, b, Promo::IntToFloat, [](double x, double y, DType) { return x / y; });
    } else if (mode == "trunc") {
      binary(c, a, b, Promo::Same, [](double x, double y, DType common) {
        if (!isFloatType(common)) return static_cast<double>(truncQuotient(x, y));
        return std::trunc(roundTo(x / y, opmathType(common)));
      });
    } else if (mode == "floor") {
      binary(c, a, b, Promo::Same, floorDiv);
    } else {
      fail("div: unknown rounding_mode '{}'", mode);
    }
  });
  t.alias("aten.true_divide", "aten.div");
  regBinary(t, "aten.floor_divide", Promo::Same, floorDiv);
  regBinary(t, "aten.remainder", Promo::Same, remainderOp);
  regBinary(t, "aten.fmod", Promo::Same, [](double x, double y, DType common) {
    if (!isFloatType(common)) return static_cast<double>(truncRemainder(x, y));
    return std::fmod(x, y);
  });
  t.add("aten.pow", [](Call& c) {
    const RValue& a = c.get("self", 0);
    const RValue& b = c.get("exponent", 1);
    binary(c, a, b, Promo::Same, [](double x, double y, DType common) {
      if (!isFloatType(common)) {
        if (y < 0) fail("integers to negative integer powers are not allowed");
        double r = 1;
        for (int64_t i = 0; i < asI64(y); ++i) r *= x;
        return r;
      }
      if (y == 2.0) return x * x;
      if (y == 0.5) return std::sqrt(x);
      if (y == -0.5) return 1.0 / std::sqrt(x);
      if (y == -1.0) return 1.0 / x;
      if (y == 1.0) return x;
      if (y == 3.0) return roundTo(x * x, opmathType(common)) * x;
      return std::pow(x, y);
    });
  });
  regBinary(t, "aten.maximum", Promo::Same, [](double x, double y, DType) {
    return std::isnan(x) || std::isnan(y) ? kNaN : std::max(x, y);
  });
  regBinary(t, "aten.minimum", Promo::Same, [](double x, double y, DType) {
    return std::isnan(x) || std::isnan(y) ? kNaN : std::min(x, y);
  });
  regBinary(t, "aten.atan2", Promo::IntToFloat, [](double x, double y, DType) { return std::atan2(x, y); });
  regBinary(t, "aten.hypot", Promo::IntToFloat, [](double x, double y, DType) { return std::hypot(x, y); });
}

// Comparisons, logic, NaN/inf tests, where, masked_fill and clamps.
void registerLogicAndSelectOps(OpTable& t) {
  // ------------------------------------------------------------------ comparisons, logic
  regBinary(t, "aten.eq", Promo::Bool, [](double x, double y, DType) { return x == y ? 1.0 : 0.0; });
  regBinary(t, "aten.ne", Promo::Bool, [](double x, double y, DType) { return x != y ? 1.0 : 0.0; });
  regBinary(t, "aten.lt", Promo::Bool, [](double x, double y, DType) { return x < y ? 1.0 : 0.0; });
  regBinary(t, "aten.le", Promo::Bool, [](double x, double y, DType) { return x <= y ? 1.0 : 0.0; });
  regBinary(t, "aten.gt", Promo::Bool, [](double x, double y, DType) { return x > y ? 1.0 : 0.0; });
  regBinary(t, "aten.ge", Promo::Bool, [](double x, double y, DType) { return x >= y ? 1.0 : 0.0; });
  regBinary(t, "aten.logical_and", Promo::Bool, [](double x, double y, DType) { return truthy(x) * truthy(y); });
  regBinary(t, "aten.logical_or", Promo::Bool, [](double x, double y, DType) {
    return (x != 0 || y != 0) ? 1.0 : 0.0;
  });
  regBinary(t, "aten.logical_xor", Promo::Bool, [](double x, double y, DType) {
    return ((x != 0) != (y != 0)) ? 1.0 : 0.0;
  });
  auto bitwise = [](int op) {
    return [op](double x, double y, DType common) {
      if (isFloatType(common)) fail("bitwise ops need integer or bool tensors");
      int64_t a = asI64(x), b = asI64(y);
      return static_cast<double>(op == 0 ? (a & b) : op == 1 ? (a | b) : (a ^ b));
    };
  };
  regBinary(t, "aten.bitwise_and", Promo::Same, bitwise(0));
  regBinary(t, "aten.bitwise_or", Promo::Same, bitwise(1));
  t.alias("aten.__or__", "aten.bitwise_or");
  regBinary(t, "aten.bitwise_xor", Promo::Same, bitwise(2));
  t.alias("aten.__and__", "aten.bitwise_and");
  t.alias("aten.__xor__", "aten.bitwise_xor");
  t.add("aten.logical_not", [](Call& c) {
    unary(c, false, [](double x, DType) { return x == 0 ? 1.0 : 0.0; }, DType::BOOL);
  });
  regUnary(t, "aten.bitwise_not", false, [](double x, DType common) {
    if (common == DType::BOOL) return x == 0 ? 1.0 : 0.0;
    if (isFloatType(common)) fail("bitwise_not needs an integer or bool tensor");
    return static_cast<double>(~asI64(x));
  });
  t.add("aten.isnan", [](Call& c) { unary(c, false, [](double x, DType) { return std::isnan(x) ? 1.0 : 0.0; }, DType::BOOL); });
  t.add("aten.isinf", [](Call& c) { unary(c, false, [](double x, DType) { return std::isinf(x) ? 1.0 : 0.0; }, DType::BOOL); });
  t.add("aten.isfinite", [](Call& c) {
    unary(c, false, [](double x, DType) { return std::isfinite(x) ? 1.0 : 0.0; }, DType::BOOL);
  });
  // ------------------------------------------------------------------ where / masked_fill / clamp
  t.add("aten.where", [](Call& c) {
    const RValue& cond = c.get("condition", 0);
    const RValue& a = c.get("self", 1);
    const RValue& b = c.get("other", 2);
    if (!cond.isTensor()) fail("where: condition must be a tensor");
    Operand oc = operand(cond, "condition"), oa = operand(a, "self"), ob = operand(b, "other");
    DType common = resultType({&a, &b});
    Operand all[3] = {oc, oa, ob};
    Shape shape = broadcastOperands(all, 3);
    Tensor r = c.alloc(0, shape, common);
    // The condition is read as truthiness (never converted to `common`).
    std::vector<double> cv = cond.t.values();
    Tensor ct = Tensor::empty(cond.t.shape, common, 0.0);
    for (size_t i = 0; i < cv.size(); ++i) (*ct.storage)[i] = cv[i] != 0 ? 1.0 : 0.0;
    mapInto<3>(r, {Operand{&ct, 0}, oa, ob}, common, [](const std::array<double, 3>& x) { return x[0] != 0 ? x[1] : x[2]; });
    c.out(0, r);
  });
  t.add("aten.masked_fill", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    Tensor m = c.tensor("mask", 1);
    const RValue& val = c.get("value", 2);
    double fill = val.isTensor() ? val.t.item() : val.number();
    Shape shape = broadcastShapes(x.shape, m.shape);
    if (shape != x.shape) fail("masked_fill: mask {} does not broadcast to {}", m.describe(), x.describe());
    Tensor r = c.alloc(0, shape, x.dtype);
    double f = roundTo(fill, x.dtype);
    mapInto<2>(r, {Operand{&x, 0}, Operand{&m, 0}}, x.dtype, [&](const std::array<double, 2>& v) {
      return v[1] != 0 ? f : v[0];
    });
    c.out(0, r);
  });
  auto clampImpl = [](Call& c, const RValue* lo, const RValue* hi) {
    const RValue& self = c.get("self", 0);
    Tensor x = c.tensor("self", 0);  // a number there is bad input, not a tensor without storage
    std::vector<const RValue*> ops = {&self};
    if (lo && !lo->isNone()) ops.push_back(lo);
    if (hi && !hi->isNone()) ops.push_back(hi);
    DType common = resultType(ops);
    bool has_lo = lo && !lo->isNone(), has_hi = hi && !hi->isNone();
    if (!has_lo && !has_hi) fail("clamp: at least one of min and max must be given");
    Operand o[3] = {Operand{&x, 0}, has_lo ? operand(*lo, "min") : Operand{nullptr, 0},
                    has_hi ? operand(*hi, "max") : Operand{nullptr, 0}};
    Shape shape = broadcastOperands(o, 3);
    Tensor r = c.alloc(0, shape, common);
    mapInto<3>(r, {o[0], o[1], o[2]}, common, [&](const std::array<double, 3>& v) {
      return clampOne(v[0], has_lo ? &v[1] : nullptr, has_hi ? &v[2] : nullptr);
    });
    c.out(0, r);
  };
  t.add("aten.clamp", [clampImpl](Call& c) { clampImpl(c, c.find("min", 1), c.find("max", 2)); });
  t.alias("aten.clip", "aten.clamp");
  t.add("aten.clamp_min", [clampImpl](Call& c) { clampImpl(c, c.find("min", 1), nullptr); });
  t.add("aten.clamp_max", [clampImpl](Call& c) { clampImpl(c, nullptr, c.find("max", 1)); });
  t.add("aten.hardtanh", [clampImpl](Call& c) {
    RValue lo = RValue::ofFloat(c.number("min_val", -1.0, 1)), hi = RValue::ofFloat(c.number("max_val", 1.0, 2));
    clampImpl(c, &lo, &hi);
  });
}

// Unary math, activations, triangles and dtype casts.
void registerUnaryMathAndCastOps(OpTable& t) {
  // ------------------------------------------------------------------ unary math
  regUnary(t, "aten.neg", false, [](double x, DType) { return -x; });
  regUnary(t, "aten.abs", false, [](double x, DType) { return std::fabs(x); });
  regUnary(t, "aten.relu", false, [](double x, DType) { return std::isnan(x) ? x : (x > 0 ? x : 0.0); });
  regUnary(t, "aten.sign", false, [](double x, DType) { return std::isnan(x) ? x : (x > 0) - (x < 0) + 0.0; });
  regUnary(t, "aten.floor", false, [](double x, DType) { return std::floor(x); });
  regUnary(t, "aten.ceil", false, [](double x, DType) { return std::ceil(x); });
  regUnary(t, "aten.trunc", false, [](double x, DType) { return std::trunc(x); });
  // round.decimals scales by 10^|decimals| around the rounding, as torch does (x * 10^d for
  // d > 0, x / 10^-d below); rounding half to even.
  t.add("aten.round", [](Call& c) {
    const int64_t decimals = c.integer("decimals", 0);
    const double scale = std::pow(10.0, static_cast<double>(std::llabs(decimals)));
    unary(c, false, [decimals, scale](double x, DType) {
      if (decimals > 0) return std::nearbyint(x * scale) / scale;
      if (decimals < 0) return std::nearbyint(x / scale) * scale;
      return std::nearbyint(x);
    });
  });
  regUnary(t, "aten.square", false, [](double x, DType) { return x * x; });
  regUnary(t, "aten.exp", true, [](double x, DType) { return std::exp(x); });
  regUnary(t, "aten.exp2", true, [](double x, DType) { return std::exp2(x); });
  regUnary(t, "aten.expm1", true, [](double x, DType) { return std::expm1(x); });
  regUnary(t, "aten.log", true, [](double x, DType) { return std::log(x); });
  regUnary(t, "aten.log2", true, [](double x, DType) { return std::log2(x); });
  regUnary(t, "aten.log10", true, [](double x, DType) { return std::log10(x); });
  regUnary(t, "aten.log1p", true, [](double x, DType) { return std::log1p(x); });
  // log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), stable for large |x|.
  regUnary(t, "aten.log_sigmoid", true, [](double x, DType) { return std::min(x, 0.0) - std::log1p(std::exp(-std::fabs(x))); });
  regUnary(t, "aten.sqrt", true, [](double x, DType) { return std::sqrt(x); });
  regUnary(t, "aten.rsqrt", true, [](double x, DType) { return 1.0 / std::sqrt(x); });
  regUnary(t, "aten.reciprocal", true, [](double x, DType) { return 1.0 / x; });
  regUnary(t, "aten.sin", true, [](double x, DType) { return std::sin(x); });
  regUnary(t, "aten.cos", true, [](double x, DType) { return std::cos(x); });
  regUnary(t, "aten.tan", true, [](double x, DType) { return std::tan(x); });
  regUnary(t, "aten.atan", true, [](double x, DType) { return std::atan(x); });
  regUnary(t, "aten.sinh", true, [](double x, DType) { return std::sinh(x); });
  regUnary(t, "aten.cosh", true, [](double x, DType) { return std::cosh(x); });
  regUnary(t, "aten.tanh", true, [](double x, DType) { return std::tanh(x); });
  regUnary(t, "aten.erf", true, [](double x, DType) { return std::erf(x); });
  // sigmoid and silu in opmath (f32) with a rounding after each step, as the kernels do.
  regUnary(t, "aten.sigmoid", true, [](double x, DType common) {
    DType om = opmathType(common);
    double e = roundTo(std::exp(-x), om);
    return 1.0 / roundTo(1.0 + e, om);
  });
  regUnary(t, "aten.silu", true, [](double x, DType common) {
    DType om = opmathType(common);
    if (om == DType::F32) return siluF32(x);
    return x / (1.0 + std::exp(-x));
  });
  t.add("aten.gelu", [](Call& c) {
    std::string approx = c.str("approximate", "none", 1);
    if (approx == "tanh") {
      unary(c, true, [](double x, DType) { return geluTanh(x); });
    } else {
      unary(c, true, [](double x, DType) { return geluErf(x); });
    }
  });
  t.add("aten.softplus", [](Call& c) {
    double beta = c.number("beta", 1.0, 1), thr = c.number("threshold", 20.0, 2);
    unary(c, true, [beta, thr](double x, DType) { return x * beta > thr ? x : std::log1p(std::exp(x * beta)) / beta; });
  });
  t.add("aten.leaky_relu", [](Call& c) {
    double slope = c.number("negative_slope", 0.01, 1);
    unary(c, false, [slope](double x, DType) { return x > 0 ? x : x * slope; });
  });
  t.add("aten.triu", [](Call& c) { triangle(c, true); });
  t.add("aten.tril", [](Call& c) { triangle(c, false); });
  // ------------------------------------------------------------------ casts
  t.add("prims.convert_element_type", [](Call& c) { castOp(c, c.dtype("dtype", 1), false); });
  t.add("aten._to_copy", [](Call& c) { castOp(c, c.dtype("dtype"), false); });
  t.add("aten.to", [](Call& c) {
    std::optional<DType> dt = c.dtype("dtype");
    if (!dt) {
      // to.dtype(self, dtype, ...) positional, to.other(self, other), to.device(...)
      const RValue* p1 = c.positional(1);
      if (p1 && p1->kind == RValue::Kind::DType) dt = p1->dt;
      if (p1 && p1->isTensor()) dt = p1->t.dtype;
      if (const RValue* o = c.find("other"); o && o->isTensor()) dt = o->t.dtype;
    }
    castOp(c, dt, true);
  });
  t.add("aten.type_as", [](Call& c) { castOp(c, c.tensor("other", 1).dtype, true); });
  t.add("aten._to_dtype", [](Call& c) { castOp(c, c.dtype("dtype", 1), false); });
}

}  // namespace

void registerElementwiseOps(OpTable& t) {
  registerArithmeticOps(t);
  registerLogicAndSelectOps(t);
  registerUnaryMathAndCastOps(t);
}

}  // namespace fxfuse::interp
