// Host: launchers of the fused RMSNorm + FP8 row kernels, one per scale kind, each defined in
// its own .cu so the variants compile in parallel.
#ifndef FXFUSE_KERNELS_DEVICE_RMS_NORM_QUANT_FP8_LAUNCH_CUH_
#define FXFUSE_KERNELS_DEVICE_RMS_NORM_QUANT_FP8_LAUNCH_CUH_

#include "kernels/device/row_kernels.cuh"

namespace fxfuse::kernels::device {

Status LaunchRmsNormQuantFp8PerToken(bool residual, DType dtype, int64_t num_tokens,
                                     const internal::RowLaunchConfig& config,
                                     const RowKernelArgs& args, cudaStream_t stream);
Status LaunchRmsNormQuantFp8PerGroup(bool residual, DType dtype, int64_t num_tokens,
                                     const internal::RowLaunchConfig& config,
                                     const RowKernelArgs& args, cudaStream_t stream);

}  // namespace fxfuse::kernels::device

#endif  // FXFUSE_KERNELS_DEVICE_RMS_NORM_QUANT_FP8_LAUNCH_CUH_
