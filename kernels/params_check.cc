// Check() of every params struct: shapes, dtypes, strides, element alignment and options.
// Errors name the op and the first offending field.
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/internal/launch_config.h"
#include "kernels/internal/semantics.h"
#include "kernels/quant_fp8.h"
#include "kernels/rms_norm.h"
#include "kernels/rms_norm_quant_fp8.h"
#include "kernels/silu_and_mul.h"

namespace fxfuse::kernels {
namespace {

using internal::IsAligned;
using internal::ResolveStride;

Status Invalid(const char* op, const std::string& what) {
  return Status::InvalidArgument(std::string(op) + ": " + what);
}

Status CheckSizes(const char* op, int64_t num_tokens, int64_t hidden_size) {
  if (num_tokens < 0) return Invalid(op, "num_tokens must be >= 0, got " + std::to_string(num_tokens));
  if (num_tokens > INT32_MAX) {
    return Invalid(op, "num_tokens must be <= 2^31-1 (one CTA per row), got " +
                           std::to_string(num_tokens));
  }
  if (hidden_size < 1 || hidden_size > (int64_t{1} << 30)) {
    return Invalid(op, "hidden_size must be in [1, 2^30], got " + std::to_string(hidden_size));
  }
  return Status::Ok();
}

Status CheckD16(const char* op, const char* field, DType dtype) {
  if (!IsD16(dtype)) {
    return Invalid(op, std::string(field) + " must be bfloat16 or float16, got " + DTypeName(dtype));
  }
  return Status::Ok();
}

// A [rows, width] matrix of `elem_bytes` elements with a row stride (0 = width).
Status CheckMatrix(const char* op, const char* field, const void* ptr, int64_t stride,
                   int64_t width, int elem_bytes) {
  if (ptr == nullptr) return Invalid(op, std::string(field) + " is null");
  if (!IsAligned(ptr, elem_bytes)) {
    return Invalid(op, std::string(field) + " is not aligned to its element size (" +
                           std::to_string(elem_bytes) + " bytes)");
  }
  const int64_t resolved = ResolveStride(stride, width);
  if (resolved < width) {
    return Invalid(op, std::string(field) + " row stride (" + std::to_string(resolved) +
                           ") must be >= its row width (" + std::to_string(width) + ")");
  }
  return Status::Ok();
}

Status CheckEpsilon(const char* op, float epsilon) {
  if (!(epsilon >= 0.0f) || !std::isfinite(epsilon)) {
    return Invalid(op, "epsilon must be finite and >= 0, got " + std::to_string(epsilon));
  }
  return Status::Ok();
}

Status CheckTuning(const char* op, const LaunchTuning& tuning) {
  const int v = tuning.vecs_per_thread;
  if (v != 0 && v != 1 && v != 2 && v != 4 && v != 8) {
    return Invalid(op, "tuning.vecs_per_thread must be 0, 1, 2, 4 or 8, got " + std::to_string(v));
  }
  if (tuning.row_pipeline_stages < -1 || tuning.row_pipeline_stages > 3) {
    return Invalid(op, "tuning.row_pipeline_stages must be -1 (automatic) or 0..3, got " +
                           std::to_string(tuning.row_pipeline_stages));
  }
  return Status::Ok();
}

Status CheckScaleApplication(const char* op, ScaleApplication application) {
  if (application != ScaleApplication::kDefault &&
      application != ScaleApplication::kMultiplyByReciprocal &&
      application != ScaleApplication::kDivide) {
    return Invalid(op, "scale application is not a ScaleApplication value");
  }
  return Status::Ok();
}

// residual_out (optional): only with a residual; a [T, H] D16 matrix apart from input and output.
Status CheckResidualOut(const char* op, const void* residual, const void* residual_out, int64_t stride,
                        int64_t hidden_size, const void* input, const void* output) {
  if (residual_out == nullptr) return Status::Ok();
  if (residual == nullptr) return Invalid(op, "residual_out needs a residual");
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckMatrix(op, "residual_out", residual_out, stride, hidden_size, 2));
  if (residual_out == input || residual_out == output) {
    return Invalid(op, "residual_out must not alias input or output");
  }
  return Status::Ok();
}

Status CheckResidualVariance(const char* op, ResidualVariance variance) {
  if (variance != ResidualVariance::kDefault && variance != ResidualVariance::kRoundedSum &&
      variance != ResidualVariance::kUnroundedSum) {
    return Invalid(op, "residual_variance is not a ResidualVariance value");
  }
  return Status::Ok();
}

Status CheckScaleSpec(const char* op, const Fp8ScaleSpec& s, int64_t num_tokens,
                      int64_t hidden_size, bool allow_dynamic_per_tensor) {
  switch (s.kind) {
    case Fp8ScaleKind::kStaticPerTensor:
    case Fp8ScaleKind::kDynamicPerToken:
    case Fp8ScaleKind::kDynamicPerGroup:
      break;
    case Fp8ScaleKind::kDynamicPerTensor:
      if (!allow_dynamic_per_tensor) {
        return Invalid(op, "dynamic per-tensor scales are not fused; run RmsNorm then QuantFp8");
      }
      break;
    default:
      return Invalid(op, "scale.kind is not an Fp8ScaleKind value");
  }
  if (s.scale == nullptr) return Invalid(op, "scale.scale is null");
  if (!IsAligned(s.scale, 4)) return Invalid(op, "scale.scale is not 4-byte aligned");
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckScaleApplication(op, s.application));
  if (!(s.min_abs >= 0.0f) || !std::isfinite(s.min_abs)) {
    return Invalid(op, "scale.min_abs must be finite and >= 0");
  }
  if (!(s.min_scale >= 0.0f) || !std::isfinite(s.min_scale)) {
    return Invalid(op, "scale.min_scale must be finite and >= 0");
  }
  if (s.scale_upper_bound != nullptr) {
    if (s.kind != Fp8ScaleKind::kDynamicPerToken) {
      return Invalid(op, "scale.scale_upper_bound is only supported for dynamic per-token scales");
    }
    if (!IsAligned(s.scale_upper_bound, 4)) {
      return Invalid(op, "scale.scale_upper_bound is not 4-byte aligned");
    }
  }
  if (s.token_stride < 0 || s.group_stride < 0) {
    return Invalid(op, "scale.token_stride and scale.group_stride must be >= 0");
  }
  if (s.kind == Fp8ScaleKind::kDynamicPerGroup) {
    if (s.group_size != 64 && s.group_size != 128) {
      return Invalid(op, "scale.group_size must be 64 or 128, got " + std::to_string(s.group_size));
    }
    if (hidden_size % s.group_size != 0) {
      return Invalid(op, "hidden_size (" + std::to_string(hidden_size) +
                             ") must be a multiple of scale.group_size (" +
                             std::to_string(s.group_size) + ")");
    }
    const int64_t groups = hidden_size / s.group_size;
    const int64_t token_stride = s.token_stride == 0 ? groups : s.token_stride;
    const int64_t group_stride = s.group_stride == 0 ? 1 : s.group_stride;
    const bool row_major = group_stride == 1 && token_stride >= groups;
    const bool column_major = token_stride == 1 && group_stride >= num_tokens;
    if (!row_major && !column_major) {
      return Invalid(op,
                     "per-group scales must be row-major (group_stride 1, token_stride >= H/g = " +
                         std::to_string(groups) +
                         ") or column-major (token_stride 1, group_stride >= T = " +
                         std::to_string(num_tokens) + "), got token_stride " +
                         std::to_string(token_stride) + ", group_stride " +
                         std::to_string(group_stride));
    }
  } else if (s.group_size != 0) {
    return Invalid(op, "scale.group_size is only meaningful for per-group scales (set it to 0)");
  }
  return Status::Ok();
}

}  // namespace

