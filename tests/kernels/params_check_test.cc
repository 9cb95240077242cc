// Check() of every params struct and the row launch heuristics (CI, no GPU).
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>

#include "kernels/internal/launch_config.h"
#include "kernels/kernels.h"

namespace fxfuse::kernels {
namespace {

alignas(16) uint16_t g_in[4096 * 4];
alignas(16) uint16_t g_out[4096 * 4];
alignas(16) uint16_t g_res[4096 * 4];
alignas(16) uint16_t g_w[4096];
alignas(16) uint8_t g_q[4096 * 4];
alignas(16) float g_scale[4096];

bool Mentions(const Status& s, const std::string& text) {
  return !s.ok() && s.code() == StatusCode::kInvalidArgument &&
         s.message().find(text) != std::string::npos;
}

RmsNormParams ValidRmsNorm() {
  RmsNormParams p;
  p.num_tokens = 4;
  p.hidden_size = 4096;
  p.input = g_in;
  p.weight = g_w;
  p.output = g_out;
  return p;
}

TEST_CASE("RmsNormParams::Check") {
  RmsNormParams p = ValidRmsNorm();
  CHECK(p.Check().ok());
  p.residual = g_res;
  CHECK(p.Check().ok());
  p.output = g_in;  // in place
  CHECK(p.Check().ok());
  p.output_row_stride = 8192;
  CHECK(Mentions(p.Check(), "in-place"));

  p = ValidRmsNorm();
  p.hidden_size = 0;
  CHECK(Mentions(p.Check(), "hidden_size"));
  p = ValidRmsNorm();
  p.num_tokens = -1;
  CHECK(Mentions(p.Check(), "num_tokens"));
  p = ValidRmsNorm();
  p.num_tokens = int64_t{1} << 31;
  CHECK(Mentions(p.Check(), "num_tokens"));
  p = ValidRmsNorm();
  p.dtype = DType::F32;
  p.weight_dtype = DType::F32;
  CHECK(Mentions(p.Check(), "bfloat16 or float16"));
  p = ValidRmsNorm();
  p.weight_dtype = DType::F16;
  CHECK(Mentions(p.Check(), "weight_dtype"));
  p = ValidRmsNorm();
  p.input_row_stride = 100;
  CHECK(Mentions(p.Check(), "input row stride"));
  p = ValidRmsNorm();
  p.input = reinterpret_cast<const char*>(g_in) + 1;
  CHECK(Mentions(p.Check(), "aligned"));
  p = ValidRmsNorm();
  p.weight = nullptr;  // optional
  p.weight_dtype = DType::F16;
  CHECK(p.Check().ok());
  p = ValidRmsNorm();
  p.residual = g_in;
  CHECK(Mentions(p.Check(), "alias"));
  p = ValidRmsNorm();
  p.residual_out = g_res;  // the sum out of place needs a residual
  CHECK(Mentions(p.Check(), "residual_out needs a residual"));
  p.residual = g_res;
  p.residual_out = g_q;  // a buffer of its own
  CHECK(p.Check().ok());
  p.residual_out = g_out;
  CHECK(Mentions(p.Check(), "residual_out must not alias"));
  p.residual_out = g_q;
  p.residual_out_row_stride = 100;
  CHECK(Mentions(p.Check(), "residual_out"));
  p = ValidRmsNorm();
  p.epsilon = -1.0f;
  CHECK(Mentions(p.Check(), "epsilon"));
  p = ValidRmsNorm();
  p.tuning.vecs_per_thread = 3;
  CHECK(Mentions(p.Check(), "vecs_per_thread"));
  p = ValidRmsNorm();
  p.num_tokens = 0;
  CHECK(p.Check().ok());
}

QuantFp8Params ValidQuant(Fp8ScaleKind kind) {
  QuantFp8Params p;
  p.num_tokens = 4;
  p.hidden_size = 4096;
  p.input = g_in;
  p.output = g_q;
  p.scale.kind = kind;
  p.scale.scale = g_scale;
  if (kind == Fp8ScaleKind::kDynamicPerGroup) p.scale.group_size = 128;
  return p;
}

TEST_CASE("QuantFp8Params::Check") {
  for (Fp8ScaleKind kind : {Fp8ScaleKind::kStaticPerTensor, Fp8ScaleKind::kDynamicPerToken,
                            Fp8ScaleKind::kDynamicPerTensor, Fp8ScaleKind::kDynamicPerGroup}) {
    CHECK(ValidQuant(kind).Check().ok());
  }
  QuantFp8Params p = ValidQuant(Fp8ScaleKind::kStaticPerTensor);
  p.scale.scale = nullptr;
  CHECK(Mentions(p.Check(), "scale.scale is null"));
  p = ValidQuant(Fp8ScaleKind::kStaticPerTensor);
  p.scale.scale_upper_bound = g_scale;
  CHECK(Mentions(p.Check(), "scale_upper_bound"));
  p = ValidQuant(Fp8ScaleKind::kStaticPerTensor);
  p.scale.group_size = 128;
  CHECK(Mentions(p.Check(), "group_size"));
  p = ValidQuant(Fp8ScaleKind::kDynamicPerGroup);
  p.scale.group_size = 32;
  CHECK(Mentions(p.Check(), "64 or 128"));
  p = ValidQuant(Fp8ScaleKind::kDynamicPerGroup);
  p.hidden_size = 4096 + 64;
  CHECK(Mentions(p.Check(), "multiple of scale.group_size"));
  p = ValidQuant(Fp8ScaleKind::kDynamicPerGroup);
  p.scale.token_stride = 1;
  p.scale.group_stride = 4;  // column-major, group_stride >= T
  CHECK(p.Check().ok());
  p.scale.group_stride = 3;
  CHECK(Mentions(p.Check(), "column-major"));
  p = ValidQuant(Fp8ScaleKind::kDynamicPerToken);
  p.scale.min_abs = -1.0f;
  CHECK(Mentions(p.Check(), "min_abs"));
  p.scale.min_abs = 0.0f;
  p.scale.min_scale = std::numeric_limits<float>::infinity();
  CHECK(Mentions(p.Check(), "min_scale"));
  p = ValidQuant(Fp8ScaleKind::kStaticPerTensor);
  p.output_row_stride = 4095;
  CHECK(Mentions(p.Check(), "output row stride"));
}

TEST_CASE("RmsNormQuantFp8Params::Check") {
  RmsNormQuantFp8Params p;
  p.num_tokens = 4;
  p.hidden_size = 4096;
  p.input = g_in;
  p.weight = g_w;
  p.output = g_q;
  p.scale.scale = g_scale;
  CHECK(p.Check().ok());
  p.residual = g_res;
  CHECK(p.Check().ok());
  p.scale.kind = Fp8ScaleKind::kDynamicPerTensor;
  CHECK(Mentions(p.Check(), "not fused"));
  p.scale.kind = Fp8ScaleKind::kDynamicPerGroup;
  p.scale.group_size = 64;
  CHECK(p.Check().ok());
  p.residual = g_in;
  CHECK(Mentions(p.Check(), "alias"));
  p.residual = g_res;
  p.residual_out = g_out;
  CHECK(p.Check().ok());
  p.residual_out = g_in;
  CHECK(Mentions(p.Check(), "residual_out must not alias"));
}

TEST_CASE("SiluAndMulParams::Check") {
  SiluAndMulParams p;
  p.num_tokens = 2;
  p.hidden_size = 4096;
  p.input = g_in;
  p.output = g_out;
  CHECK(p.Check().ok());
  p.input_row_stride = 4096;  // must hold 2d
  CHECK(Mentions(p.Check(), "input row stride"));
  p.input_row_stride = 0;
  p.output_dtype = DType::F8E4M3FN;
  CHECK(Mentions(p.Check(), "scale is null"));
  p.scale = g_scale;
  CHECK(p.Check().ok());
  p.output_dtype = DType::F16;
  CHECK(Mentions(p.Check(), "output_dtype"));
}

TEST_CASE("row launch configs cover the row with at most the allowed threads") {
  using internal::ChooseRowLaunchConfig;
  using internal::RowLaunchConfig;
  for (int64_t h : {8, 64, 4096, 5120, 8192, 14336, 16384, 28672, 32768, 32776, 65536, 4097, 5121, 1}) {
    for (int64_t t : {1, 16, 132, 256, 528, 2048, 32768}) {
      for (int v : {0, 1, 2, 4, 8}) {
       for (internal::RowWork work : {internal::RowWork::kDefault, internal::RowWork::kNormNoResidual,
                                      internal::RowWork::kQuantPerToken, internal::RowWork::kSiluAndMul}) {
        LaunchTuning tuning;
        tuning.vecs_per_thread = v;
        RowLaunchConfig c;
        REQUIRE(ChooseRowLaunchConfig(t, h, /*vectorizable=*/true, 132, tuning, &c, work).ok());
        REQUIRE(c.threads % 32 == 0);
        REQUIRE(c.threads >= 32);
        REQUIRE(c.threads <= 1024);
        if (h % 8 != 0 || h > internal::kMaxVectorizedHidden) {
          REQUIRE_FALSE(c.vectorized);
        } else {
          REQUIRE(c.vectorized);
          REQUIRE(c.threads <= internal::MaxThreadsForVecsPerThread(c.vecs_per_thread));
          REQUIRE(c.column_splits >= 1);
          REQUIRE(int64_t{c.threads} * c.vecs_per_thread * 8 * c.column_splits >= h);
          // A split row: every CTA has vectors of it, and only SiLU-and-mul splits, below the SM count.
          REQUIRE(int64_t{c.threads} * c.vecs_per_thread * 8 * (c.column_splits - 1) < h);
          if (c.column_splits > 1) REQUIRE((work == internal::RowWork::kSiluAndMul && t < 132 && v == 0));
          if (v != 0) REQUIRE(c.vecs_per_thread >= v);
        }
       }
      }
    }
  }
  RowLaunchConfig c;
  LaunchTuning scalar;
  scalar.force_scalar_path = true;
  REQUIRE(ChooseRowLaunchConfig(32768, 4096, true, 132, scalar, &c).ok());
  CHECK_FALSE(c.vectorized);
  REQUIRE(ChooseRowLaunchConfig(32768, 4096, true, 132, LaunchTuning(), &c).ok());
  CHECK(c.vecs_per_thread == 2);
  CHECK(c.threads == 256);
  CHECK(c.pipeline_stages == 0);
  REQUIRE(ChooseRowLaunchConfig(32768, 8192, true, 132, LaunchTuning(), &c, internal::RowWork::kNormNoResidual).ok());
  CHECK(c.vecs_per_thread == 8);
  CHECK(c.threads == 128);
  REQUIRE(ChooseRowLaunchConfig(32768, 4096, true, 132, LaunchTuning(), &c, internal::RowWork::kSiluAndMul).ok());
  CHECK(c.vecs_per_thread == 1);
  CHECK(c.pipeline_stages == 1);
  // The decoder layer's SiLU at T = 64 (d = 14336, 1792 vectors): 5 CTAs of 384 threads per row.
  REQUIRE(ChooseRowLaunchConfig(64, 14336, true, 132, LaunchTuning(), &c, internal::RowWork::kSiluAndMul).ok());
  CHECK(c.vecs_per_thread == 1);
  CHECK(c.threads == 384);
  CHECK(c.column_splits == 5);
  CHECK(c.pipeline_stages == 0);
  REQUIRE(ChooseRowLaunchConfig(1, 8192, true, 132, LaunchTuning(), &c).ok());
  CHECK(c.vecs_per_thread == 1);
  CHECK(c.threads == 1024);
}

}  // namespace
}  // namespace fxfuse::kernels
