// GPU test of QuantFp8 (static, dynamic per-token, dynamic per-tensor, per-group 64/128 with
// row- and column-major scales) against the CPU reference. Quantization involves no
// reduction-order-dependent arithmetic (max is exact, / and * are IEEE), so the GPU must match
// the reference bit for bit: q bytes and scales. Includes zero rows/groups/tensors (scale
// floors), saturating values, NaN, odd H, strides, misaligned input, T up to 200000.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/quant_fp8.h"
#include "kernels/reference/numerics.h"
#include "kernels/reference/reference_kernels.h"
#include "tests/kernels/gpu_test_util.h"

namespace fxfuse::kernels {
namespace {

using testing::DeviceBuffer;

struct QuantCase {
  int64_t tokens;
  int64_t hidden;
  int64_t input_pad = 0;
  int64_t output_pad = 0;
  bool misalign = false;  // input pointer 2 bytes off 16-byte alignment
};

struct ScaleVariant {
  Fp8ScaleKind kind = Fp8ScaleKind::kStaticPerTensor;
  ScaleApplication application = ScaleApplication::kDefault;
  int group_size = 0;
  bool column_major = false;
  bool upper_bound = false;
  float min_abs = 0.0f;
  float min_scale = kFp8MinScale;
  float static_scale = 0.01f;  // small: |x| > 4.48 saturates
};

// Size of the scale buffer and its strides for `v` ([1], [T] or [T, H/g] with padding for
// column-major).
struct ScaleLayout {
  int64_t count = 1;
  int64_t token_stride = 0;
  int64_t group_stride = 0;
};

ScaleLayout LayoutFor(const ScaleVariant& v, int64_t t, int64_t h) {
  ScaleLayout l;
  switch (v.kind) {
    case Fp8ScaleKind::kStaticPerTensor:
    case Fp8ScaleKind::kDynamicPerTensor:
      l.count = 1;
      break;
    case Fp8ScaleKind::kDynamicPerToken:
      l.count = t;
      break;
    case Fp8ScaleKind::kDynamicPerGroup: {
      const int64_t groups = h / v.group_size;
      if (v.column_major) {
        l.token_stride = 1;
        l.group_stride = t + 3;  // padded (TMA-aligned style) columns
        l.count = groups * (t + 3);
      } else {
        l.count = t * groups;
      }
      break;
    }
  }
  return l;
}

void CheckQuant(const QuantCase& c, DType dtype, const ScaleVariant& v, const LaunchTuning& tuning = {},
                bool all_zero = false) {
  const uint64_t seed = testing::NextSeed();
  std::mt19937_64 rng(seed);
  const int64_t t = c.tokens, h = c.hidden;
  const int64_t in_stride = h + c.input_pad, out_stride = h + c.output_pad;
  INFO("seed " << seed << " T=" << t << " H=" << h << " in_stride=" << in_stride << " out_stride="
               << out_stride << " misalign=" << c.misalign << " dtype=" << DTypeName(dtype) << " kind="
               << Fp8ScaleKindName(v.kind) << " application=" << static_cast<int>(v.application)
               << " g=" << v.group_size << " col_major=" << v.column_major << " ub=" << v.upper_bound
               << " min_abs=" << v.min_abs << " min_scale=" << v.min_scale << " all_zero=" << all_zero
               << " vecs=" << tuning.vecs_per_thread << " scalar=" << tuning.force_scalar_path);

  std::vector<uint16_t> x = testing::RandomD16(t * in_stride, dtype, 2.0f, rng);
  if (all_zero) std::fill(x.begin(), x.end(), 0);
  if (t > 2) {
    for (int64_t j = 0; j < h; ++j) x[1 * in_stride + j] = 0;  // zero row: dynamic scale floor
  }
  if (t > 3) {  // a row of large values: saturates a static scale
    for (int64_t j = 0; j < h; ++j) {
      x[3 * in_stride + j] = reference::FloatToD16Bits(reference::D16BitsToFloat(x[3 * in_stride + j], dtype) * 100.0f, dtype);
    }
  }
  if (v.kind == Fp8ScaleKind::kDynamicPerGroup && v.group_size > 0 && h >= 2 * v.group_size && t > 0) {
    for (int64_t j = v.group_size; j < 2 * v.group_size; ++j) x[j] = 0;  // one zero group in row 0
  }
  if (v.kind == Fp8ScaleKind::kStaticPerTensor && t > 0) {
    x[0] = reference::FloatToD16Bits(std::nanf(""), dtype);  // NaN stays NaN
    if (h > 1) x[1] = reference::FloatToD16Bits(-1e4f, dtype);
  }

  const ScaleLayout layout = LayoutFor(v, t, h);
  DeviceBuffer x_d(x.size() * 2, c.misalign ? 2 : 0), q_d(t * out_stride + 8), s_d(layout.count * 4),
      ub_d(4);
  x_d.Upload(x);
  q_d.Poison();
  const float ub = 6.0f;  // below the data's usual row maximum: the bound is active
  ub_d.Upload(std::vector<float>{ub});
  std::vector<float> s_init = testing::PoisonedScales(layout.count);
  if (v.kind == Fp8ScaleKind::kStaticPerTensor) s_init[0] = v.static_scale;
  s_d.Upload(s_init);

  QuantFp8Params p;
  p.num_tokens = t;
  p.hidden_size = h;
  p.dtype = dtype;
  p.input_row_stride = in_stride;
  p.output_row_stride = out_stride;
  p.scale.kind = v.kind;
  p.scale.application = v.application;
  p.scale.group_size = v.group_size;
  p.scale.token_stride = layout.token_stride;
  p.scale.group_stride = layout.group_stride;
  p.scale.min_abs = v.min_abs;
  p.scale.min_scale = v.min_scale;
  p.tuning = tuning;

  QuantFp8Params gpu = p;
  gpu.input = x_d.get();
  gpu.output = q_d.get();
  gpu.scale.scale = static_cast<float*>(s_d.get());
  gpu.scale.scale_upper_bound = v.upper_bound ? static_cast<const float*>(ub_d.get()) : nullptr;
  FXFUSE_LAUNCH_REQUIRE(QuantFp8(gpu, nullptr));

  std::vector<uint8_t> q_ref = testing::PoisonedHost<uint8_t>(t * out_stride);
  std::vector<float> s_ref = s_init;
  QuantFp8Params cpu = p;
  cpu.input = x.data();
  cpu.output = q_ref.data();
  cpu.scale.scale = s_ref.data();
  cpu.scale.scale_upper_bound = v.upper_bound ? &ub : nullptr;
  REQUIRE(reference::QuantFp8(cpu).ok());

  testing::ExpectFp8Close("q", q_d.Download<uint8_t>(t * out_stride), q_ref, t, h, out_stride, testing::Exact());
  testing::ExpectScalesClose("scales", s_d.Download<float>(layout.count), s_ref, 0.0);
}

const QuantCase kCases[] = {
    {1, 4096},        {16, 5120},      {7, 8192, 8, 16}, {3, 4097},     {5, 5121, 3, 5},
    {9, 64, 0, 0, true}, {1024, 4096}, {300, 8192, 0, 8}, {2, 40000},  {100000, 40},
    {1000, 1},
};

TEST_CASE("static per-tensor FP8 matches the reference bit for bit") {
  for (const QuantCase& c : kCases) {
    for (DType dtype : {DType::BF16, DType::F16}) {
      ScaleVariant v;
      CheckQuant(c, dtype, v);
      v.application = ScaleApplication::kDivide;
      v.static_scale = 0.0123f;
      CheckQuant(c, dtype, v);
    }
  }
}

TEST_CASE("dynamic per-token FP8 matches the reference bit for bit") {
  for (const QuantCase& c : kCases) {
    for (DType dtype : {DType::BF16, DType::F16}) {
      ScaleVariant v;
      v.kind = Fp8ScaleKind::kDynamicPerToken;
      CheckQuant(c, dtype, v);  // divides (vLLM kernel), MIN_SCALE floor
      v.application = ScaleApplication::kMultiplyByReciprocal;  // native form
      v.upper_bound = true;
      CheckQuant(c, dtype, v);
    }
  }
}

TEST_CASE("dynamic per-tensor FP8 matches the reference bit for bit, floor or none") {
  for (const QuantCase& c : kCases) {
    for (DType dtype : {DType::BF16, DType::F16}) {
      ScaleVariant v;
      v.kind = Fp8ScaleKind::kDynamicPerTensor;
      CheckQuant(c, dtype, v);
    }
  }
  for (DType dtype : {DType::BF16, DType::F16}) {
    ScaleVariant v;
    v.kind = Fp8ScaleKind::kDynamicPerTensor;
    CheckQuant({4, 4096}, dtype, v, {}, /*all_zero=*/true);  // scale = MIN_SCALE, q = 0
    v.min_scale = 0.0f;  // vLLM's kernel: no floor, s = 0, q = fp8(0 * inf) = NaN
    CheckQuant({4, 4096}, dtype, v, {}, /*all_zero=*/true);
  }
}

TEST_CASE("per-group FP8 (64, 128; row- and column-major scales) matches the reference bit for bit") {
  const QuantCase cases[] = {{1, 4096}, {16, 5120}, {7, 8192, 8, 16}, {5, 5120, 3, 5},
                             {9, 128, 0, 0, true}, {1024, 4096}, {2, 40000 / 128 * 128}, {66000, 128}};
  for (const QuantCase& c : cases) {
    for (DType dtype : {DType::BF16, DType::F16}) {
      for (int g : {64, 128}) {
        for (bool column_major : {false, true}) {
          ScaleVariant v;
          v.kind = Fp8ScaleKind::kDynamicPerGroup;
          v.group_size = g;
          v.column_major = column_major;
          CheckQuant(c, dtype, v);
        }
      }
      ScaleVariant vllm_kernel;  // per_token_group_fp8_quant: eps floor on a, no scale floor
      vllm_kernel.kind = Fp8ScaleKind::kDynamicPerGroup;
      vllm_kernel.group_size = 128;
      vllm_kernel.min_abs = 1e-10f;
      vllm_kernel.min_scale = 0.0f;
      CheckQuant(c, dtype, vllm_kernel);
    }
  }
}

TEST_CASE("quantization: every launch shape gives the same bits") {
  int k = 0;
  for (const LaunchTuning& tuning : testing::AllLaunchShapes()) {
    for (Fp8ScaleKind kind : {Fp8ScaleKind::kStaticPerTensor, Fp8ScaleKind::kDynamicPerToken,
                              Fp8ScaleKind::kDynamicPerTensor, Fp8ScaleKind::kDynamicPerGroup}) {
      ScaleVariant v;
      v.kind = kind;
      v.group_size = kind == Fp8ScaleKind::kDynamicPerGroup ? (k % 2 == 0 ? 128 : 64) : 0;
      v.column_major = k % 3 == 0;
      const DType dtype = (k++ % 2 == 0) ? DType::BF16 : DType::F16;
      CheckQuant({3000, 1024, 8, 8}, dtype, v, tuning);  // more rows than resident CTAs
      CheckQuant({7, 8192}, dtype, v, tuning);
    }
  }
}

}  // namespace
}  // namespace fxfuse::kernels
