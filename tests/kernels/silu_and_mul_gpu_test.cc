// GPU test of SiluAndMul (D16 output) and its static-FP8 fusion: D16 output against the CPU
// reference (expf differs from std::exp by an ulp or two: NormTolerance); the FP8 fusion
// bit-identical to SiluAndMul -> static QuantFp8 on the GPU and within one FP8 step of the
// reference. Fresh data per check, poisoned outputs, odd d,
// strides, misalignment, large T, saturating scale.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/quant_fp8.h"
#include "kernels/reference/numerics.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/silu_and_mul.h"
#include "tests/kernels/gpu_test_util.h"

namespace fxfuse::kernels {
namespace {

using testing::DeviceBuffer;

struct SiluCase {
  int64_t tokens;
  int64_t d;
  int64_t input_pad = 0;
  int64_t output_pad = 0;
  bool misalign = false;
};

void CheckSilu(const SiluCase& c, DType dtype, ScaleApplication application = ScaleApplication::kDefault,
               const LaunchTuning& tuning = {}) {
  const uint64_t seed = testing::NextSeed();
  std::mt19937_64 rng(seed);
  const int64_t t = c.tokens, d = c.d;
  const int64_t in_stride = 2 * d + c.input_pad, out_stride = d + c.output_pad;
  INFO("seed " << seed << " T=" << t << " d=" << d << " in_stride=" << in_stride << " out_stride=" << out_stride
               << " misalign=" << c.misalign << " dtype=" << DTypeName(dtype) << " application="
               << static_cast<int>(application) << " vecs=" << tuning.vecs_per_thread
               << " scalar=" << tuning.force_scalar_path);
  const std::vector<uint16_t> x = testing::RandomD16(t * in_stride, dtype, 3.0f, rng);
  const float scale = 0.01f;  // |h| > 4.48 saturates

  DeviceBuffer x_d(x.size() * 2, c.misalign ? 2 : 0), h_d(t * out_stride * 2 + 16), q_fused(t * out_stride + 8),
      q_chain(t * out_stride + 8), s_d(4);
  x_d.Upload(x);
  s_d.Upload(std::vector<float>{scale});
  h_d.Poison();
  q_fused.Poison();
  q_chain.Poison();

  SiluAndMulParams p;
  p.num_tokens = t;
  p.hidden_size = d;
  p.dtype = dtype;
  p.input = x_d.get();
  p.input_row_stride = in_stride;
  p.output = h_d.get();
  p.output_row_stride = out_stride;
  p.output_dtype = dtype;
  p.tuning = tuning;
  FXFUSE_LAUNCH_REQUIRE(SiluAndMul(p, nullptr));

  SiluAndMulParams pq = p;
  pq.output = q_fused.get();
  pq.output_dtype = DType::F8E4M3FN;
  pq.scale = static_cast<const float*>(s_d.get());
  pq.scale_application = application;
  FXFUSE_LAUNCH_REQUIRE(SiluAndMul(pq, nullptr));

  QuantFp8Params chain;
  chain.num_tokens = t;
  chain.hidden_size = d;
  chain.dtype = dtype;
  chain.input = h_d.get();
  chain.input_row_stride = out_stride;
  chain.output = q_chain.get();
  chain.output_row_stride = out_stride;
  chain.scale.kind = Fp8ScaleKind::kStaticPerTensor;
  chain.scale.scale = static_cast<float*>(s_d.get());
  chain.scale.application = application;
  chain.tuning = tuning;
  FXFUSE_LAUNCH_REQUIRE(QuantFp8(chain, nullptr));

  const std::vector<uint16_t> h_gpu = h_d.Download<uint16_t>(t * out_stride);
  const std::vector<uint8_t> qf = q_fused.Download<uint8_t>(t * out_stride);
  testing::ExpectFp8Close("fused q == chain q", qf, q_chain.Download<uint8_t>(t * out_stride), t, d, out_stride,
                          testing::Exact());

  std::vector<uint16_t> h_ref = testing::PoisonedHost<uint16_t>(t * out_stride);
  SiluAndMulParams cpu = p;
  cpu.input = x.data();
  cpu.output = h_ref.data();
  REQUIRE(reference::SiluAndMul(cpu).ok());
  testing::ExpectD16Close("silu_and_mul", dtype, h_gpu, h_ref, t, d, out_stride, testing::NormTolerance());

  std::vector<uint8_t> q_ref = testing::PoisonedHost<uint8_t>(t * out_stride);
  SiluAndMulParams cpu_q = pq;
  cpu_q.input = x.data();
  cpu_q.output = q_ref.data();
  cpu_q.scale = &scale;
  REQUIRE(reference::SiluAndMul(cpu_q).ok());
  testing::ExpectFp8Close("silu_and_mul_quant", qf, q_ref, t, d, out_stride, testing::Tolerance{1, 0.02});
}

TEST_CASE("silu_and_mul and silu_and_mul_quant match the chain and the reference") {
  const SiluCase cases[] = {{1, 4096},        {1, 14336},     {16, 5120},   {7, 8192, 8, 16}, {3, 4097},
                            {5, 5121, 3, 5},  {9, 64, 0, 0, true}, {300, 4096}, {512, 8192}, {4, 28672},
                            {2, 40000},       {100000, 40},   {1000, 1},  {64, 14336}};
  for (const SiluCase& c : cases) {
    for (DType dtype : {DType::BF16, DType::F16}) CheckSilu(c, dtype);
  }
  CheckSilu({33, 4096}, DType::BF16, ScaleApplication::kDivide);
  int k = 0;
  for (const LaunchTuning& tuning : testing::AllLaunchShapes()) {
    const DType dtype = (k++ % 2 == 0) ? DType::BF16 : DType::F16;
    CheckSilu({3000, 1024}, dtype, ScaleApplication::kDefault, tuning);  // more rows than resident CTAs
    CheckSilu({5, 8192, 8, 8}, dtype, ScaleApplication::kDefault, tuning);
  }
}

}  // namespace
}  // namespace fxfuse::kernels
