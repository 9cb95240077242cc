// Device-side number formats: D16 (bf16/fp16) unpack/round, 16-byte vectors, FP8 clamp+convert,
// dynamic scale computation. The CPU reference (reference/numerics.h) implements the same
// rounding bit by bit.
#ifndef FXFUSE_KERNELS_DEVICE_NUMERIC_CUH_
#define FXFUSE_KERNELS_DEVICE_NUMERIC_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "kernels/types.h"

namespace fxfuse::kernels::device {

inline constexpr float kFp8Max = kFp8E4m3Max;  // kernels/types.h is the home

template <typename T>
struct D16;

template <>
struct D16<__nv_bfloat16> {
  using Pair = __nv_bfloat162;
  static __device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 FromFloat(float v) {
    return __float2bfloat16_rn(v);
  }
  static __device__ __forceinline__ float2 PairToFloat2(Pair p) { return __bfloat1622float2(p); }
  static __device__ __forceinline__ Pair Float2ToPair(float a, float b) {
    return __floats2bfloat162_rn(a, b);  // a -> low half
  }
  // round16(a * b) of two bf16 pairs: their fp32 product is exact (8 x 8 significant bits), so
  // one RN rounding of it equals round16(float(a) * float(b)).
  static __device__ __forceinline__ Pair Mul2(Pair a, Pair b) { return __hmul2(a, b); }
};

template <>
struct D16<__half> {
  using Pair = __half2;
  static __device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half FromFloat(float v) { return __float2half_rn(v); }
  static __device__ __forceinline__ float2 PairToFloat2(Pair p) { return __half22float2(p); }
  static __device__ __forceinline__ Pair Float2ToPair(float a, float b) {
    return __floats2half2_rn(a, b);  // a -> low half
  }
  // round16(a * b): the product of two fp16 values (11 x 11 significant bits) is exact in fp32.
  static __device__ __forceinline__ Pair Mul2(Pair a, Pair b) { return __hmul2(a, b); }
};

// Round an fp32 value to T (RNE) and widen it back: round16() of the semantics doc.
template <typename T>
__device__ __forceinline__ float Round16(float v) {
  return D16<T>::ToFloat(D16<T>::FromFloat(v));
}

// 8 D16 values in one 16-byte word.
template <typename T>
__device__ __forceinline__ void Unpack8(const uint4& raw, float (&out)[8]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    typename D16<T>::Pair p;
    static_assert(sizeof(p) == 4, "D16 pair must be 4 bytes");
    __builtin_memcpy(&p, &words[k], 4);
    const float2 f = D16<T>::PairToFloat2(p);
    out[2 * k] = f.x;
    out[2 * k + 1] = f.y;
  }
}

// Makes the compiler forget what it knows about `v` (no code is emitted): values unpacked from
// `v` before this point cannot be reused after it, so they need not stay in registers.
__device__ __forceinline__ void OpaqueRegisters(uint4& v) {
  asm volatile("" : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w));
}

