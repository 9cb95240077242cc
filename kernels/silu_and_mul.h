// SiLU-and-mul, optionally fused with static per-tensor FP8 quantization (vLLM silu_and_mul and
// silu_and_mul_quant).
#ifndef FXFUSE_KERNELS_SILU_AND_MUL_H_
#define FXFUSE_KERNELS_SILU_AND_MUL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/status.h"
#include "kernels/types.h"

namespace fxfuse::kernels {

// Input row t is [gate (d) | up (d)]. Per element, in fp32:
//   h = round16(round16(g / (1 + expf(-g))) * u)
//   output dtype D16:  out = h
//   output FP8:        out = fp8(clamp(h * (1/scale), -448, 448))   (or h / scale)
// The FP8 form is bit-identical to SiluAndMul (D16) followed by static QuantFp8.
struct SiluAndMulParams {
  int64_t num_tokens = 0;                 // T >= 0
  int64_t hidden_size = 0;                // d >= 1: output width; the input has 2d columns
  DType dtype = DType::BF16;         // input: bf16 or fp16
  const void* input = nullptr;            // [T, 2d] dtype
  int64_t input_row_stride = 0;           // elements, >= 2d (0 = 2d)
  DType output_dtype = DType::BF16;  // dtype, or kFloat8E4M3 (static per-tensor scale)
  void* output = nullptr;                 // [T, d] output_dtype
  int64_t output_row_stride = 0;          // elements, >= d (0 = d)
  const float* scale = nullptr;           // FP8 output only: [1] fp32 device memory
  ScaleApplication scale_application = ScaleApplication::kDefault;  // = kMultiplyByReciprocal
  LaunchTuning tuning;

  Status Check() const;
};

Status SiluAndMul(const SiluAndMulParams& params, cudaStream_t stream);

// Whether the FP8 form quantizes with h / scale (true) or h * (1/scale), kDefault resolved as
// the kernel resolves it.
bool SiluAndMulScaleDivides(const SiluAndMulParams& params);

}  // namespace fxfuse::kernels

#endif  // FXFUSE_KERNELS_SILU_AND_MUL_H_
