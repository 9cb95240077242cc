// CPU reference numerics against hand-computed bit patterns: RNE ties, subnormals, overflow,
// ±448, NaN. Runs in CI (no GPU).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/reference/numerics.h"

namespace fxfuse::kernels::reference {
namespace {

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST_CASE("bf16 rounding: exact values, ties to even, overflow, subnormals, NaN") {
  CHECK(FloatToBFloat16Bits(1.0f) == 0x3F80);
  CHECK(FloatToBFloat16Bits(-2.0f) == 0xC000);
  CHECK(FloatToBFloat16Bits(0.0f) == 0x0000);
  CHECK(FloatToBFloat16Bits(-0.0f) == 0x8000);
  // 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7: down.
  CHECK(FloatToBFloat16Bits(1.0f + 0x1p-8f) == 0x3F80);
  // 1 + 3*2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  CHECK(FloatToBFloat16Bits(1.0f + 3 * 0x1p-8f) == 0x3F82);
  // Just above the tie: up.
  CHECK(FloatToBFloat16Bits(1.0f + 0x1p-8f + 0x1p-20f) == 0x3F81);
  // Largest float rounds up past the largest bf16: +inf.
  CHECK(FloatToBFloat16Bits(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(FloatToBFloat16Bits(-std::numeric_limits<float>::infinity()) == 0xFF80);
  // fp32 subnormals keep their top bits: 0x00010000 -> 0x0001; ties to even.
  CHECK(FloatToBFloat16Bits(FromBits(0x00010000)) == 0x0001);
  CHECK(FloatToBFloat16Bits(FromBits(0x00008000)) == 0x0000);
  CHECK(FloatToBFloat16Bits(FromBits(0x00018000)) == 0x0002);
  const uint16_t nan = FloatToBFloat16Bits(std::nanf(""));
  CHECK(std::isnan(BFloat16BitsToFloat(nan)));
  CHECK(BFloat16BitsToFloat(0x3F81) == 1.0f + 0x1p-7f);
  CHECK(Round16(3.14159265f, DType::BF16) == 3.140625f);
}

TEST_CASE("fp16 rounding: exact values, ties to even, overflow to inf, subnormals, NaN") {
  CHECK(FloatToHalfBits(1.0f) == 0x3C00);
  CHECK(FloatToHalfBits(-2.0f) == 0xC000);
  CHECK(FloatToHalfBits(-0.0f) == 0x8000);
  CHECK(FloatToHalfBits(65504.0f) == 0x7BFF);
  CHECK(FloatToHalfBits(65519.0f) == 0x7BFF);
  CHECK(FloatToHalfBits(65520.0f) == 0x7C00);  // tie between 65504 (odd) and 2^16: up, to inf
  CHECK(FloatToHalfBits(1e6f) == 0x7C00);
  CHECK(FloatToHalfBits(-1e6f) == 0xFC00);
  // 1 + 2^-11: tie, down to even; 1 + 3*2^-11: tie, up to even.
  CHECK(FloatToHalfBits(1.0f + 0x1p-11f) == 0x3C00);
  CHECK(FloatToHalfBits(1.0f + 3 * 0x1p-11f) == 0x3C02);
  // Subnormals in units of 2^-24.
  CHECK(FloatToHalfBits(0x1p-24f) == 0x0001);
  CHECK(FloatToHalfBits(0x1p-25f) == 0x0000);      // tie between 0 and 1 unit: even (0)
  CHECK(FloatToHalfBits(3 * 0x1p-25f) == 0x0002);  // tie between 1 and 2 units: even (2)
  CHECK(FloatToHalfBits(0x1p-25f + 0x1p-40f) == 0x0001);
  CHECK(FloatToHalfBits(0x1p-14f) == 0x0400);                // smallest normal
  CHECK(FloatToHalfBits(0x1p-14f - 0x1p-26f) == 0x0400);     // rounds up into the normals
  CHECK(FloatToHalfBits(-0x1p-24f) == 0x8001);
  CHECK(std::isnan(HalfBitsToFloat(FloatToHalfBits(std::nanf("")))));
  CHECK(HalfBitsToFloat(0x0001) == 0x1p-24f);
  CHECK(HalfBitsToFloat(0x7BFF) == 65504.0f);
  CHECK(std::isinf(HalfBitsToFloat(0x7C00)));
  CHECK(Round16(3.14159265f, DType::F16) == 3.140625f);
}

TEST_CASE("fp16 and bf16 round-trip every bit pattern") {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float h = HalfBitsToFloat(bits);
    if (!std::isnan(h)) REQUIRE(FloatToHalfBits(h) == bits);
    const float bf = BFloat16BitsToFloat(bits);
    if (!std::isnan(bf)) REQUIRE(FloatToBFloat16Bits(bf) == bits);
  }
}

TEST_CASE("e4m3fn conversion: normals, ties, subnormals, ±448, saturation, NaN") {
  CHECK(FloatToE4m3Bits(1.0f) == 0x38);
  CHECK(FloatToE4m3Bits(-1.0f) == 0xB8);
  CHECK(FloatToE4m3Bits(0.0f) == 0x00);
  CHECK(FloatToE4m3Bits(-0.0f) == 0x80);
  CHECK(FloatToE4m3Bits(448.0f) == 0x7E);
  CHECK(FloatToE4m3Bits(-448.0f) == 0xFE);
  CHECK(FloatToE4m3Bits(240.0f) == 0x77);  // 1.875 * 2^7
  CHECK(FloatToE4m3Bits(0.5f) == 0x30);
  CHECK(FloatToE4m3Bits(0.25f) == 0x28);
  // Ties: 1.0625 is halfway between 1.0 (mantissa 0) and 1.125 (1): even, down.
  CHECK(FloatToE4m3Bits(1.0625f) == 0x38);
  // 1.1875 is halfway between 1.125 (1) and 1.25 (2): even, up.
  CHECK(FloatToE4m3Bits(1.1875f) == 0x3A);
  CHECK(FloatToE4m3Bits(1.0625f + 0x1p-12f) == 0x39);
  // 1.9375 is halfway between 1.875 (7) and 2.0: even, up into the next binade.
  CHECK(FloatToE4m3Bits(1.9375f) == 0x40);
  // Top binade (2^8..448) in steps of 32: 416 is 0x7D; 432 is halfway between 416 (0x7D) and
  // 448 (0x7E): even, 448; 400 is halfway between 384 (0x7C) and 416: even, 384.
  CHECK(FloatToE4m3Bits(416.0f) == 0x7D);
  CHECK(FloatToE4m3Bits(432.0f) == 0x7E);
  CHECK(FloatToE4m3Bits(431.0f) == 0x7D);
  CHECK(FloatToE4m3Bits(400.0f) == 0x7C);
  // Subnormals in units of 2^-9.
  CHECK(FloatToE4m3Bits(0x1p-9f) == 0x01);
  CHECK(FloatToE4m3Bits(0x1p-10f) == 0x00);      // tie between 0 and 1 unit: 0
  CHECK(FloatToE4m3Bits(3 * 0x1p-10f) == 0x02);  // tie between 1 and 2 units: 2
  CHECK(FloatToE4m3Bits(7 * 0x1p-9f) == 0x07);
  CHECK(FloatToE4m3Bits(0x1p-6f) == 0x08);                 // smallest normal
  CHECK(FloatToE4m3Bits(15 * 0x1p-10f) == 0x08);           // 7.5 units: tie, up to 8 units
  CHECK(FloatToE4m3Bits(-0x1p-9f) == 0x81);
  CHECK(FloatToE4m3Bits(1e-6f) == 0x00);
  // Beyond 448: satfinite keeps ±448, the non-saturating (torch) cast gives NaN.
  CHECK(FloatToE4m3Bits(464.0f) == 0x7E);  // tie between 448 and "480": even (448)
  CHECK(FloatToE4m3Bits(465.0f, /*saturate=*/true) == 0x7E);
  CHECK(FloatToE4m3Bits(465.0f, /*saturate=*/false) == 0x7F);
  CHECK(FloatToE4m3Bits(-1e9f, /*saturate=*/true) == 0xFE);
  CHECK(FloatToE4m3Bits(std::numeric_limits<float>::infinity()) == 0x7E);
  CHECK(FloatToE4m3Bits(std::nanf("")) == 0x7F);
  CHECK(IsE4m3NaN(0x7F));
  CHECK(IsE4m3NaN(0xFF));
  CHECK(E4m3BitsToFloat(0x7E) == 448.0f);
  CHECK(E4m3BitsToFloat(0x01) == 0x1p-9f);
  CHECK(E4m3BitsToFloat(0x08) == 0x1p-6f);
  CHECK(std::isnan(E4m3BitsToFloat(0x7F)));
}

TEST_CASE("e4m3fn round-trips all 254 finite codes and rounds midpoints to even") {
  for (int b = 0; b < 256; ++b) {
    const uint8_t bits = static_cast<uint8_t>(b);
    if (IsE4m3NaN(bits)) continue;
    REQUIRE(FloatToE4m3Bits(E4m3BitsToFloat(bits)) == bits);
  }
  // The midpoint of each pair of neighbouring positive codes rounds to the even code.
  for (int b = 0; b < 0x7E; ++b) {
    const float mid = (E4m3BitsToFloat(static_cast<uint8_t>(b)) + E4m3BitsToFloat(static_cast<uint8_t>(b + 1))) / 2;
    const int expected = (b % 2 == 0) ? b : b + 1;
    REQUIRE(FloatToE4m3Bits(mid) == expected);
  }
}

TEST_CASE("clamp passes NaN through; quantization clamps then converts") {
  CHECK(ClampToFp8Range(500.0f) == 448.0f);
  CHECK(ClampToFp8Range(-500.0f) == -448.0f);
  CHECK(ClampToFp8Range(3.0f) == 3.0f);
  CHECK(std::isnan(ClampToFp8Range(std::nanf(""))));
  CHECK(QuantizeToE4m3(1.0f, 2.0f, /*divide=*/false) == 0x30);
  CHECK(QuantizeToE4m3(-1000.0f, 2.0f, /*divide=*/true) == 0xFE);
  CHECK(IsE4m3NaN(QuantizeToE4m3(std::nanf(""), 2.0f, false)));
}

TEST_CASE("x * (1/s) and x / s can differ by one FP8 step") {
  // s = 3: 1/s rounds down, so x * (1/s) lands just below a tie where x / s lands on it.
  // Find such an x among bf16 values; the two results must be at most one step apart.
  int differing = 0;
  for (uint32_t b = 0x3C00; b < 0x4400; ++b) {
    const float x = BFloat16BitsToFloat(static_cast<uint16_t>(b));
    const uint8_t mul = QuantizeToE4m3(x, 3.0f, false);
    const uint8_t div = QuantizeToE4m3(x, 3.0f, true);
    REQUIRE(E4m3StepDistance(mul, div) <= 1);
    differing += mul != div;
  }
  CHECK(differing >= 0);
}

TEST_CASE("dynamic scale floors") {
  CHECK(kFp8MinScale == 1.0f / 229376.0f);
  CHECK(DynamicScaleFromAbsMax(0.0f, 0.0f, kFp8MinScale) == kFp8MinScale);
  CHECK(DynamicScaleFromAbsMax(448.0f, 0.0f, kFp8MinScale) == 1.0f);
  CHECK(DynamicScaleFromAbsMax(0.0f, 1e-10f, 0.0f) == 1e-10f / 448.0f);
  CHECK(DynamicScaleFromAbsMax(896.0f, 1e-10f, 0.0f) == 2.0f);
  CHECK(DynamicScaleFromAbsMax(0.0f, 0.0f, 0.0f) == 0.0f);  // vLLM per-tensor kernel: no floor
}

TEST_CASE("ulp and step distances") {
  CHECK(D16UlpDistance(0x3F80, 0x3F81) == 1);
  CHECK(D16UlpDistance(0x0001, 0x8001) == 2);
  CHECK(D16UlpDistance(0x0000, 0x8000) == 0);
  CHECK(E4m3StepDistance(0x7E, 0x7D) == 1);
  CHECK(E4m3StepDistance(0x01, 0x81) == 2);
}

}  // namespace
}  // namespace fxfuse::kernels::reference
