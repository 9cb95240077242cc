// RmsNorm entry point: rms_norm and fused_add_rms_norm on the row kernels (D16 output).
#include "kernels/device/row_kernels.cuh"
#include "kernels/internal/semantics.h"
#include "kernels/rms_norm.h"

namespace fxfuse::kernels {

using device::RowKernelArgs;
using device::RowOutput;
using device::RowsVectorizable;
using internal::ResolveStride;

Status RmsNorm(const RmsNormParams& p, cudaStream_t stream) {
  FXFUSE_KERNELS_RETURN_IF_ERROR(p.Check());
  if (p.num_tokens == 0) return Status::Ok();
  const int64_t h = p.hidden_size;
  RowKernelArgs a;
  a.hidden = static_cast<int>(h);
  a.input = p.input;
  a.input_stride = ResolveStride(p.input_row_stride, h);
  a.weight = p.weight;
  a.epsilon = p.epsilon;
  a.output = p.output;
  a.output_stride = ResolveStride(p.output_row_stride, h);
  a.residual = p.residual;
  a.residual_stride = ResolveStride(p.residual_row_stride, h);
  a.residual_out = p.residual_out != nullptr ? p.residual_out : p.residual;
  a.residual_out_stride =
      p.residual_out != nullptr ? ResolveStride(p.residual_out_row_stride, h) : a.residual_stride;
  a.residual_unrounded = internal::ResidualUnrounded(p.residual_variance, false);

  bool vectorizable = h % 8 == 0 && RowsVectorizable(a.input, a.input_stride, 2) &&
                      RowsVectorizable(a.weight, 0, 2) && RowsVectorizable(a.output, a.output_stride, 2);
  if (p.residual != nullptr) {
    vectorizable = vectorizable && RowsVectorizable(a.residual, a.residual_stride, 2) &&
                   RowsVectorizable(a.residual_out, a.residual_out_stride, 2);
  }
  int sm_count = 0;
  FXFUSE_KERNELS_RETURN_IF_ERROR(internal::CurrentDeviceSmCount(&sm_count));
  internal::RowLaunchConfig config;
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      internal::ChooseRowLaunchConfig(p.num_tokens, h, vectorizable, sm_count, p.tuning, &config,
                                      internal::NormRowWork(p.residual != nullptr)));
  if (p.residual != nullptr) {
    return device::LaunchRowKernelForDType<true, true, RowOutput::kD16>(
        "fused_add_rms_norm", p.dtype, p.num_tokens, config, a, stream);
  }
  return device::LaunchRowKernelForDType<false, true, RowOutput::kD16>("rms_norm", p.dtype,
                                                                        p.num_tokens, config, a, stream);
}

}  // namespace fxfuse::kernels
