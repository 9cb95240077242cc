// FP8 (e4m3fn) quantization: static per-tensor, dynamic per-token, dynamic per-tensor and
// dynamic per-group scales (vLLM static_scaled_fp8_quant, dynamic_per_token_scaled_fp8_quant,
// dynamic_scaled_fp8_quant and per_token_group_fp8_quant; native QuantFP8 forms).
#ifndef FXFUSE_KERNELS_QUANT_FP8_H_
#define FXFUSE_KERNELS_QUANT_FP8_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/status.h"
#include "kernels/types.h"

namespace fxfuse::kernels {

// Where the scale lives and how it is computed and applied. For every kind:
//   q = fp8(clamp(float(x) op s, -448, 448)), op = * (1/s) or / s (see ScaleApplication),
//   fp8 = round-to-nearest-even to e4m3fn; NaN stays NaN (the clamp passes it through).
// Dynamic kinds: a = max|x| over the row / tensor / group (per-token: a = min(a, *ub) when
// scale_upper_bound is given); s = max(max(a, min_abs) / 448, min_scale) in fp32. Floors:
//   native forms, vLLM per-token kernel:      min_abs 0,     min_scale MIN_SCALE (default)
//   vLLM per_token_group_fp8_quant kernel:    min_abs 1e-10, min_scale 0
//   vLLM dynamic_scaled_fp8_quant (no floor): min_abs 0,     min_scale 0 (zero tensor: s = 0)
struct Fp8ScaleSpec {
  Fp8ScaleKind kind = Fp8ScaleKind::kStaticPerTensor;
  // fp32, device memory. Static per-tensor: [1], read. Dynamic per-token: written at
  // scale[t * token_stride]. Dynamic per-tensor: [1], written. Dynamic per-group: written at
  // scale[t * token_stride + k * group_stride] for group k of row t.
  float* scale = nullptr;
  // 0 = default: per-token 1; per-group row-major [T, H/g] (token_stride H/g, group_stride 1).
  // Column-major per-group scales (DeepGEMM/CUTLASS layout): token_stride 1, group_stride >= T.
  int64_t token_stride = 0;
  int64_t group_stride = 0;
  int group_size = 0;                         // per-group only: 64 or 128 (H % g == 0)
  const float* scale_upper_bound = nullptr;   // per-token only, optional [1] fp32 clamp of a
  ScaleApplication application = ScaleApplication::kDefault;
  float min_abs = 0.0f;                       // dynamic only: floor of a (>= 0)
  float min_scale = kFp8MinScale;             // dynamic only: floor of s (>= 0)
};

struct QuantFp8Params {
  int64_t num_tokens = 0;           // T >= 0
  int64_t hidden_size = 0;          // H >= 1
  DType dtype = DType::BF16;   // input: bf16 or fp16
  const void* input = nullptr;      // [T, H] dtype
  int64_t input_row_stride = 0;     // elements, >= H (0 = H)
  void* output = nullptr;           // [T, H] float8_e4m3fn
  int64_t output_row_stride = 0;    // elements, >= H (0 = H)
  Fp8ScaleSpec scale;
  LaunchTuning tuning;

  Status Check() const;
};

// Dynamic per-tensor runs two kernels (a grid-wide max, then the quantization) after zeroing
// the scale with cudaMemsetAsync; all other kinds run one kernel.
Status QuantFp8(const QuantFp8Params& params, cudaStream_t stream);

}  // namespace fxfuse::kernels

#endif  // FXFUSE_KERNELS_QUANT_FP8_H_
