// Host: fills the FP8 fields of RowKernelArgs from an Fp8ScaleSpec (defaults resolved here).
#ifndef FXFUSE_KERNELS_DEVICE_FP8_SCALE_ARGS_CUH_
#define FXFUSE_KERNELS_DEVICE_FP8_SCALE_ARGS_CUH_

#include "kernels/device/row_kernels.cuh"
#include "kernels/internal/semantics.h"
#include "kernels/quant_fp8.h"

namespace fxfuse::kernels::device {

inline void SetFp8ScaleArgs(const Fp8ScaleSpec& s, int64_t hidden_size, RowKernelArgs* a) {
  a->scale = s.scale;
  a->divide = internal::ScaleDivides(s.application, s.kind);
  a->min_abs = s.min_abs;
  a->min_scale = s.min_scale;
  a->scale_upper_bound = s.scale_upper_bound;
  a->group_size = s.group_size;
  if (s.kind == Fp8ScaleKind::kDynamicPerGroup) {
    a->scale_token_stride = s.token_stride == 0 ? hidden_size / s.group_size : s.token_stride;
    a->scale_group_stride = s.group_stride == 0 ? 1 : s.group_stride;
  } else {
    a->scale_token_stride = s.token_stride == 0 ? 1 : s.token_stride;
    a->scale_group_stride = 0;
  }
}

}  // namespace fxfuse::kernels::device

#endif  // FXFUSE_KERNELS_DEVICE_FP8_SCALE_ARGS_CUH_
