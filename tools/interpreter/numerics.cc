#include "tools/interpreter/numerics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "ir/status.h"

namespace fxfuse::interp {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

struct Encoding {
  int ebits, bias, mbits;
  bool fnuz;     // NaN = 0x80, no negative zero, no inf
  bool ieee;     // all-ones exponent = inf/NaN (bf16, f16, e5m2)
  int total_bits;
};

const FloatFormat kBF16{7, -126, 3.38953138925153547590470800371487867e38, true};
const FloatFormat kF16{10, -14, 65504.0, true};
const FloatFormat kE4M3FN{3, -6, 448.0, false};
const FloatFormat kE5M2{2, -14, 57344.0, true};
const FloatFormat kE4M3FNUZ{3, -7, 240.0, false};
const FloatFormat kE5M2FNUZ{2, -15, 57344.0, false};

const Encoding* encoding(DType t) {
  static const Encoding bf16{8, 127, 7, false, true, 16};
  static const Encoding f16{5, 15, 10, false, true, 16};
  static const Encoding e4m3fn{4, 7, 3, false, false, 8};
  static const Encoding e5m2{5, 15, 2, false, true, 8};
  static const Encoding e4m3fnuz{4, 8, 3, true, false, 8};
  static const Encoding e5m2fnuz{5, 16, 2, true, false, 8};
  switch (t) {
    case DType::BF16: return &bf16;
    case DType::F16: return &f16;
    case DType::F8E4M3FN: return &e4m3fn;
    case DType::F8E5M2: return &e5m2;
    case DType::F8E4M3FNUZ: return &e4m3fnuz;
    case DType::F8E5M2FNUZ: return &e5m2fnuz;
    default: return nullptr;
  }
}

// The nonzero, non-NaN values of a one-byte float format with their bytes, sorted by value:
// toBits finds an exactly representable value by binary search instead of rounding it.
using ByteCodes = std::vector<std::pair<double, uint8_t>>;
const ByteCodes* byteCodes(DType t) {
  static const std::array<ByteCodes, 4> tables = [] {
    std::array<ByteCodes, 4> out;
    const DType types[4] = {DType::F8E4M3FN, DType::F8E5M2, DType::F8E4M3FNUZ, DType::F8E5M2FNUZ};
    for (size_t i = 0; i < 4; ++i) {
      for (uint64_t b = 0; b < 256; ++b) {
        const double v = fromBits(b, types[i]);
        if (v != 0 && !std::isnan(v)) out[i].push_back({v, static_cast<uint8_t>(b)});
      }
      std::sort(out[i].begin(), out[i].end());
    }
    return out;
  }();
  switch (t) {
    case DType::F8E4M3FN: return &tables[0];
    case DType::F8E5M2: return &tables[1];
    case DType::F8E4M3FNUZ: return &tables[2];
    case DType::F8E5M2FNUZ: return &tables[3];
    default: return nullptr;
  }
}

double roundFloatFormat(double v, const FloatFormat& f, bool fnuz) {
  double x = roundF32(v);
  if (std::isnan(x)) return kNaN;
  if (std::isinf(x)) return f.has_inf ? x : kNaN;
  double a = std::fabs(x);
  if (a == 0) return fnuz ? 0.0 : x;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1;
  if (exp < f.min_exponent) exp = f.min_exponent;
  double q = std::ldexp(1.0, exp - f.mantissa_bits);
  double r = std::nearbyint(a / q) * q;  // ties to even (default rounding mode)
  if (r > f.max_finite) return f.has_inf ? std::copysign(kInf, x) : kNaN;
  if (r == 0 && fnuz) return 0.0;
  return std::copysign(r, x);
}

int64_t wrapInt(double v, int bits, bool is_signed) {
  // Truncate toward zero, then reduce modulo 2^bits.
  double t = std::trunc(v);
  constexpr double kTwo64 = 18446744073709551616.0;
  uint64_t u;
  if (!std::isfinite(t)) {
    u = uint64_t{1} << 63;  // NaN and infinities: x86's "integer indefinite", what torch's CPU cast gives
  } else if (std::fabs(t) < 9.2e18) {
    u = static_cast<uint64_t>(static_cast<int64_t>(t));
  } else {
    double m = std::fmod(t, kTwo64);  // exact; negative for negative t
    if (m < 0) m += kTwo64;
    u = m >= kTwo64 ? 0 : static_cast<uint64_t>(m);
  }
  if (bits < 64) u &= (uint64_t{1} << bits) - 1;
  if (is_signed && bits < 64 && (u >> (bits - 1)) & 1) return static_cast<int64_t>(u | ~((uint64_t{1} << bits) - 1));
  return static_cast<int64_t>(u);
}

// bf16 by bit manipulation of the f32 value (the same RNE as c10::BFloat16).
double roundBF16(double v) {
  float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return kNaN;
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

const FloatFormat* floatFormat(DType t) {
  switch (t) {
    case DType::BF16: return &kBF16;
    case DType::F16: return &kF16;
    case DType::F8E4M3FN: return &kE4M3FN;
    case DType::F8E5M2: return &kE5M2;
    case DType::F8E4M3FNUZ: return &kE4M3FNUZ;
    case DType::F8E5M2FNUZ: return &kE5M2FNUZ;
    default: return nullptr;
  }
}

double maxFinite(DType t) {
  if (const FloatFormat* f = floatFormat(t)) return f->max_finite;
  if (t == DType::F32) return std::numeric_limits<float>::max();
  if (t == DType::F64) return std::numeric_limits<double>::max();
  return 0;
}

DType opmathType(DType t) {
  switch (t) {
    case DType::BF16:
    case DType::F16:
    case DType::F8E4M3FN:
    case DType::F8E5M2:
    case DType::F8E4M3FNUZ:
    case DType::F8E5M2FNUZ:
    case DType::F8E8M0FNU: return DType::F32;
    default: return t;
  }
}

double roundTo(double v, DType t) {
  switch (t) {
    case DType::F64: return v;
    case DType::F32: return roundF32(v);
    case DType::BF16: return roundBF16(v);
    case DType::F16: return roundFloatFormat(v, kF16, false);
    case DType::F8E4M3FN: return roundFloatFormat(v, kE4M3FN, false);
    case DType::F8E5M2: return roundFloatFormat(v, kE5M2, false);
    case DType::F8E4M3FNUZ: return roundFloatFormat(v, kE4M3FNUZ, true);
    case DType::F8E5M2FNUZ: return roundFloatFormat(v, kE5M2FNUZ, true);
    case DType::F8E8M0FNU: {
      double x = roundF32(v);
      if (!(x > 0) || std::isinf(x)) return kNaN;
      int e = 0;
      double m = std::frexp(x, &e);  // x = m*2^e, m in [0.5,1): round log2 to nearest, ties up
      int ex = m >= std::sqrt(0.5) ? e : e - 1;
      if (ex < -127 || ex > 127) return kNaN;
      return std::ldexp(1.0, ex);
    }
    case DType::BOOL: return std::isnan(v) ? v : (v != 0 ? 1.0 : 0.0);
    default: break;
  }
  if (std::isnan(v)) return v;
  switch (t) {
    case DType::U8: return static_cast<double>(wrapInt(v, 8, false));
    case DType::I8: return static_cast<double>(wrapInt(v, 8, true));
    case DType::I16: return static_cast<double>(wrapInt(v, 16, true));
    case DType::U16: return static_cast<double>(wrapInt(v, 16, false));
    case DType::I32: return static_cast<double>(wrapInt(v, 32, true));
    case DType::U32: return static_cast<double>(wrapInt(v, 32, false));
    case DType::I64:
    case DType::U64: return std::isinf(v) ? v : std::trunc(v);
    default: return v;
  }
}

uint64_t toBits(double v, DType t) {
  if (t == DType::F32) {
    float f = static_cast<float>(v);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  }
  if (t == DType::F64) {
    uint64_t u;
    std::memcpy(&u, &v, 8);
    return u;
  }
  if (ir::isIntegral(t, true)) {
    int bytes = ir::dtypeBytes(t);
    // Two's complement of the value; one outside [-2^63, 2^64) (or NaN) has no 64-bit pattern.
    if (!(v >= -9223372036854775808.0 && v < 18446744073709551616.0))
      fail("integer value {} has no {}-bit pattern", v, 8 * bytes);
    auto i = v >= 9223372036854775808.0 ? static_cast<uint64_t>(v) : static_cast<uint64_t>(static_cast<int64_t>(v));
    return bytes >= 8 ? i : (i & ((uint64_t{1} << (8 * bytes)) - 1));
  }
  if (t == DType::BF16) {  // fast path: a bf16 value is a float whose low 16 bits are zero
    const float f = static_cast<float>(v);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0xFFFFu) == 0 && !std::isnan(f)) return u >> 16;
  }
  if (const ByteCodes* codes = v != 0 && !std::isnan(v) ? byteCodes(t) : nullptr) {  // fast path: exact values
    auto it = std::lower_bound(codes->begin(), codes->end(), std::make_pair(v, uint8_t{0}));
    if (it != codes->end() && it->first == v) return it->second;
  }
  const Encoding* enc = encoding(t);
  if (!enc) return 0;
  v = roundTo(v, t);
  const uint64_t sign_bit = uint64_t{1} << (enc->total_bits - 1);
  const uint64_t emax_field = (uint64_t{1} << enc->ebits) - 1;
  if (std::isnan(v)) {
    if (enc->fnuz) return sign_bit;
    if (enc->ieee) return (emax_field << enc->mbits) | (uint64_t{1} << (enc->mbits - 1));
    return (sign_bit - 1);  // e4m3fn: 0x7F
  }
  uint64_t sign = std::signbit(v) && !enc->fnuz ? sign_bit : 0;
  double a = std::fabs(v);
  if (std::isinf(a)) return sign | (emax_field << enc->mbits);
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);
  int exp = e - 1;
  int min_exp = 1 - enc->bias;
  uint64_t efield, mant;
  if (exp < min_exp) {
    efield = 0;
    mant = static_cast<uint64_t>(std::ldexp(a, enc->mbits - min_exp));
  } else {
    efield = static_cast<uint64_t>(exp + enc->bias);
    mant = static_cast<uint64_t>(std::ldexp(a, enc->mbits - exp)) - (uint64_t{1} << enc->mbits);
  }
  return sign | (efield << enc->mbits) | mant;
}

