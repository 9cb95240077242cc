// Names and sizes of the kernel API's enums.
#include "kernels/types.h"

namespace fxfuse::kernels {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::F16:
      return "float16";
    case DType::BF16:
      return "bfloat16";
    case DType::F32:
      return "float32";
    case DType::F8E4M3FN:
      return "float8_e4m3fn";
    default:
      return "unsupported dtype";
  }
}

int DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::F32:
      return 4;
    case DType::F8E4M3FN:
      return 1;
    default:
      return 0;
  }
}

const char* Fp8ScaleKindName(Fp8ScaleKind kind) {
  switch (kind) {
    case Fp8ScaleKind::kStaticPerTensor:
      return "static_per_tensor";
    case Fp8ScaleKind::kDynamicPerToken:
      return "dynamic_per_token";
    case Fp8ScaleKind::kDynamicPerTensor:
      return "dynamic_per_tensor";
    case Fp8ScaleKind::kDynamicPerGroup:
      return "dynamic_per_group";
  }
  return "unknown scale kind";
}

const char* ResidualVarianceName(ResidualVariance variance) {
  switch (variance) {
    case ResidualVariance::kDefault:
      return "default";
    case ResidualVariance::kRoundedSum:
      return "rounded_sum";
    case ResidualVariance::kUnroundedSum:
      return "unrounded_sum";
  }
  return "unknown residual variance";
}

}  // namespace fxfuse::kernels
