// CPU reference ops on tiny hand-computed cases (CI, no GPU): rounding points of RMSNorm, the
// residual-variance choice, static/dynamic/group FP8 quantization and SiLU-and-mul.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/reference/numerics.h"
#include "kernels/reference/reference_kernels.h"

namespace fxfuse::kernels::reference {
namespace {

std::vector<uint16_t> ToBf16(const std::vector<float>& values) {
  std::vector<uint16_t> out;
  for (float v : values) out.push_back(FloatToBFloat16Bits(v));
  return out;
}

std::vector<float> FromBf16(const std::vector<uint16_t>& bits) {
  std::vector<float> out;
  for (uint16_t b : bits) out.push_back(BFloat16BitsToFloat(b));
  return out;
}

TEST_CASE("rms_norm: y = round16(round16(x * inv) * w)") {
  // Row [2, 2, 2, 2]: mean square 4, inv = 0.5 (eps 0): n = w.
  std::vector<uint16_t> x = ToBf16({2, 2, 2, 2});
  std::vector<uint16_t> w = ToBf16({1, 0.5f, 2, -1});
  std::vector<uint16_t> y(4, 0xFFFF);
  RmsNormParams p;
  p.num_tokens = 1;
  p.hidden_size = 4;
  p.input = x.data();
  p.weight = w.data();
  p.output = y.data();
  p.epsilon = 0.0f;
  REQUIRE(RmsNorm(p).ok());
  CHECK(FromBf16(y) == std::vector<float>({1, 0.5f, 2, -1}));

  // x = [3, 1, 1, 1], w = 1 + 2^-7: x * inv is not bf16-exact; round16 happens before * w.
  x = ToBf16({3, 1, 1, 1});
  w = ToBf16({1.0078125f, 1.0078125f, 1.0078125f, 1.0078125f});
  p.input = x.data();
  p.weight = w.data();
  REQUIRE(RmsNorm(p).ok());
  const float inv = static_cast<float>(1.0 / std::sqrt(12.0 / 4.0));
  for (int j = 0; j < 4; ++j) {
    const float xf = BFloat16BitsToFloat(x[j]);
    const float expected = Round16(Round16(xf * inv, DType::BF16) * 1.0078125f, DType::BF16);
    CHECK(BFloat16BitsToFloat(y[j]) == expected);
  }
}

TEST_CASE("fused_add_rms_norm: residual <- round16(x + r); variance on rounded or unrounded sum") {
  // x + r = 1 + 2^-9 + ... is not bf16-exact: rounded sum 1, unrounded 1.001953125.
  std::vector<uint16_t> x = ToBf16({1.0f, 1.0f, 1.0f, 1.0f});
  const std::vector<uint16_t> r0 = ToBf16({0x1p-9f, 0x1p-9f, 0x1p-9f, 0x1p-9f});
  std::vector<uint16_t> w = ToBf16({1, 1, 1, 1});
  std::vector<uint16_t> y(4), r = r0;
  RmsNormParams p;
  p.num_tokens = 1;
  p.hidden_size = 4;
  p.input = x.data();
  p.weight = w.data();
  p.output = y.data();
  p.residual = r.data();
  p.epsilon = 0.0f;
  REQUIRE(RmsNorm(p).ok());  // default: rounded sum
  CHECK(FromBf16(r) == std::vector<float>({1, 1, 1, 1}));
  CHECK(FromBf16(y) == std::vector<float>({1, 1, 1, 1}));

  r = r0;
  p.residual_variance = ResidualVariance::kUnroundedSum;
  REQUIRE(RmsNorm(p).ok());
  CHECK(FromBf16(r) == std::vector<float>({1, 1, 1, 1}));
  // Unrounded: s = 1 + 2^-9 for every element, so s * inv = 1 (exactly, up to rsqrt rounding).
  for (float v : FromBf16(y)) CHECK(v == 1.0f);

  // In place (output == input), as vLLM's fused_add_rms_norm.
  r = r0;
  x = ToBf16({2, 2, 2, 2});
  p.input = x.data();
  p.output = x.data();
  p.residual_variance = ResidualVariance::kRoundedSum;
  REQUIRE(RmsNorm(p).ok());
  CHECK(FromBf16(x) == std::vector<float>({1, 1, 1, 1}));
  CHECK(FromBf16(r) == std::vector<float>({2, 2, 2, 2}));
}

TEST_CASE("static FP8 quant: x * (1/s), clamp ±448, NaN kept") {
  const std::vector<uint16_t> x = ToBf16({1.0f, -1000.0f, 0.5f, std::nanf(""), 0.0f, 2000.0f});
  std::vector<uint8_t> q(6, 0);
  float scale = 2.0f;
  QuantFp8Params p;
  p.num_tokens = 1;
  p.hidden_size = 6;
  p.input = x.data();
  p.output = q.data();
  p.scale.kind = Fp8ScaleKind::kStaticPerTensor;
  p.scale.scale = &scale;
  REQUIRE(QuantFp8(p).ok());
  CHECK(q[0] == 0x30);  // 0.5
  CHECK(q[1] == 0xFE);  // -500 -> -448
  CHECK(q[2] == 0x28);  // 0.25
  CHECK(IsE4m3NaN(q[3]));
  CHECK(q[4] == 0x00);
  CHECK(q[5] == 0x7E);  // 1000 -> 448
}

TEST_CASE("dynamic per-token FP8: scale = max(amax/448, MIN_SCALE), division; zero row floors") {
  // Row 0: amax 896 -> scale 2; row 1: all zeros -> MIN_SCALE, q = 0.
  const std::vector<uint16_t> x = ToBf16({896, -448, 1, 0, 0, 0, 0, 0});
  std::vector<uint8_t> q(8, 0xFF);
  std::vector<float> scales(2, -1.0f);
  QuantFp8Params p;
  p.num_tokens = 2;
  p.hidden_size = 4;
  p.input = x.data();
  p.output = q.data();
  p.scale.kind = Fp8ScaleKind::kDynamicPerToken;
  p.scale.scale = scales.data();
  REQUIRE(QuantFp8(p).ok());
  CHECK(scales[0] == 2.0f);
  CHECK(scales[1] == kFp8MinScale);
  CHECK(q[0] == 0x7E);
  CHECK(q[1] == 0xF6);  // -224 = -1.75 * 2^7
  CHECK(q[2] == 0x30);  // 0.5
  for (int j = 4; j < 8; ++j) CHECK(q[j] == 0x00);

  // Upper bound clamps the row maximum.
  float ub = 448.0f;
  p.scale.scale_upper_bound = &ub;
  REQUIRE(QuantFp8(p).ok());
  CHECK(scales[0] == 1.0f);
  CHECK(q[0] == 0x7E);  // 896 clamps to 448
}

TEST_CASE("dynamic per-tensor FP8: one scale with the MIN_SCALE floor") {
  const std::vector<uint16_t> zeros = ToBf16({0, 0, 0, 0});
  std::vector<uint8_t> q(4, 0xFF);
  float scale = -1.0f;
  QuantFp8Params p;
  p.num_tokens = 2;
  p.hidden_size = 2;
  p.input = zeros.data();
  p.output = q.data();
  p.scale.kind = Fp8ScaleKind::kDynamicPerTensor;
  p.scale.scale = &scale;
  REQUIRE(QuantFp8(p).ok());
  CHECK(scale == kFp8MinScale);
  for (uint8_t b : q) CHECK(b == 0);
  const std::vector<uint16_t> x = ToBf16({1, 2, -4, 44.8f});
  p.input = x.data();
  REQUIRE(QuantFp8(p).ok());
  CHECK(scale == BFloat16BitsToFloat(FloatToBFloat16Bits(44.8f)) / 448.0f);
}

TEST_CASE("per-group FP8: row- and column-major scales, floors") {
  // T = 2, H = 128, g = 64: 2 groups per row. Group (0,0) max 448, (0,1) zeros, (1,0) max 4,
  // (1,1) max 896.
  std::vector<float> values(256, 0.0f);
  values[5] = -448.0f;
  values[128 + 3] = 4.0f;
  values[128 + 64 + 10] = 896.0f;
  const std::vector<uint16_t> x = ToBf16(values);
  std::vector<uint8_t> q(256);
  std::vector<float> scales(4, -1.0f);
  QuantFp8Params p;
  p.num_tokens = 2;
  p.hidden_size = 128;
  p.input = x.data();
  p.output = q.data();
  p.scale.kind = Fp8ScaleKind::kDynamicPerGroup;
  p.scale.group_size = 64;
  p.scale.scale = scales.data();
  REQUIRE(QuantFp8(p).ok());  // row-major [T, H/g]
  CHECK(scales == std::vector<float>({1.0f, kFp8MinScale, 4.0f / 448.0f, 2.0f}));
  CHECK(q[5] == 0xFE);
  CHECK(q[128 + 3] == 0x7E);
  CHECK(q[128 + 64 + 10] == 0x7E);

  p.scale.token_stride = 1;  // column-major: scale[k * T + t]
  p.scale.group_stride = 2;
  REQUIRE(QuantFp8(p).ok());
  CHECK(scales == std::vector<float>({1.0f, 4.0f / 448.0f, kFp8MinScale, 2.0f}));

  p.scale.min_abs = 1e-10f;  // vLLM group kernel floor
  p.scale.min_scale = 0.0f;
  REQUIRE(QuantFp8(p).ok());
  CHECK(scales[2] == 1e-10f / 448.0f);
}

TEST_CASE("rms_norm + FP8 equals rms_norm then quant (reference chain)") {
  std::vector<uint16_t> x = ToBf16({3, -1, 0.25f, 7, 1, 1, 1, 1});
  const std::vector<uint16_t> w = ToBf16({1, 2, 0.5f, 1.5f});
  std::vector<uint16_t> y(8);
  std::vector<uint8_t> q_chain(8), q_fused(8);
  float scale = 0.0125f;
  RmsNormParams n;
  n.num_tokens = 2;
  n.hidden_size = 4;
  n.input = x.data();
  n.weight = w.data();
  n.output = y.data();
  REQUIRE(RmsNorm(n).ok());
  QuantFp8Params qp;
  qp.num_tokens = 2;
  qp.hidden_size = 4;
  qp.input = y.data();
  qp.output = q_chain.data();
  qp.scale.scale = &scale;
  REQUIRE(QuantFp8(qp).ok());
  RmsNormQuantFp8Params f;
  f.num_tokens = 2;
  f.hidden_size = 4;
  f.input = x.data();
  f.weight = w.data();
  f.output = q_fused.data();
  f.scale.scale = &scale;
  REQUIRE(RmsNormQuantFp8(f).ok());
  CHECK(q_fused == q_chain);
}

TEST_CASE("silu_and_mul: round16(round16(silu(g)) * u), FP8 form quantizes h") {
  const std::vector<uint16_t> in = ToBf16({0.0f, 1.0f, -20.0f, 2.0f, 3.0f, 1.0f});  // [g | u], d = 3
  std::vector<uint16_t> out(3);
  SiluAndMulParams p;
  p.num_tokens = 1;
  p.hidden_size = 3;
  p.input = in.data();
  p.output = out.data();
  REQUIRE(SiluAndMul(p).ok());
  CHECK(BFloat16BitsToFloat(out[0]) == 0.0f);
  const float silu1 = Round16(1.0f / (1.0f + std::exp(-1.0f)), DType::BF16);
  CHECK(BFloat16BitsToFloat(out[1]) == Round16(silu1 * 3.0f, DType::BF16));
  CHECK(std::fabs(BFloat16BitsToFloat(out[2])) < 1e-7f);
  std::vector<uint8_t> q(3);
  float scale = 0.5f;
  p.output_dtype = DType::F8E4M3FN;
  p.output = q.data();
  p.scale = &scale;
  REQUIRE(SiluAndMul(p).ok());
  CHECK(q[1] == QuantizeToE4m3(BFloat16BitsToFloat(out[1]), 0.5f, false));
}

}  // namespace
}  // namespace fxfuse::kernels::reference