double fromBits(uint64_t bits, DType t) {
  if (t == DType::F32) {
    uint32_t u = static_cast<uint32_t>(bits);
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  if (t == DType::F64) {
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  if (t == DType::BOOL) return bits ? 1.0 : 0.0;
  if (ir::isIntegral(t, false)) {
    int nb = 8 * ir::dtypeBytes(t);
    bool is_signed = t == DType::I8 || t == DType::I16 || t == DType::I32 || t == DType::I64;
    if (nb < 64) {
      bits &= (uint64_t{1} << nb) - 1;
      if (is_signed && ((bits >> (nb - 1)) & 1)) return static_cast<double>(static_cast<int64_t>(bits | ~((uint64_t{1} << nb) - 1)));
      return static_cast<double>(bits);
    }
    return is_signed ? static_cast<double>(static_cast<int64_t>(bits)) : static_cast<double>(bits);
  }
  const Encoding* enc = encoding(t);
  if (!enc) return kNaN;
  const uint64_t sign_bit = uint64_t{1} << (enc->total_bits - 1);
  bits &= (sign_bit << 1) - 1;
  const uint64_t emax_field = (uint64_t{1} << enc->ebits) - 1;
  bool neg = bits & sign_bit;
  uint64_t efield = (bits >> enc->mbits) & emax_field;
  uint64_t mant = bits & ((uint64_t{1} << enc->mbits) - 1);
  if (enc->fnuz && bits == sign_bit) return kNaN;
  if (enc->ieee && efield == emax_field) return mant ? kNaN : (neg ? -kInf : kInf);
  if (!enc->ieee && !enc->fnuz && efield == emax_field && mant == ((uint64_t{1} << enc->mbits) - 1)) return kNaN;
  double a;
  if (efield == 0) {
    a = std::ldexp(static_cast<double>(mant), 1 - enc->bias - enc->mbits);
  } else {
    a = std::ldexp(static_cast<double>(mant + (uint64_t{1} << enc->mbits)), static_cast<int>(efield) - enc->bias - enc->mbits);
  }
  return neg ? -a : a;
}

uint16_t bf16Bits(double v) { return static_cast<uint16_t>(toBits(v, DType::BF16)); }
uint16_t f16Bits(double v) { return static_cast<uint16_t>(toBits(v, DType::F16)); }
uint8_t fp8Bits(double v, DType t) { return static_cast<uint8_t>(toBits(v, t)); }

int64_t stepDistance(double a, double b, DType t) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : std::numeric_limits<int64_t>::max();
  if (ir::isIntegral(t, true)) {
    double d = std::fabs(a - b);
    return d > 9e18 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(d);
  }
  auto ordinal = [&](double v) -> int64_t {
    if (t == DType::F64) {
      uint64_t u;
      std::memcpy(&u, &v, 8);
      int64_t mag = static_cast<int64_t>(u & ~(uint64_t{1} << 63));
      return (u >> 63) ? -mag : mag;
    }
    DType tt = encoding(t) ? t : DType::F32;
    uint64_t u = toBits(roundTo(v, tt), tt);
    int total = tt == DType::F32 ? 32 : encoding(tt)->total_bits;
    uint64_t sign_bit = uint64_t{1} << (total - 1);
    int64_t mag = static_cast<int64_t>(u & (sign_bit - 1));
    return (u & sign_bit) ? -mag : mag;
  };
  int64_t oa = ordinal(a), ob = ordinal(b);
  return oa > ob ? oa - ob : ob - oa;
}

}  // namespace fxfuse::interp
