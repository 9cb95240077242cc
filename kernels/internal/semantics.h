// Host: per-kernel defaults of the semantic choices (ScaleApplication::kDefault,
// ResidualVariance::kDefault), shared by the launchers and the CPU reference so both resolve
// them identically.
#ifndef FXFUSE_KERNELS_INTERNAL_SEMANTICS_H_
#define FXFUSE_KERNELS_INTERNAL_SEMANTICS_H_

#include "kernels/types.h"

namespace fxfuse::kernels::internal {

// True: quantize with v / s. vLLM's kernels divide for dynamic per-token and per-group scales
// and multiply by 1/s for static and dynamic per-tensor scales.
inline bool ScaleDivides(ScaleApplication application, Fp8ScaleKind kind) {
  if (application == ScaleApplication::kDivide) return true;
  if (application == ScaleApplication::kMultiplyByReciprocal) return false;
  return kind == Fp8ScaleKind::kDynamicPerToken || kind == Fp8ScaleKind::kDynamicPerGroup;
}

// True: normalize the unrounded fp32 residual sum. Defaults: RmsNorm and static FP8 fusions use
// the rounded sum (vLLM fused_add_rms_norm[_static_fp8_quant]); dynamic FP8 fusions the unrounded
// one (vLLM rms_norm_dynamic_per_token_quant).
inline bool ResidualUnrounded(ResidualVariance variance, bool dynamic_fp8_fusion) {
  if (variance == ResidualVariance::kDefault) return dynamic_fp8_fusion;
  return variance == ResidualVariance::kUnroundedSum;
}

}  // namespace fxfuse::kernels::internal

#endif  // FXFUSE_KERNELS_INTERNAL_SEMANTICS_H_
