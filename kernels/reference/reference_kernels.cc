// CPU reference implementations of RmsNorm, QuantFp8, RmsNormQuantFp8 and SiluAndMul.
#include "kernels/reference/reference_kernels.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/internal/launch_config.h"
#include "kernels/internal/semantics.h"
#include "kernels/reference/numerics.h"

namespace fxfuse::kernels::reference {
namespace {

using internal::ResolveStride;

const uint16_t* D16Row(const void* base, int64_t row, int64_t stride) {
  return static_cast<const uint16_t*>(base) + row * stride;
}
uint16_t* D16Row(void* base, int64_t row, int64_t stride) {
  return static_cast<uint16_t*>(base) + row * stride;
}

// One row of (residual-add +) RMSNorm: returns n (fp32 values of the D16 results) and writes
// the residual sum into `residual_out_row` (the residual row itself, or another) when
// `residual_row` is given.
void NormalizeRow(const uint16_t* x, const uint16_t* residual_row, uint16_t* residual_out_row, const uint16_t* weight,
                  int64_t h, DType dtype, bool residual_unrounded, float epsilon, std::vector<float>* n) {
  std::vector<float> source(h);
  for (int64_t j = 0; j < h; ++j) {
    const float xf = D16BitsToFloat(x[j], dtype);
    if (residual_row != nullptr) {
      const float sum = xf + D16BitsToFloat(residual_row[j], dtype);  // fp32 add
      residual_out_row[j] = FloatToD16Bits(sum, dtype);
      source[j] = residual_unrounded ? sum : Round16(sum, dtype);
    } else {
      source[j] = xf;
    }
  }
  const float inv = RmsInverse(source.data(), h, epsilon);
  n->resize(h);
  for (int64_t j = 0; j < h; ++j) {
    const float scaled = Round16(source[j] * inv, dtype);
    (*n)[j] = weight != nullptr ? Round16(scaled * D16BitsToFloat(weight[j], dtype), dtype) : scaled;
  }
}

// Quantizes one row of fp32 values (already D16-exact) to e4m3fn per `spec`. `scale` is the
// static or per-tensor scale value (ignored for per-token and per-group).
void QuantizeRow(const std::vector<float>& values, int64_t row, const Fp8ScaleSpec& spec,
                 float tensor_scale, uint8_t* out) {
  const int64_t h = static_cast<int64_t>(values.size());
  const bool divide = internal::ScaleDivides(spec.application, spec.kind);
  switch (spec.kind) {
    case Fp8ScaleKind::kStaticPerTensor:
    case Fp8ScaleKind::kDynamicPerTensor:
      for (int64_t j = 0; j < h; ++j) out[j] = QuantizeToE4m3(values[j], tensor_scale, divide);
      return;
    case Fp8ScaleKind::kDynamicPerToken: {
      float amax = 0.0f;
      for (float v : values) amax = std::fmax(amax, std::fabs(v));
      if (spec.scale_upper_bound != nullptr) amax = std::fmin(amax, *spec.scale_upper_bound);
      const float scale = DynamicScaleFromAbsMax(amax, spec.min_abs, spec.min_scale);
      spec.scale[row * (spec.token_stride == 0 ? 1 : spec.token_stride)] = scale;
      for (int64_t j = 0; j < h; ++j) out[j] = QuantizeToE4m3(values[j], scale, divide);
      return;
    }
    case Fp8ScaleKind::kDynamicPerGroup: {
      const int64_t g = spec.group_size;
      const int64_t token_stride = spec.token_stride == 0 ? h / g : spec.token_stride;
      const int64_t group_stride = spec.group_stride == 0 ? 1 : spec.group_stride;
      for (int64_t k = 0; k < h / g; ++k) {
        float amax = 0.0f;
        for (int64_t j = k * g; j < (k + 1) * g; ++j) amax = std::fmax(amax, std::fabs(values[j]));
        const float scale = DynamicScaleFromAbsMax(amax, spec.min_abs, spec.min_scale);
        spec.scale[row * token_stride + k * group_stride] = scale;
        for (int64_t j = k * g; j < (k + 1) * g; ++j) out[j] = QuantizeToE4m3(values[j], scale, divide);
      }
      return;
    }
  }
}

}  // namespace

float RmsInverse(const float* values, int64_t n, float epsilon) {
  double sum_sq = 0.0;
  for (int64_t j = 0; j < n; ++j) sum_sq += static_cast<double>(values[j]) * values[j];
  return static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + epsilon));
}

float Silu(float gate) { return gate / (1.0f + std::exp(-gate)); }

