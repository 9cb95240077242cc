// Fused (residual-add +) RMSNorm + dynamic per-group FP8 kernels (vLLM rms_norm_per_block_quant,
// group 64 or 128, row- or column-major scales).
#include "kernels/device/rms_norm_quant_fp8_launch.cuh"

namespace fxfuse::kernels::device {

Status LaunchRmsNormQuantFp8PerGroup(bool residual, DType dtype, int64_t num_tokens,
                                     const internal::RowLaunchConfig& config,
                                     const RowKernelArgs& args, cudaStream_t stream) {
  if (residual) {
    return LaunchRowKernelForDType<true, true, RowOutput::kFp8PerGroup>(
        "fused_add_rms_norm_per_group_fp8_quant", dtype, num_tokens, config, args, stream);
  }
  return LaunchRowKernelForDType<false, true, RowOutput::kFp8PerGroup>(
      "rms_norm_per_group_fp8_quant", dtype, num_tokens, config, args, stream);
}

}  // namespace fxfuse::kernels::device
