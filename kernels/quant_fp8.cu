// QuantFp8 entry point: static, dynamic per-token, per-group and per-tensor FP8 quantization on
// the row kernels (no normalization).
#include <string>

#include "kernels/device/fp8_scale_args.cuh"
#include "kernels/device/row_kernels.cuh"
#include "kernels/quant_fp8.h"

namespace fxfuse::kernels {

using device::RowKernelArgs;
using device::RowOutput;
using device::RowsVectorizable;
using internal::ResolveStride;

Status QuantFp8(const QuantFp8Params& p, cudaStream_t stream) {
  FXFUSE_KERNELS_RETURN_IF_ERROR(p.Check());
  if (p.num_tokens == 0) return Status::Ok();
  const int64_t h = p.hidden_size;
  RowKernelArgs a;
  a.hidden = static_cast<int>(h);
  a.input = p.input;
  a.input_stride = ResolveStride(p.input_row_stride, h);
  a.output = p.output;
  a.output_stride = ResolveStride(p.output_row_stride, h);
  device::SetFp8ScaleArgs(p.scale, h, &a);

  const bool vectorizable = h % 8 == 0 && RowsVectorizable(a.input, a.input_stride, 2) &&
                            RowsVectorizable(a.output, a.output_stride, 1);
  int sm_count = 0;
  FXFUSE_KERNELS_RETURN_IF_ERROR(internal::CurrentDeviceSmCount(&sm_count));
  internal::RowLaunchConfig config;
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      internal::ChooseRowLaunchConfig(p.num_tokens, h, vectorizable, sm_count, p.tuning, &config,
                                      p.scale.kind == Fp8ScaleKind::kDynamicPerToken
                                          ? internal::RowWork::kQuantPerToken
                                          : internal::RowWork::kDefault));
  const DType dtype = p.dtype;
  const int64_t t = p.num_tokens;
  switch (p.scale.kind) {
    case Fp8ScaleKind::kStaticPerTensor:
      return device::LaunchRowKernelForDType<false, false, RowOutput::kFp8Static>(
          "static_scaled_fp8_quant", dtype, t, config, a, stream);
    case Fp8ScaleKind::kDynamicPerToken:
      return device::LaunchRowKernelForDType<false, false, RowOutput::kFp8PerToken>(
          "dynamic_per_token_scaled_fp8_quant", dtype, t, config, a, stream);
    case Fp8ScaleKind::kDynamicPerGroup:
      return device::LaunchRowKernelForDType<false, false, RowOutput::kFp8PerGroup>(
          "per_token_group_fp8_quant", dtype, t, config, a, stream);
    case Fp8ScaleKind::kDynamicPerTensor: {
      // Pass 1 raises the zeroed scale to max over rows of each row's floored scale (the floor
      // and the division by 448 are monotonic, so this is the floored scale of the tensor's
      // max); pass 2 is the static quantization with that scale.
      const cudaError_t err = cudaMemsetAsync(p.scale.scale, 0, sizeof(float), stream);
      if (err != cudaSuccess) {
        return Status::CudaError(std::string("dynamic_scaled_fp8_quant: cudaMemsetAsync: ") +
                                 cudaGetErrorString(err));
      }
      FXFUSE_KERNELS_RETURN_IF_ERROR(
          (device::LaunchRowKernelForDType<false, false, RowOutput::kTensorAbsMax>(
              "dynamic_scaled_fp8_quant(absmax)", dtype, t, config, a, stream)));
      return device::LaunchRowKernelForDType<false, false, RowOutput::kFp8Static>(
          "dynamic_scaled_fp8_quant(quant)", dtype, t, config, a, stream);
    }
  }
  return Status::InvalidArgument("QuantFp8: unsupported scale kind");
}

}  // namespace fxfuse::kernels
