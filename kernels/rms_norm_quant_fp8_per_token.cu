// Fused (residual-add +) RMSNorm + dynamic per-token FP8 kernels
// (vLLM rms_norm_dynamic_per_token_quant, with and without residual).
#include "kernels/device/rms_norm_quant_fp8_launch.cuh"

namespace fxfuse::kernels::device {

Status LaunchRmsNormQuantFp8PerToken(bool residual, DType dtype, int64_t num_tokens,
                                     const internal::RowLaunchConfig& config,
                                     const RowKernelArgs& args, cudaStream_t stream) {
  if (residual) {
    return LaunchRowKernelForDType<true, true, RowOutput::kFp8PerToken>(
        "fused_add_rms_norm_dynamic_per_token_fp8_quant", dtype, num_tokens, config, args, stream);
  }
  return LaunchRowKernelForDType<false, true, RowOutput::kFp8PerToken>(
      "rms_norm_dynamic_per_token_fp8_quant", dtype, num_tokens, config, args, stream);
}

}  // namespace fxfuse::kernels::device
