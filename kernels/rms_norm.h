// RMSNorm and fused residual-add + RMSNorm (vLLM rms_norm / fused_add_rms_norm semantics).
#ifndef FXFUSE_KERNELS_RMS_NORM_H_
#define FXFUSE_KERNELS_RMS_NORM_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/status.h"
#include "kernels/types.h"

namespace fxfuse::kernels {

// Per row t (reductions in fp32, inv = rsqrtf(sum(s²) / H + eps)):
//   no residual:   s = float(x);  output = round16(round16(s * inv) * w)
//                  (no weight: output = round16(s * inv))
//   with residual: z = round16(x + r) (added in fp32);  residual <- z;
//                  s = z (kRoundedSum, default, vLLM kernel) or the fp32 sum x + r
//                  (kUnroundedSum, native torch form);  output = round16(round16(s * inv) * w)
// Strides are in elements; every last dimension is contiguous. A stride of 0 means H.
struct RmsNormParams {
  int64_t num_tokens = 0;                 // T >= 0 (T = 0 launches nothing)
  int64_t hidden_size = 0;                // H >= 1
  DType dtype = DType::BF16;         // of input, residual and output: bf16 or fp16
  DType weight_dtype = DType::BF16;  // must equal dtype when there is a weight
  const void* input = nullptr;            // [T, H] dtype
  int64_t input_row_stride = 0;           // >= H
  const void* weight = nullptr;           // optional [H] weight_dtype, contiguous
  void* output = nullptr;                 // [T, H] dtype; may be `input` (in place, same stride)
  int64_t output_row_stride = 0;          // >= H
  void* residual = nullptr;               // optional [T, H] dtype, read then overwritten with z
  int64_t residual_row_stride = 0;        // >= H
  // Optional, with a residual: z goes here instead ([T, H] dtype) and `residual` is only read.
  // A plan whose residual is a graph input writes the sum out of place instead of copying it.
  void* residual_out = nullptr;
  int64_t residual_out_row_stride = 0;    // >= H
  ResidualVariance residual_variance = ResidualVariance::kDefault;  // kDefault = kRoundedSum
  float epsilon = 1e-6f;                  // added to the mean of squares, inside the rsqrt
  LaunchTuning tuning;

  // OK, or InvalidArgument naming the first field that is wrong.
  Status Check() const;
};

// Enqueues the kernel on `stream`. Returns Check()'s error, or a CUDA error of the launch.
Status RmsNorm(const RmsNormParams& params, cudaStream_t stream);

}  // namespace fxfuse::kernels

#endif  // FXFUSE_KERNELS_RMS_NORM_H_
