// Fused (residual-add +) RMSNorm + FP8 quantization (vLLM rms_norm_static_fp8_quant,
// fused_add_rms_norm_static_fp8_quant, rms_norm_dynamic_per_token_quant and
// rms_norm_per_block_quant).
#ifndef FXFUSE_KERNELS_RMS_NORM_QUANT_FP8_H_
#define FXFUSE_KERNELS_RMS_NORM_QUANT_FP8_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/quant_fp8.h"
#include "kernels/status.h"
#include "kernels/types.h"

namespace fxfuse::kernels {

// Per row: n = RmsNorm's output (see rms_norm.h; kept in registers, never stored), then
// q = QuantFp8 of n with `scale` (see quant_fp8.h). With a residual, residual <- round16(x + r);
// the input is never written. Each fused kernel is bit-identical to the unfused chain
// RmsNorm -> QuantFp8 run with the same options on the same device, provided both take the
// 16-byte path or both the scalar path (LaunchTuning, alignment).
// Scale kinds: static per-tensor, dynamic per-token, dynamic per-group (no dynamic per-tensor:
// vLLM has no such fusion; run RmsNorm + QuantFp8).
struct RmsNormQuantFp8Params {
  int64_t num_tokens = 0;
  int64_t hidden_size = 0;
  DType dtype = DType::BF16;         // input and residual: bf16 or fp16
  DType weight_dtype = DType::BF16;  // must equal dtype when there is a weight
  const void* input = nullptr;            // [T, H] dtype
  int64_t input_row_stride = 0;
  const void* weight = nullptr;           // optional [H] contiguous; null: no weight multiply
  void* residual = nullptr;               // optional [T, H] dtype, overwritten with round16(x + r)
  int64_t residual_row_stride = 0;
  void* residual_out = nullptr;           // optional: round16(x + r) goes here, `residual` only read
  int64_t residual_out_row_stride = 0;    // (as RmsNormParams::residual_out)
  // kDefault: kRoundedSum for static scales (as fused_add_rms_norm, so the fusion equals the
  // chain), kUnroundedSum for dynamic per-token and per-group (vLLM's fused dynamic kernel).
  ResidualVariance residual_variance = ResidualVariance::kDefault;
  float epsilon = 1e-6f;
  void* output = nullptr;                 // [T, H] float8_e4m3fn
  int64_t output_row_stride = 0;
  Fp8ScaleSpec scale;
  LaunchTuning tuning;

  Status Check() const;
};

Status RmsNormQuantFp8(const RmsNormQuantFp8Params& params, cudaStream_t stream);

}  // namespace fxfuse::kernels

#endif  // FXFUSE_KERNELS_RMS_NORM_QUANT_FP8_H_