// Rounds 8 fp32 values to T (RNE) and packs them.
template <typename T>
__device__ __forceinline__ uint4 Pack8(const float (&in)[8]) {
  uint32_t words[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const typename D16<T>::Pair p = D16<T>::Float2ToPair(in[2 * k], in[2 * k + 1]);
    __builtin_memcpy(&words[k], &p, 4);
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// fp8(clamp(v, -448, 448)) (torch clamp semantics: NaN passes through) in one instruction:
// the satfinite RNE conversion maps every finite value beyond ±448 (and ±inf) to ±448 and NaN
// to NaN, exactly what converting the clamped value gives. Element 0 in the low byte.
__device__ __forceinline__ uint8_t FloatToFp8(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// Two values to two e4m3fn bytes (clamp included, see FloatToFp8), a in the low byte.
__device__ __forceinline__ uint32_t FloatPairToFp8x2(float a, float b) {
  return static_cast<uint32_t>(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}

// How a scale is applied: quantized = fp8(clamp(v / s)) or fp8(clamp(v * (1/s))). `factor` is s
// for division and 1/s (rounded to fp32) for multiplication.
struct ScaleOp {
  bool divide;
  float factor;
  __device__ __forceinline__ static ScaleOp Make(float scale, bool divide) {
    return ScaleOp{divide, divide ? scale : 1.0f / scale};
  }
  __device__ __forceinline__ float Apply(float v) const { return divide ? v / factor : v * factor; }
};

// 8 values scaled, clamped and converted to 8 e4m3fn bytes (element 0 in the lowest byte).
// (One uniform branch around the 8 divisions or multiplications: a select would compute both.)
__device__ __forceinline__ uint2 QuantizeToFp8x8(const float (&v)[8], const ScaleOp& op) {
  float c[8];
  if (op.divide) {
#pragma unroll
    for (int j = 0; j < 8; ++j) c[j] = __fdiv_rn(v[j], op.factor);
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) c[j] = __fmul_rn(v[j], op.factor);
  }
  const uint32_t lo = FloatPairToFp8x2(c[0], c[1]) | (FloatPairToFp8x2(c[2], c[3]) << 16);
  const uint32_t hi = FloatPairToFp8x2(c[4], c[5]) | (FloatPairToFp8x2(c[6], c[7]) << 16);
  return make_uint2(lo, hi);
}

__device__ __forceinline__ uint8_t QuantizeToFp8(float v, const ScaleOp& op) { return FloatToFp8(op.Apply(v)); }

// 8 packed D16 values scaled and converted to 8 e4m3fn bytes.
template <typename T>
__device__ __forceinline__ uint2 QuantizePackedToFp8x8(const uint4& packed, const ScaleOp& op) {
  float v[8];
  Unpack8<T>(packed, v);
  return QuantizeToFp8x8(v, op);
}

// max |v| over 8 packed D16 values (fmaxf: NaN ignored).
template <typename T>
__device__ __forceinline__ float AbsMax8(const uint4& packed) {
  float v[8];
  Unpack8<T>(packed, v);
  float m = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(v[j]));
  return m;
}

// n = round16(round16(s * inv) * w) for 8 values (w packed), packed: one RN conversion per pair
// for the first rounding, one D16 pair multiply (exact product, one rounding) for the second.
template <typename T>
__device__ __forceinline__ uint4 NormalizeWeighted8(const float (&s)[8], float inv, const uint4& w) {
  const uint32_t w_words[4] = {w.x, w.y, w.z, w.w};
  uint32_t out[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const typename D16<T>::Pair m = D16<T>::Float2ToPair(s[2 * k] * inv, s[2 * k + 1] * inv);
    typename D16<T>::Pair wp;
    __builtin_memcpy(&wp, &w_words[k], 4);
    const typename D16<T>::Pair n = D16<T>::Mul2(m, wp);
    __builtin_memcpy(&out[k], &n, 4);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// n = round16(s * inv) for 8 values (RMSNorm without weight), packed.
template <typename T>
__device__ __forceinline__ uint4 NormalizeUnweighted8(const float (&s)[8], float inv) {
  float scaled[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) scaled[j] = s[j] * inv;
  return Pack8<T>(scaled);
}

// silu(g) = g / (1 + expf(-g)) in fp32 (IEEE division, as vLLM's kernel).
__device__ __forceinline__ float Silu(float g) { return __fdiv_rn(g, 1.0f + expf(-g)); }

// h = round16(round16(silu(g)) * u) of one gate and up value (exactly what the packed form
// below gives for each element).
template <typename T>
__device__ __forceinline__ float SiluMul(float g, float u) {
  return Round16<T>(Round16<T>(Silu(g)) * u);
}

// h = round16(round16(silu(g)) * u) for 8 packed gate and up values, packed: one RN conversion
// per pair for round16(silu), one D16 pair multiply (exact product, one rounding) for the second.
template <typename T>
__device__ __forceinline__ uint4 SiluMulPacked8(const uint4& gate, const uint4& up) {
  float g[8];
  Unpack8<T>(gate, g);
  const uint32_t u_words[4] = {up.x, up.y, up.z, up.w};
  uint32_t h_words[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const typename D16<T>::Pair m = D16<T>::Float2ToPair(Silu(g[2 * k]), Silu(g[2 * k + 1]));
    typename D16<T>::Pair u;
    __builtin_memcpy(&u, &u_words[k], 4);
    const typename D16<T>::Pair h = D16<T>::Mul2(m, u);
    __builtin_memcpy(&h_words[k], &h, 4);
  }
  return make_uint4(h_words[0], h_words[1], h_words[2], h_words[3]);
}

// Scale of a dynamic quantization from the absolute maximum a of its values:
// s = max(max(a, min_abs) / 448, min_scale) (fp32 division; see Fp8ScaleSpec).
__device__ __forceinline__ float DynamicScaleFromAbsMax(float absmax, float min_abs, float min_scale) {
  return fmaxf(fmaxf(absmax, min_abs) / kFp8Max, min_scale);
}

}  // namespace fxfuse::kernels::device

#endif  // FXFUSE_KERNELS_DEVICE_NUMERIC_CUH_
