// Rounding of the interpreter's number formats: hand-picked edge cases (ties, subnormals,
// ±448, NaN, Inf, overflow) and exhaustive checks derived from the bit encodings.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "tools/interpreter/numerics.h"
#include "tools/interpreter/value.h"

using namespace fxfuse::interp;
using fxfuse::ir::DType;

namespace {
const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();
double p2(int e) { return std::ldexp(1.0, e); }
}  // namespace

TEST_CASE("bf16 rounding: ties to even, overflow, subnormals", "[numerics]") {
  CHECK(roundTo(1 + p2(-8), DType::BF16) == 1.0);                // tie -> even (mantissa 0)
  CHECK(roundTo(1 + 3 * p2(-8), DType::BF16) == 1 + p2(-6));     // tie -> even (mantissa 2)
  CHECK(roundTo(1 + p2(-8) + p2(-20), DType::BF16) == 1 + p2(-7));  // above the tie
  CHECK(roundTo(-(1 + p2(-8)), DType::BF16) == -1.0);
  CHECK(roundTo(3.4e38, DType::BF16) == kInf);  // past max + half ulp
  CHECK(roundTo(3.3894e38, DType::BF16) == 3.3895313892515355e38);  // bf16 max
  CHECK(roundTo(p2(-134), DType::BF16) == 0.0);           // half the smallest subnormal, tie -> 0
  CHECK(roundTo(3 * p2(-134), DType::BF16) == p2(-132));  // tie -> even
  CHECK(roundTo(p2(-133), DType::BF16) == p2(-133));
  CHECK(std::isnan(roundTo(kNaN, DType::BF16)));
  CHECK(roundTo(-kInf, DType::BF16) == -kInf);
  CHECK(bf16Bits(1.0) == 0x3F80);
  CHECK(bf16Bits(-2.0) == 0xC000);
  CHECK(bf16Bits(kInf) == 0x7F80);
}

TEST_CASE("f16 rounding: max, overflow to inf, subnormals", "[numerics]") {
  CHECK(roundTo(65504, DType::F16) == 65504);
  CHECK(roundTo(65519, DType::F16) == 65504);
  CHECK(roundTo(65520, DType::F16) == kInf);  // tie at max + half ulp rounds to even = overflow
  CHECK(roundTo(-70000, DType::F16) == -kInf);
  CHECK(roundTo(1 + p2(-11), DType::F16) == 1.0);
  CHECK(roundTo(1 + 3 * p2(-11), DType::F16) == 1 + p2(-9));
  CHECK(roundTo(p2(-24), DType::F16) == p2(-24));
  CHECK(roundTo(p2(-25), DType::F16) == 0.0);
  CHECK(roundTo(3 * p2(-25), DType::F16) == p2(-23));
  CHECK(f16Bits(1.0) == 0x3C00);
  CHECK(f16Bits(65504) == 0x7BFF);
  CHECK(f16Bits(p2(-24)) == 0x0001);
}

TEST_CASE("float8_e4m3fn rounding: ±448, NaN on overflow as torch, subnormals", "[numerics]") {
  const DType t = DType::F8E4M3FN;
  CHECK(roundTo(448, t) == 448);
  CHECK(roundTo(-448, t) == -448);
  CHECK(roundTo(464, t) == 448);  // exactly between 448 and 480: ties to even (448)
  CHECK(std::isnan(roundTo(464.0001, t)));  // rounds to 480, which e4m3fn cannot hold
  CHECK(std::isnan(roundTo(480, t)));
  CHECK(std::isnan(roundTo(-500, t)));
  CHECK(std::isnan(roundTo(kInf, t)));
  CHECK(std::isnan(roundTo(-kInf, t)));
  CHECK(std::isnan(roundTo(kNaN, t)));
  CHECK(roundTo(400, t) == 384);   // tie between 384 (mantissa 100) and 416 (101)
  CHECK(roundTo(401, t) == 416);
  CHECK(roundTo(p2(-9), t) == p2(-9));  // smallest subnormal
  CHECK(roundTo(p2(-10), t) == 0.0);    // tie -> 0
  CHECK(roundTo(3 * p2(-10), t) == p2(-8));
  CHECK(roundTo(7 * p2(-9), t) == 7 * p2(-9));  // largest subnormal
  CHECK(fp8Bits(448, t) == 0x7E);
  CHECK(fp8Bits(-448, t) == 0xFE);
  CHECK(fp8Bits(kNaN, t) == 0x7F);
  CHECK(fp8Bits(1.0, t) == 0x38);
  CHECK(fp8Bits(p2(-9), t) == 0x01);
  CHECK(fp8Bits(p2(-6), t) == 0x08);
  CHECK(fp8Bits(-0.0, t) == 0x80);
  CHECK(maxFinite(t) == 448);
}

TEST_CASE("float8_e5m2 and fnuz variants", "[numerics]") {
  CHECK(roundTo(57344, DType::F8E5M2) == 57344);
  CHECK(roundTo(61439, DType::F8E5M2) == 57344);
  CHECK(roundTo(61440, DType::F8E5M2) == kInf);
  CHECK(roundTo(-1e6, DType::F8E5M2) == -kInf);
  CHECK(roundTo(p2(-16), DType::F8E5M2) == p2(-16));
  CHECK(roundTo(p2(-17), DType::F8E5M2) == 0.0);
  CHECK(fp8Bits(kInf, DType::F8E5M2) == 0x7C);
  CHECK(fp8Bits(1.0, DType::F8E5M2) == 0x3C);
  CHECK(roundTo(240, DType::F8E4M3FNUZ) == 240);
  CHECK(roundTo(247, DType::F8E4M3FNUZ) == 240);
  CHECK(std::isnan(roundTo(248, DType::F8E4M3FNUZ)));
  CHECK(fp8Bits(kNaN, DType::F8E4M3FNUZ) == 0x80);
  CHECK(fp8Bits(-0.0, DType::F8E4M3FNUZ) == 0x00);
}

