// GPU test of RmsNormQuantFp8 (static, dynamic per-token, per-group; with and without residual):
//  1. bit-identical to the unfused GPU chain RmsNorm -> QuantFp8 with the same options
//     (q bytes, scales, residual);
//  2. against the CPU reference: residual exact; scales within two D16 ulps of the row/group
//     maximum (see NormTolerance); q within one FP8 step of the reference normalized values
//     quantized with the GPU's scales, on at most 2% of the elements.
// Fresh random data per check, poisoned outputs, odd H, strides, misalignment, large T, zero
// rows, saturating static scales.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/internal/semantics.h"
#include "kernels/quant_fp8.h"
#include "kernels/reference/numerics.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/rms_norm.h"
#include "kernels/rms_norm_quant_fp8.h"
#include "tests/kernels/gpu_test_util.h"

namespace fxfuse::kernels {
namespace {

using testing::DeviceBuffer;

struct FusedCase {
  int64_t tokens;
  int64_t hidden;
  int64_t input_pad = 0;
  int64_t output_pad = 0;  // also the residual's row padding
  bool misalign = false;
};

struct FusedRun {
  DType dtype = DType::BF16;
  Fp8ScaleKind kind = Fp8ScaleKind::kStaticPerTensor;
  int group_size = 0;
  bool column_major = false;
  bool residual = false;
  bool residual_out = false;  // the fused kernel's sum to a buffer of its own (residual only read)
  ResidualVariance variance = ResidualVariance::kDefault;
  ScaleApplication application = ScaleApplication::kDefault;
  bool weight = true;
  LaunchTuning tuning;
};

void CheckFused(const FusedCase& c, const FusedRun& run) {
  const uint64_t seed = testing::NextSeed();
  std::mt19937_64 rng(seed);
  const int64_t t = c.tokens, h = c.hidden;
  const int64_t in_stride = h + c.input_pad, out_stride = h + c.output_pad, res_stride = h + c.output_pad;
  INFO("seed " << seed << " T=" << t << " H=" << h << " in_stride=" << in_stride << " out_stride=" << out_stride
               << " misalign=" << c.misalign << " dtype=" << DTypeName(run.dtype) << " kind="
               << Fp8ScaleKindName(run.kind) << " g=" << run.group_size << " col_major=" << run.column_major
               << " residual=" << run.residual << " variance=" << ResidualVarianceName(run.variance)
               << " application=" << static_cast<int>(run.application) << " weight=" << run.weight
               << " vecs=" << run.tuning.vecs_per_thread << " scalar=" << run.tuning.force_scalar_path);

  std::vector<uint16_t> x = testing::RandomD16(t * in_stride, run.dtype, 2.0f, rng);
  const std::vector<uint16_t> r = testing::RandomD16(t * res_stride, run.dtype, 2.0f, rng);
  const std::vector<uint16_t> w = testing::RandomUniformD16(h, run.dtype, 0.5f, 1.5f, rng);
  std::vector<uint16_t> r_zeroed = r;
  if (t > 2) {
    for (int64_t j = 0; j < h; ++j) {
      x[1 * in_stride + j] = 0;  // zero row: dynamic scale floor
      r_zeroed[1 * res_stride + j] = 0;
    }
  }
  const float static_scale = 0.005f;  // |n| > 2.24 saturates

  // Scale layout.
  const bool per_group = run.kind == Fp8ScaleKind::kDynamicPerGroup;
  const int64_t groups = per_group ? h / run.group_size : 1;
  int64_t scale_count = 1, token_stride = 0, group_stride = 0;
  if (run.kind == Fp8ScaleKind::kDynamicPerToken) scale_count = t;
  if (per_group) {
    if (run.column_major) {
      token_stride = 1;
      group_stride = t + 5;
      scale_count = groups * (t + 5);
    } else {
      scale_count = t * groups;
    }
  }
  std::vector<float> s_init = testing::PoisonedScales(scale_count);
  if (run.kind == Fp8ScaleKind::kStaticPerTensor) s_init[0] = static_scale;

  // Resolved choices, for the chain (the fused kernel gets the params as given).
  const bool dynamic = run.kind != Fp8ScaleKind::kStaticPerTensor;
  const bool unrounded = internal::ResidualUnrounded(run.variance, dynamic);
  const ResidualVariance resolved = unrounded ? ResidualVariance::kUnroundedSum : ResidualVariance::kRoundedSum;

  DeviceBuffer x_d(x.size() * 2, c.misalign ? 2 : 0), w_d(w.size() * 2), r_fused(r.size() * 2),
      r_chain(r.size() * 2), q_fused(t * out_stride + 8), q_chain(t * out_stride + 8),
      s_fused(scale_count * 4), s_chain(scale_count * 4), n_chain(t * out_stride * 2 + 16), r_out(r.size() * 2);
  r_out.Upload(testing::PoisonRows(r_zeroed, t, h, res_stride));  // the padding as the residual's
  x_d.Upload(x);
  w_d.Upload(w);
  r_fused.Upload(r_zeroed);
  r_chain.Upload(r_zeroed);
  q_fused.Poison();
  q_chain.Poison();
  n_chain.Poison();
  s_fused.Upload(s_init);
  s_chain.Upload(s_init);

  Fp8ScaleSpec spec;
  spec.kind = run.kind;
  spec.group_size = run.group_size;
  spec.token_stride = token_stride;
  spec.group_stride = group_stride;
  spec.application = run.application;

  // 1. Fused kernel.
  RmsNormQuantFp8Params f;
  f.num_tokens = t;
  f.hidden_size = h;
  f.dtype = run.dtype;
  f.weight_dtype = run.dtype;
  f.input = x_d.get();
  f.input_row_stride = in_stride;
  f.weight = run.weight ? w_d.get() : nullptr;
  f.residual = run.residual ? r_fused.get() : nullptr;
  f.residual_row_stride = res_stride;
  if (run.residual_out) {
    f.residual_out = r_out.get();
    f.residual_out_row_stride = res_stride;
  }
  f.residual_variance = run.variance;
  f.epsilon = 1e-5f;
  f.output = q_fused.get();
  f.output_row_stride = out_stride;
  f.scale = spec;
  f.scale.scale = static_cast<float*>(s_fused.get());
  f.tuning = run.tuning;
  FXFUSE_LAUNCH_REQUIRE(RmsNormQuantFp8(f, nullptr));

  // 2. Unfused GPU chain with the resolved options and the same launch shape.
  RmsNormParams n;
  n.num_tokens = t;
  n.hidden_size = h;
  n.dtype = run.dtype;
  n.weight_dtype = run.dtype;
  n.input = x_d.get();
  n.input_row_stride = in_stride;
  n.weight = f.weight;
  n.output = n_chain.get();
  n.output_row_stride = out_stride;
  n.residual = run.residual ? r_chain.get() : nullptr;
  n.residual_row_stride = res_stride;
  n.residual_variance = resolved;
  n.epsilon = f.epsilon;
  n.tuning = run.tuning;
  FXFUSE_LAUNCH_REQUIRE(RmsNorm(n, nullptr));
  QuantFp8Params q;
  q.num_tokens = t;
  q.hidden_size = h;
  q.dtype = run.dtype;
  q.input = n_chain.get();
  q.input_row_stride = out_stride;
  q.output = q_chain.get();
  q.output_row_stride = out_stride;
  q.scale = spec;
  q.scale.scale = static_cast<float*>(s_chain.get());
  q.tuning = run.tuning;
  FXFUSE_LAUNCH_REQUIRE(QuantFp8(q, nullptr));

  const std::vector<uint8_t> qf = q_fused.Download<uint8_t>(t * out_stride);
  const std::vector<float> sf = s_fused.Download<float>(scale_count);
  testing::ExpectFp8Close("fused q == chain q", qf, q_chain.Download<uint8_t>(t * out_stride), t, h, out_stride,
                          testing::Exact());
  testing::ExpectScalesClose("fused scales == chain scales", sf, s_chain.Download<float>(scale_count), 0.0);
  const std::vector<uint16_t> rf = (run.residual_out ? r_out : r_fused).Download<uint16_t>(r.size());
  if (run.residual_out) {
    testing::ExpectD16Close("residual only read", run.dtype, r_fused.Download<uint16_t>(r.size()), r_zeroed, t, h,
                            res_stride, testing::Exact());
  }
  if (run.residual) {
    testing::ExpectD16Close("fused residual == chain residual", run.dtype, rf, r_chain.Download<uint16_t>(r.size()),
                            t, h, res_stride, testing::Exact());
  }
  testing::ExpectD16Close("input untouched", run.dtype, x_d.Download<uint16_t>(x.size()), x, t, in_stride, in_stride,
                          testing::Exact());

  // 3. CPU reference.
  std::vector<uint16_t> r_ref = r_zeroed;
  std::vector<uint8_t> q_ref = testing::PoisonedHost<uint8_t>(t * out_stride);
  std::vector<float> s_ref = s_init;
  RmsNormQuantFp8Params cpu = f;
  cpu.residual_out = nullptr;  // the reference updates in place: the same sum
  cpu.input = x.data();
  cpu.weight = run.weight ? w.data() : nullptr;
  cpu.residual = run.residual ? r_ref.data() : nullptr;
  cpu.output = q_ref.data();
  cpu.scale.scale = s_ref.data();
  REQUIRE(reference::RmsNormQuantFp8(cpu).ok());
  if (run.residual) testing::ExpectD16Close("residual", run.dtype, rf, r_ref, t, h, res_stride, testing::Exact());
  // Dynamic scales are max|n| / 448: within two D16 ulps of the maximum (see NormTolerance).
  const double scale_tolerance = run.dtype == DType::BF16 ? 2.0 / 128 : 2.0 / 1024;
  testing::ExpectScalesClose("scales vs reference", sf, s_ref, dynamic ? scale_tolerance : 0.0);

  // Reference normalized values, quantized with the GPU's scales.
  std::vector<uint16_t> n_ref = testing::PoisonedHost<uint16_t>(t * out_stride);
  std::vector<uint16_t> r_scratch = r_zeroed;
  RmsNormParams ncpu = n;
  ncpu.input = x.data();
  ncpu.weight = cpu.weight;
  ncpu.output = n_ref.data();
  ncpu.residual = run.residual ? r_scratch.data() : nullptr;
  REQUIRE(reference::RmsNorm(ncpu).ok());
  const bool divide = internal::ScaleDivides(run.application, run.kind);
  std::vector<uint8_t> q_expected = testing::PoisonedHost<uint8_t>(t * out_stride);
  for (int64_t row = 0; row < t; ++row) {
    for (int64_t j = 0; j < h; ++j) {
      float s = sf[0];
      if (run.kind == Fp8ScaleKind::kDynamicPerToken) s = sf[row];
      if (per_group) {
        const int64_t k = j / run.group_size;
        s = run.column_major ? sf[row + k * group_stride] : sf[row * groups + k];
      }
      const float nv = reference::D16BitsToFloat(n_ref[row * out_stride + j], run.dtype);
      q_expected[row * out_stride + j] = reference::QuantizeToE4m3(nv, s, divide);
    }
  }
  testing::ExpectFp8Close("q vs reference", qf, q_expected, t, h, out_stride, testing::Tolerance{1, 0.02});
}

const FusedCase kCases[] = {
    {1, 4096},          {1, 8192},       {16, 5120},     {7, 8192, 8, 16}, {3, 4096, 0, 0, true},
    {300, 4096, 16, 8}, {512, 8192},     {8, 16384},     {2, 40000 / 128 * 128}, {66000, 128},
};
const FusedCase kOddCases[] = {{3, 4097}, {5, 5121, 3, 5}, {1000, 1}, {17, 24}};

TEST_CASE("rms_norm + static FP8 (with and without residual) equals the chain and the reference") {
  for (DType dtype : {DType::BF16, DType::F16}) {
    for (bool residual : {false, true}) {
      FusedRun run;
      run.dtype = dtype;
      run.residual = residual;
      for (const FusedCase& c : kCases) CheckFused(c, run);
      for (const FusedCase& c : kOddCases) CheckFused(c, run);
    }
  }
}

TEST_CASE("rms_norm + dynamic per-token FP8 (with and without residual) equals the chain and the reference") {
  for (DType dtype : {DType::BF16, DType::F16}) {
    for (bool residual : {false, true}) {
      FusedRun run;
      run.dtype = dtype;
      run.kind = Fp8ScaleKind::kDynamicPerToken;
      run.residual = residual;
      for (const FusedCase& c : kCases) CheckFused(c, run);
      for (const FusedCase& c : kOddCases) CheckFused(c, run);
    }
  }
}

TEST_CASE("rms_norm + per-group FP8 (64/128, row/column-major, residual) equals the chain and the reference") {
  for (DType dtype : {DType::BF16, DType::F16}) {
    for (bool residual : {false, true}) {
      for (int g : {64, 128}) {
        for (bool column_major : {false, true}) {
          FusedRun run;
          run.dtype = dtype;
          run.kind = Fp8ScaleKind::kDynamicPerGroup;
          run.group_size = g;
          run.column_major = column_major;
          run.residual = residual;
          for (const FusedCase& c : kCases) CheckFused(c, run);
          CheckFused({5, 5120, 3, 5}, run);
        }
      }
    }
  }
}

TEST_CASE("rms_norm + FP8 with the residual sum out of place (residual_out)") {
  // The plans' form for a residual that is a graph input: q, scales and sum as in place.
  for (Fp8ScaleKind kind : {Fp8ScaleKind::kStaticPerTensor, Fp8ScaleKind::kDynamicPerToken}) {
    for (int shape : {0, 1, 2}) {  // the heuristic, the pipelined vectorized path, the scalar path
      FusedRun run;
      run.kind = kind;
      run.residual = run.residual_out = true;
      run.dtype = shape == 2 ? DType::F16 : DType::BF16;
      if (shape == 1) run.tuning.row_pipeline_stages = 2;
      if (shape == 2) run.tuning.force_scalar_path = true;
      for (const FusedCase& c : {FusedCase{1, 4096}, FusedCase{64, 4096}, FusedCase{7, 8192, 8, 16},
                                 FusedCase{3, 4097}, FusedCase{300, 4096, 16, 8}, FusedCase{3, 4096, 0, 0, true}})
        CheckFused(c, run);
    }
  }
}

TEST_CASE("fused kernels: non-default options and every launch shape") {
  // Residual variance against the default of each kind, scale application, no weight.
  for (Fp8ScaleKind kind : {Fp8ScaleKind::kStaticPerTensor, Fp8ScaleKind::kDynamicPerToken,
                            Fp8ScaleKind::kDynamicPerGroup}) {
    FusedRun run;
    run.kind = kind;
    run.group_size = kind == Fp8ScaleKind::kDynamicPerGroup ? 128 : 0;
    run.residual = true;
    run.variance = kind == Fp8ScaleKind::kStaticPerTensor ? ResidualVariance::kUnroundedSum
                                                          : ResidualVariance::kRoundedSum;
    CheckFused({257, 4096}, run);
    run.variance = ResidualVariance::kDefault;
    run.application = kind == Fp8ScaleKind::kStaticPerTensor ? ScaleApplication::kDivide
                                                             : ScaleApplication::kMultiplyByReciprocal;
    run.weight = false;
    CheckFused({33, 5120}, run);
    run.application = ScaleApplication::kDefault;
    run.weight = true;
    int k = 0;
    for (const LaunchTuning& tuning : testing::AllLaunchShapes()) {
      run.tuning = tuning;
      run.residual = k % 2 == 0;
      run.dtype = (k++ % 3 == 0) ? DType::F16 : DType::BF16;
      CheckFused({3000, 1024}, run);  // more rows than resident CTAs
      CheckFused({5, 8192, 8, 8}, run);
    }
  }
}

}  // namespace
}  // namespace fxfuse::kernels
