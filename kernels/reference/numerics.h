// Exact CPU implementations of the number formats the kernels use: fp32 -> bf16 / fp16 / e4m3fn
// round-to-nearest-even, and back. Plain C++ (no CUDA), bit by bit, for tests and CPU code.
#ifndef FXFUSE_KERNELS_REFERENCE_NUMERICS_H_
#define FXFUSE_KERNELS_REFERENCE_NUMERICS_H_

#include <cstdint>

#include "kernels/types.h"

namespace fxfuse::kernels::reference {

// fp32 -> bfloat16, RNE; overflow rounds to ±inf; NaN -> a quiet NaN of the same sign.
uint16_t FloatToBFloat16Bits(float value);
float BFloat16BitsToFloat(uint16_t bits);

// fp32 -> IEEE binary16, RNE with subnormals; |x| >= 65520 -> ±inf; NaN -> quiet NaN.
uint16_t FloatToHalfBits(float value);
float HalfBitsToFloat(uint16_t bits);

// fp32 -> float8_e4m3fn, RNE with subnormals (smallest 2^-9). Values beyond ±448 after rounding
// become ±448 when `saturate` (NVIDIA's satfinite conversion) and NaN otherwise (torch's cast);
// the kernels clamp to ±448 first, so both agree there. NaN -> 0x7F.
uint8_t FloatToE4m3Bits(float value, bool saturate = true);
float E4m3BitsToFloat(uint8_t bits);
inline bool IsE4m3NaN(uint8_t bits) { return (bits & 0x7F) == 0x7F; }

// D16 (bf16 or fp16) by dtype.
uint16_t FloatToD16Bits(float value, DType dtype);
float D16BitsToFloat(uint16_t bits, DType dtype);
// round16(): RNE to the D16 dtype and back to fp32.
float Round16(float value, DType dtype);

// clamp(v, -448, 448), NaN passed through (torch clamp semantics).
float ClampToFp8Range(float value);

// Dynamic FP8 scale of values with absolute maximum `absmax`:
// max(max(absmax, min_abs) / 448, min_scale), fp32.
float DynamicScaleFromAbsMax(float absmax, float min_abs, float min_scale);

// fp8(clamp(v / scale)) when `divide`, else fp8(clamp(v * (1 / scale))).
uint8_t QuantizeToE4m3(float value, float scale, bool divide);

// The accumulation error allowed for an FP8 GEMM on Hopper tensor cores, as a fraction of
// sum_k |a*b| (scaled) per output element, for a K-long sum: max((K - 1) * 2^-21, 2^-12). The
// tensor cores' FP8 accumulator keeps about 14 bits per step (DeepSeek-V3 report, section
// 3.3.2); 21 truncating bits covered every K >= 128 output measured on the H200, and the floor
// small-K GEMMs (docs/runtime.md "FP8 GEMM accumulation bound").
double Fp8GemmAccumulationFraction(int64_t K);

// Distance in representable steps between two finite values of the same format (for
// tolerances): D16 bit patterns and e4m3fn bytes map monotonically to integers.
int64_t D16UlpDistance(uint16_t a, uint16_t b);
int64_t E4m3StepDistance(uint8_t a, uint8_t b);

}  // namespace fxfuse::kernels::reference

#endif  // FXFUSE_KERNELS_REFERENCE_NUMERICS_H_