Status RmsNormParams::Check() const {
  const char* op = "RmsNorm";
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckSizes(op, num_tokens, hidden_size));
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckD16(op, "dtype", dtype));
  if (weight != nullptr && weight_dtype != dtype) {
    return Invalid(op, std::string("weight_dtype (") + DTypeName(weight_dtype) +
                           ") must equal dtype (" + DTypeName(dtype) + ")");
  }
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckMatrix(op, "input", input, input_row_stride, hidden_size, 2));
  if (weight != nullptr) {
    FXFUSE_KERNELS_RETURN_IF_ERROR(CheckMatrix(op, "weight", weight, 0, hidden_size, 2));
  }
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      CheckMatrix(op, "output", output, output_row_stride, hidden_size, 2));
  if (output == input && ResolveStride(output_row_stride, hidden_size) !=
                             ResolveStride(input_row_stride, hidden_size)) {
    return Invalid(op, "in-place output (output == input) needs output_row_stride == input_row_stride");
  }
  if (residual != nullptr) {
    FXFUSE_KERNELS_RETURN_IF_ERROR(
        CheckMatrix(op, "residual", residual, residual_row_stride, hidden_size, 2));
    if (residual == input || residual == output) {
      return Invalid(op, "residual must not alias input or output");
    }
  }
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      CheckResidualOut(op, residual, residual_out, residual_out_row_stride, hidden_size, input, output));
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckResidualVariance(op, residual_variance));
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckEpsilon(op, epsilon));
  return CheckTuning(op, tuning);
}