Status RmsNorm(const RmsNormParams& p) {
  FXFUSE_KERNELS_RETURN_IF_ERROR(p.Check());
  const int64_t h = p.hidden_size;
  const int64_t in_stride = ResolveStride(p.input_row_stride, h);
  const int64_t out_stride = ResolveStride(p.output_row_stride, h);
  const int64_t res_stride = ResolveStride(p.residual_row_stride, h);
  const int64_t res_out_stride = ResolveStride(p.residual_out_row_stride, h);
  const bool unrounded = internal::ResidualUnrounded(p.residual_variance, false);
  std::vector<float> n;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    uint16_t* residual_row = p.residual != nullptr ? D16Row(p.residual, t, res_stride) : nullptr;
    uint16_t* residual_out_row = p.residual_out != nullptr ? D16Row(p.residual_out, t, res_out_stride) : residual_row;
    NormalizeRow(D16Row(p.input, t, in_stride), residual_row, residual_out_row,
                 static_cast<const uint16_t*>(p.weight), h, p.dtype, unrounded, p.epsilon, &n);
    uint16_t* out = D16Row(p.output, t, out_stride);
    for (int64_t j = 0; j < h; ++j) out[j] = FloatToD16Bits(n[j], p.dtype);
  }
  return Status::Ok();
}

Status QuantFp8(const QuantFp8Params& p) {
  FXFUSE_KERNELS_RETURN_IF_ERROR(p.Check());
  const int64_t h = p.hidden_size;
  const int64_t in_stride = ResolveStride(p.input_row_stride, h);
  const int64_t out_stride = ResolveStride(p.output_row_stride, h);
  float tensor_scale = 0.0f;
  if (p.scale.kind == Fp8ScaleKind::kStaticPerTensor) {
    tensor_scale = *p.scale.scale;
  } else if (p.scale.kind == Fp8ScaleKind::kDynamicPerTensor) {
    float amax = 0.0f;
    for (int64_t t = 0; t < p.num_tokens; ++t) {
      const uint16_t* x = D16Row(p.input, t, in_stride);
      for (int64_t j = 0; j < h; ++j) amax = std::fmax(amax, std::fabs(D16BitsToFloat(x[j], p.dtype)));
    }
    tensor_scale = DynamicScaleFromAbsMax(amax, p.scale.min_abs, p.scale.min_scale);
    *p.scale.scale = tensor_scale;
  }
  std::vector<float> values(h);
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const uint16_t* x = D16Row(p.input, t, in_stride);
    for (int64_t j = 0; j < h; ++j) values[j] = D16BitsToFloat(x[j], p.dtype);
    QuantizeRow(values, t, p.scale, tensor_scale, static_cast<uint8_t*>(p.output) + t * out_stride);
  }
  return Status::Ok();
}

Status RmsNormQuantFp8(const RmsNormQuantFp8Params& p) {
  FXFUSE_KERNELS_RETURN_IF_ERROR(p.Check());
  const int64_t h = p.hidden_size;
  const int64_t in_stride = ResolveStride(p.input_row_stride, h);
  const int64_t out_stride = ResolveStride(p.output_row_stride, h);
  const int64_t res_stride = ResolveStride(p.residual_row_stride, h);
  const int64_t res_out_stride = ResolveStride(p.residual_out_row_stride, h);
  const bool dynamic = p.scale.kind != Fp8ScaleKind::kStaticPerTensor;
  const bool unrounded = internal::ResidualUnrounded(p.residual_variance, dynamic);
  const float tensor_scale = dynamic ? 0.0f : *p.scale.scale;
  std::vector<float> n;
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    uint16_t* residual_row = p.residual != nullptr ? D16Row(p.residual, t, res_stride) : nullptr;
    uint16_t* residual_out_row = p.residual_out != nullptr ? D16Row(p.residual_out, t, res_out_stride) : residual_row;
    NormalizeRow(D16Row(p.input, t, in_stride), residual_row, residual_out_row,
                 static_cast<const uint16_t*>(p.weight), h, p.dtype, unrounded, p.epsilon, &n);
    QuantizeRow(n, t, p.scale, tensor_scale, static_cast<uint8_t*>(p.output) + t * out_stride);
  }
  return Status::Ok();
}

Status SiluAndMul(const SiluAndMulParams& p) {
  FXFUSE_KERNELS_RETURN_IF_ERROR(p.Check());
  const int64_t d = p.hidden_size;
  const int64_t in_stride = ResolveStride(p.input_row_stride, 2 * d);
  const int64_t out_stride = ResolveStride(p.output_row_stride, d);
  const bool fp8 = p.output_dtype == DType::F8E4M3FN;
  const bool divide = internal::ScaleDivides(p.scale_application, Fp8ScaleKind::kStaticPerTensor);
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const uint16_t* in = D16Row(p.input, t, in_stride);
    for (int64_t j = 0; j < d; ++j) {
      const float g = D16BitsToFloat(in[j], p.dtype);
      const float u = D16BitsToFloat(in[d + j], p.dtype);
      const float h = Round16(Round16(Silu(g), p.dtype) * u, p.dtype);
      if (fp8) {
        static_cast<uint8_t*>(p.output)[t * out_stride + j] = QuantizeToE4m3(h, *p.scale, divide);
      } else {
        static_cast<uint16_t*>(p.output)[t * out_stride + j] = FloatToD16Bits(h, p.dtype);
      }
    }
  }
  return Status::Ok();
}

}  // namespace fxfuse::kernels::reference
