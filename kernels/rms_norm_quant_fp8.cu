// RmsNormQuantFp8 entry point and the static-scale fused kernels:
// rms_norm_static_fp8_quant and fused_add_rms_norm_static_fp8_quant.
#include "kernels/device/fp8_scale_args.cuh"
#include "kernels/device/rms_norm_quant_fp8_launch.cuh"
#include "kernels/device/row_kernels.cuh"
#include "kernels/internal/semantics.h"
#include "kernels/rms_norm_quant_fp8.h"

namespace fxfuse::kernels {

using device::RowKernelArgs;
using device::RowOutput;
using device::RowsVectorizable;
using internal::ResolveStride;

Status RmsNormQuantFp8(const RmsNormQuantFp8Params& p, cudaStream_t stream) {
  FXFUSE_KERNELS_RETURN_IF_ERROR(p.Check());
  if (p.num_tokens == 0) return Status::Ok();
  const int64_t h = p.hidden_size;
  const bool has_residual = p.residual != nullptr;
  RowKernelArgs a;
  a.hidden = static_cast<int>(h);
  a.input = p.input;
  a.input_stride = ResolveStride(p.input_row_stride, h);
  a.weight = p.weight;
  a.epsilon = p.epsilon;
  a.residual = p.residual;
  a.residual_stride = ResolveStride(p.residual_row_stride, h);
  a.residual_out = p.residual_out != nullptr ? p.residual_out : p.residual;
  a.residual_out_stride =
      p.residual_out != nullptr ? ResolveStride(p.residual_out_row_stride, h) : a.residual_stride;
  const bool static_scale = p.scale.kind == Fp8ScaleKind::kStaticPerTensor;
  a.residual_unrounded = internal::ResidualUnrounded(p.residual_variance, !static_scale);
  a.output = p.output;
  a.output_stride = ResolveStride(p.output_row_stride, h);
  device::SetFp8ScaleArgs(p.scale, h, &a);

  bool vectorizable = h % 8 == 0 && RowsVectorizable(a.input, a.input_stride, 2) &&
                      RowsVectorizable(a.weight, 0, 2) && RowsVectorizable(a.output, a.output_stride, 1);
  if (has_residual) {
    vectorizable = vectorizable && RowsVectorizable(a.residual, a.residual_stride, 2) &&
                   RowsVectorizable(a.residual_out, a.residual_out_stride, 2);
  }
  int sm_count = 0;
  FXFUSE_KERNELS_RETURN_IF_ERROR(internal::CurrentDeviceSmCount(&sm_count));
  internal::RowLaunchConfig config;
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      internal::ChooseRowLaunchConfig(p.num_tokens, h, vectorizable, sm_count, p.tuning, &config,
                                      internal::NormRowWork(has_residual)));
  const int64_t t = p.num_tokens;
  switch (p.scale.kind) {
    case Fp8ScaleKind::kStaticPerTensor:
      if (has_residual) {
        return device::LaunchRowKernelForDType<true, true, RowOutput::kFp8Static>(
            "fused_add_rms_norm_static_fp8_quant", p.dtype, t, config, a, stream);
      }
      return device::LaunchRowKernelForDType<false, true, RowOutput::kFp8Static>(
          "rms_norm_static_fp8_quant", p.dtype, t, config, a, stream);
    case Fp8ScaleKind::kDynamicPerToken:
      return device::LaunchRmsNormQuantFp8PerToken(has_residual, p.dtype, t, config, a, stream);
    case Fp8ScaleKind::kDynamicPerGroup:
      return device::LaunchRmsNormQuantFp8PerGroup(has_residual, p.dtype, t, config, a, stream);
    case Fp8ScaleKind::kDynamicPerTensor:
      break;
  }
  return Status::InvalidArgument("RmsNormQuantFp8: unsupported scale kind");
}

}  // namespace fxfuse::kernels
