// Bit-exact fp32 <-> bf16 / fp16 / e4m3fn conversions (round to nearest, ties to even).
#include "kernels/reference/numerics.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace fxfuse::kernels::reference {
namespace {

uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Round-half-even of a non-negative double that is exactly representable (a scaled float), to
// an integer. Does not depend on the FPU rounding mode.
uint32_t RoundHalfEven(double value) {
  const double floor_value = std::floor(value);
  const double fraction = value - floor_value;
  uint32_t result = static_cast<uint32_t>(floor_value);
  if (fraction > 0.5 || (fraction == 0.5 && (result & 1u) != 0)) ++result;
  return result;
}

}  // namespace

uint16_t FloatToBFloat16Bits(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

float BFloat16BitsToFloat(uint16_t bits) { return BitsToFloat(static_cast<uint32_t>(bits) << 16); }

uint16_t FloatToHalfBits(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);  // NaN
  if (magnitude >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 65520: inf
  if (magnitude < 0x38800000u) {
    // Below 2^-14: subnormal half, in units of 2^-24 (1024 units is the smallest normal, whose
    // encoding 0x0400 follows on from the subnormals).
    const double units = static_cast<double>(BitsToFloat(magnitude)) * 16777216.0;  // exact
    return static_cast<uint16_t>(sign | RoundHalfEven(units));
  }
  // Normal: drop 13 mantissa bits with round-half-even, rebias the exponent (127 -> 15).
  const uint32_t rounded = magnitude + 0x0FFFu + ((magnitude >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

float HalfBitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return BitsToFloat(sign | 0x7F800000u | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;  // 2^-24
    return sign != 0 ? -magnitude : magnitude;
  }
  return BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint8_t FloatToE4m3Bits(float value, bool saturate) {
  const uint32_t bits = FloatBits(value);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return 0x7F;  // NaN
  const uint8_t overflow = saturate ? static_cast<uint8_t>(sign | 0x7E) : 0x7F;
  if (magnitude < 0x3C800000u) {
    // Below 2^-6: subnormal, in units of 2^-9 (exact in double); 8 units is the smallest
    // normal, whose code 0x08 follows on from the subnormals.
    const double units = static_cast<double>(BitsToFloat(magnitude)) * 512.0;
    return static_cast<uint8_t>(sign | RoundHalfEven(units));
  }
  if (magnitude >= 0x7F800000u) return overflow;  // inf
  // Normal: keep 3 of the 23 mantissa bits, round half to even (a carry moves into the
  // exponent), rebias the exponent (127 -> 7).
  const uint32_t rounded = magnitude + 0x7FFFFu + ((magnitude >> 20) & 1u);
  const int biased = static_cast<int>(rounded >> 23) - 127 + 7;
  const uint32_t mantissa = (rounded >> 20) & 7u;
  // S.1111.111 is NaN: the largest finite value is S.1111.110 = 448.
  if (biased > 15 || (biased == 15 && mantissa == 7)) return overflow;
  return static_cast<uint8_t>(sign | (static_cast<uint32_t>(biased) << 3) | mantissa);
}

float E4m3BitsToFloat(uint8_t bits) {
  if (IsE4m3NaN(bits)) return std::nanf("");
  const int exponent = (bits >> 3) & 0xF;
  const int mantissa = bits & 0x7;
  const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                        : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  return (bits & 0x80) != 0 ? -magnitude : magnitude;
}

uint16_t FloatToD16Bits(float value, DType dtype) {
  return dtype == DType::BF16 ? FloatToBFloat16Bits(value) : FloatToHalfBits(value);
}

float D16BitsToFloat(uint16_t bits, DType dtype) {
  return dtype == DType::BF16 ? BFloat16BitsToFloat(bits) : HalfBitsToFloat(bits);
}

float Round16(float value, DType dtype) {
  return D16BitsToFloat(FloatToD16Bits(value, dtype), dtype);
}

float ClampToFp8Range(float value) {
  return value > kFp8E4m3Max ? kFp8E4m3Max : (value < -kFp8E4m3Max ? -kFp8E4m3Max : value);
}

float DynamicScaleFromAbsMax(float absmax, float min_abs, float min_scale) {
  return std::fmax(std::fmax(absmax, min_abs) / kFp8E4m3Max, min_scale);
}

uint8_t QuantizeToE4m3(float value, float scale, bool divide) {
  const float scaled = divide ? value / scale : value * (1.0f / scale);
  return FloatToE4m3Bits(ClampToFp8Range(scaled), /*saturate=*/true);
}

namespace {
// Sign-magnitude bit patterns -> a monotonic integer line (+0 and -0 both map to 0).
int64_t SignMagnitudeToLine(uint32_t bits, uint32_t sign_bit) {
  const int64_t magnitude = static_cast<int64_t>(bits & (sign_bit - 1));
  return (bits & sign_bit) != 0 ? -magnitude : magnitude;
}
}  // namespace

int64_t D16UlpDistance(uint16_t a, uint16_t b) {
  return std::llabs(SignMagnitudeToLine(a, 0x8000u) - SignMagnitudeToLine(b, 0x8000u));
}

int64_t E4m3StepDistance(uint8_t a, uint8_t b) {
  return std::llabs(SignMagnitudeToLine(a, 0x80u) - SignMagnitudeToLine(b, 0x80u));
}

double Fp8GemmAccumulationFraction(int64_t K) {
  return std::max(static_cast<double>(std::max<int64_t>(K - 1, 0)) * std::ldexp(1.0, -21), std::ldexp(1.0, -12));
}

}  // namespace fxfuse::kernels::reference