Status QuantFp8Params::Check() const {
  const char* op = "QuantFp8";
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckSizes(op, num_tokens, hidden_size));
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckD16(op, "dtype", dtype));
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckMatrix(op, "input", input, input_row_stride, hidden_size, 2));
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      CheckMatrix(op, "output", output, output_row_stride, hidden_size, 1));
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      CheckScaleSpec(op, scale, num_tokens, hidden_size, /*allow_dynamic_per_tensor=*/true));
  return CheckTuning(op, tuning);
}

Status RmsNormQuantFp8Params::Check() const {
  const char* op = "RmsNormQuantFp8";
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckSizes(op, num_tokens, hidden_size));
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckD16(op, "dtype", dtype));
  if (weight != nullptr && weight_dtype != dtype) {
    return Invalid(op, std::string("weight_dtype (") + DTypeName(weight_dtype) +
                           ") must equal dtype (" + DTypeName(dtype) + ")");
  }
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckMatrix(op, "input", input, input_row_stride, hidden_size, 2));
  if (weight != nullptr) {
    FXFUSE_KERNELS_RETURN_IF_ERROR(CheckMatrix(op, "weight", weight, 0, hidden_size, 2));
  }
  if (residual != nullptr) {
    FXFUSE_KERNELS_RETURN_IF_ERROR(
        CheckMatrix(op, "residual", residual, residual_row_stride, hidden_size, 2));
    if (residual == input) return Invalid(op, "residual must not alias input");
  }
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      CheckResidualOut(op, residual, residual_out, residual_out_row_stride, hidden_size, input, output));
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckResidualVariance(op, residual_variance));
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckEpsilon(op, epsilon));
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      CheckMatrix(op, "output", output, output_row_stride, hidden_size, 1));
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      CheckScaleSpec(op, scale, num_tokens, hidden_size, /*allow_dynamic_per_tensor=*/false));
  return CheckTuning(op, tuning);
}

bool SiluAndMulScaleDivides(const SiluAndMulParams& p) {
  return internal::ScaleDivides(p.scale_application, Fp8ScaleKind::kStaticPerTensor);
}

Status SiluAndMulParams::Check() const {
  const char* op = "SiluAndMul";
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckSizes(op, num_tokens, hidden_size));
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckD16(op, "dtype", dtype));
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      CheckMatrix(op, "input", input, input_row_stride, 2 * hidden_size, 2));
  if (output_dtype != dtype && output_dtype != DType::F8E4M3FN) {
    return Invalid(op, std::string("output_dtype must be dtype (") + DTypeName(dtype) +
                           ") or float8_e4m3fn, got " + DTypeName(output_dtype));
  }
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckMatrix(op, "output", output, output_row_stride, hidden_size,
                                             DTypeSize(output_dtype)));
  if (output_dtype == DType::F8E4M3FN) {
    if (scale == nullptr) return Invalid(op, "scale is null (needed for float8_e4m3fn output)");
    if (!IsAligned(scale, 4)) return Invalid(op, "scale is not 4-byte aligned");
  }
  FXFUSE_KERNELS_RETURN_IF_ERROR(CheckScaleApplication(op, scale_application));
  return CheckTuning(op, tuning);
}

}  // namespace fxfuse::kernels
