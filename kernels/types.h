// Plain value types shared by the kernel launch API (dtypes, FP8 constants, scale and
// rounding choices). No CUDA or torch types here.
#ifndef FXFUSE_KERNELS_TYPES_H_
#define FXFUSE_KERNELS_TYPES_H_

#include <cstdint>
#include <cstdlib>

#include "proto/dtype.h"

namespace fxfuse::kernels {

// The kernels take fxfuse's one dtype enum (proto/dtype.h); they support F16, BF16, F32 (scales)
// and F8E4M3FN (float8_e4m3fn: no infinities, max ±448, NaN = S.1111.111).
using ::fxfuse::DType;

const char* DTypeName(DType dtype);
int DTypeSize(DType dtype);
inline bool IsD16(DType dtype) { return dtype == DType::F16 || dtype == DType::BF16; }

// torch.finfo(torch.float8_e4m3fn).max: every quant clamps to ±kFp8E4m3Max before converting.
inline constexpr float kFp8E4m3Max = 448.0f;
// Floor of dynamic FP8 scales: 1 / (448 * 512) (vLLM MIN_SCALE; native forms and the per-token
// kernel use it).
inline constexpr float kFp8MinScale = 1.0f / (448.0f * 512.0f);

// How an FP8 scale is obtained and laid out.
enum class Fp8ScaleKind : uint8_t {
  kStaticPerTensor,   // scale [1] given (input)
  kDynamicPerToken,   // scale [T] written: max|row| / 448, floored
  kDynamicPerTensor,  // scale [1] written: max|tensor| / 448, floored
  kDynamicPerGroup,   // scale [T, H/g] written: max|group| / 448, floored (g = 64 or 128)
};
const char* Fp8ScaleKindName(Fp8ScaleKind kind);

// How a value is brought into FP8 range by its scale s. The two differ by at most one FP8 step,
// rarely (division is exact-rounded, x * (1/s) rounds twice).
enum class ScaleApplication : uint8_t {
  // vLLM's CUDA kernels: static per-tensor and dynamic per-tensor multiply by 1/s; dynamic
  // per-token and per-group divide by s.
  kDefault,
  kMultiplyByReciprocal,  // x * (1/s): native QuantFP8 static, per-token and per-tensor forms
  kDivide,                // x / s: vLLM per-token and group kernels, native group form
};

// What fused residual-add + RMSNorm normalizes (variance and the normalized value alike).
enum class ResidualVariance : uint8_t {
  // Per kernel, as vLLM: kRoundedSum for RmsNorm (fused_add_rms_norm) and static FP8 fusions
  // (fused_add_rms_norm_static_fp8_quant); kUnroundedSum for dynamic per-token and per-group
  // FP8 fusions (rms_norm_dynamic_per_token_quant).
  kDefault,
  kRoundedSum,    // z = round16(x + r): vLLM fused_add_rms_norm kernel
  kUnroundedSum,  // v = x + r in fp32: native RMSNorm.forward_static (torch form)
};
const char* ResidualVarianceName(ResidualVariance variance);

// Optional launch-shape overrides (benchmarks and tests); zero values mean automatic.
struct LaunchTuning {
  // 16-byte vectors each thread keeps in registers (1, 2, 4 or 8); 0 = chosen from T and H.
  int vecs_per_thread = 0;
  // Take the scalar path (any alignment, any H) even when the 16-byte path applies.
  bool force_scalar_path = false;
  // 16-byte path: -1 = automatic; 0 = one row per CTA, loaded straight into registers;
  // 1..3 = persistent CTAs with that many rows staged in shared memory (cp.async, rows
  // prefetched ahead; SiLU-and-mul prefetches one row in registers for any value >= 1).
  int row_pipeline_stages = -1;
};

// Whether fxfuse launches its own kernels with programmatic dependent launch
// (kernels/device/pdl.cuh): on by default (measured on the H200, docs/runtime.md),
// $FXFUSE_PDL=0 turns it off. Read once per process.
inline bool ProgrammaticLaunchEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("FXFUSE_PDL");
    return !(v && v[0] == '0');
  }();
  return enabled;
}

}  // namespace fxfuse::kernels

#endif  // FXFUSE_KERNELS_TYPES_H_
