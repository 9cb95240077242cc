// Exact number formats for the CPU reference interpreter.
//
// Every tensor element is held as a double whose value is exactly representable in the
// tensor's dtype (integers up to 2^53, every bf16/f16/f32/fp8 value). `roundTo` maps a
// double onto a dtype the way torch's conversions do:
//
//   * f32: IEEE round-to-nearest-even (the hardware cast).
//   * bf16, f16, float8_e4m3fn, float8_e5m2 (+ the fnuz variants): the value is first
//     rounded to f32 (torch converts through float), then rounded to nearest-even on the
//     target grid, subnormals included. Overflow follows torch (c10/util/Float8_*.h,
//     Half.h, BFloat16.h): bf16/f16/e5m2 give ±inf, e4m3fn gives NaN for |x| >= 480 and for
//     ±inf (it has no infinity; 464 still rounds to 448), the fnuz types give NaN.
//   * integers: truncation toward zero, then wrap-around to the width; bool: x != 0.
//     NaN stays NaN in every dtype (the interpreter's "poison" for unwritten memory).
#pragma once

#include <cstdint>

#include "ir/dtype.h"

namespace fxfuse::interp {

using ir::DType;

double roundTo(double v, DType t);
inline double roundF32(double v) { return static_cast<double>(static_cast<float>(v)); }

// The dtype torch computes elementwise math in for an operand dtype ("opmath"):
// f32 for every float narrower than f32, the dtype itself otherwise.
DType opmathType(DType t);

// Format description of the small float types.
struct FloatFormat {
  int mantissa_bits;   // explicit mantissa bits
  int min_exponent;    // exponent of the smallest normal number
  double max_finite;
  bool has_inf;        // overflow -> inf (else NaN)
};
const FloatFormat* floatFormat(DType t);  // null for f32/f64/integers

// Largest finite value (448 for e4m3fn), 0 for non-float types.
double maxFinite(DType t);

// Bit patterns (for tests and for aten.view.dtype bit casts).
uint16_t bf16Bits(double v);   // v must be a bf16 value (or is rounded first)
uint16_t f16Bits(double v);
uint8_t fp8Bits(double v, DType t);
double fromBits(uint64_t bits, DType t);
uint64_t toBits(double v, DType t);

// Number of representable values of `t` strictly between a and b, plus one (0 when equal;
// monotone order on finite values, ±0 equal). For the FP8 step comparisons in verify.
int64_t stepDistance(double a, double b, DType t);

}  // namespace fxfuse::interp