namespace {

// Every code of a format: decoding then encoding is the identity, values are fixed points
// of roundTo, and the midpoint of two neighbours rounds to the one with the even code.
void exhaustive(DType t, int bits) {
  uint64_t n = uint64_t{1} << bits;
  double prev = kNaN;
  uint64_t prev_code = 0;
  int64_t checked = 0;
  // Walk the positive codes in order (codes below the sign bit are monotone).
  for (uint64_t code = 0; code < n / 2; ++code) {
    double v = fromBits(code, t);
    if (std::isnan(v) || std::isinf(v)) continue;
    INFO("dtype " << static_cast<int>(t) << " code " << code << " value " << v);
    REQUIRE(roundTo(v, t) == v);
    REQUIRE(toBits(v, t) == code);
    double nv = fromBits(code | (n / 2), t);  // negative twin
    if (!std::isnan(nv) && v != 0) REQUIRE(nv == -v);
    if (!std::isnan(nv) && v != 0) REQUIRE(toBits(nv, t) == (code | (n / 2)));
    if (!std::isnan(prev)) {
      double mid = (prev + v) / 2;
      double even = (code % 2 == 0) ? v : prev;
      REQUIRE(roundTo(mid, t) == even);
      REQUIRE(toBits(mid, t) == toBits(even, t));  // inexact values take the rounding path
      REQUIRE(roundTo(-mid, t) == -even);
      double eps = (v - prev) / 64;
      REQUIRE(roundTo(mid - eps, t) == prev);
      REQUIRE(roundTo(mid + eps, t) == v);
      ++checked;
    }
    prev = v;
    prev_code = code;
  }
  (void)prev_code;
  CHECK(checked > static_cast<int64_t>(n / 4));
}

}  // namespace

TEST_CASE("exhaustive code round trips and midpoint ties", "[numerics]") {
  exhaustive(DType::F8E4M3FN, 8);
  exhaustive(DType::F8E5M2, 8);
  exhaustive(DType::F16, 16);
  exhaustive(DType::BF16, 16);
}

TEST_CASE("integer and bool casts", "[numerics]") {
  CHECK(roundTo(3.7, DType::I32) == 3);
  CHECK(roundTo(-3.7, DType::I64) == -3);
  CHECK(roundTo(300, DType::U8) == 44);
  CHECK(roundTo(-1, DType::U8) == 255);
  CHECK(roundTo(128, DType::I8) == -128);
  CHECK(roundTo(0.5, DType::BOOL) == 1);
  CHECK(roundTo(0.0, DType::BOOL) == 0);
  CHECK(std::isnan(roundTo(kNaN, DType::I64)));  // poison survives
}

TEST_CASE("FP8 step distance", "[numerics]") {
  CHECK(stepDistance(1.0, 1.125, DType::F8E4M3FN) == 1);
  CHECK(stepDistance(448, -448, DType::F8E4M3FN) == 252);
  CHECK(stepDistance(0.0, -0.0, DType::F8E4M3FN) == 0);
  CHECK(stepDistance(p2(-9), -p2(-9), DType::F8E4M3FN) == 2);
  CHECK(stepDistance(kNaN, kNaN, DType::F8E4M3FN) == 0);
  CHECK(stepDistance(kNaN, 1.0, DType::F8E4M3FN) == std::numeric_limits<int64_t>::max());
  CHECK(stepDistance(1.0, 1.0 + p2(-7), DType::BF16) == 1);
}

TEST_CASE("type promotion follows torch", "[numerics]") {
  CHECK(promoteTypes(DType::BF16, DType::F16) == DType::F32);
  CHECK(promoteTypes(DType::I32, DType::F16) == DType::F16);
  CHECK(promoteTypes(DType::U8, DType::I8) == DType::I16);
  CHECK(promoteTypes(DType::BOOL, DType::I32) == DType::I32);
  CHECK(promoteTypes(DType::BF16, DType::F32) == DType::F32);
  RValue tb = RValue::ofTensor(Tensor::full({2}, DType::BF16, 1));
  RValue ti = RValue::ofTensor(Tensor::full({2}, DType::I64, 1));
  RValue ti32 = RValue::ofTensor(Tensor::full({2}, DType::I32, 1));
  RValue z64 = RValue::ofTensor(Tensor::full({}, DType::F64, 1));
  RValue z32 = RValue::ofTensor(Tensor::full({}, DType::F32, 1));
  RValue sf = RValue::ofFloat(1.5), si = RValue::ofInt(2);
  CHECK(resultType({&tb, &sf}) == DType::BF16);
  CHECK(resultType({&ti, &sf}) == DType::F32);
  CHECK(resultType({&ti32, &si}) == DType::I32);
  CHECK(resultType({&tb, &z64}) == DType::BF16);  // a zero-dim tensor does not widen a dimensioned one
  CHECK(resultType({&ti, &z32}) == DType::F32);   // ... unless it is of a higher category
}

TEST_CASE("toBits: integer values as two's complement, refused without a 64-bit pattern") {
  CHECK(toBits(-1, DType::I64) == ~uint64_t{0});
  CHECK(toBits(-1, DType::I8) == 0xFF);
  CHECK(toBits(9223372036854775808.0, DType::I64) == (uint64_t{1} << 63));  // 2^63: the pattern of INT64_MIN
  CHECK_THROWS(toBits(18446744073709551616.0, DType::I64));                 // 2^64
  CHECK_THROWS(toBits(-1e300, DType::I32));
  CHECK_THROWS(toBits(std::nan(""), DType::I64));
}
