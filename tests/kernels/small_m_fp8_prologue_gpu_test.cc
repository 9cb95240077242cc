// GPU test of the small-M FP8 GEMM's prologues (kernels/runtime/small_m_fp8_prologue.cuh): the
// GEMM that computes its FP8 activations from its producer's operands must give the bits of
// the unfused chain (the library kernel writing x, then the GEMM reading it) — the output, and
// for the norm the in-place residual update — for either D16 dtype, with and without residual
// and weight, both residual variances, both scale applications, every row count a prologue
// takes, the Llama-3.1-8B/70B widths and a K whose norm partition has idle threads. Every
// fused case runs twice on the same inputs: the arrival counter must re-arm itself. Any lost
// rounding step, misread K offset or early residual write changes bits here.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/rms_norm_quant_fp8.h"
#include "kernels/runtime/small_m_fp8_gemm.h"
#include "kernels/silu_and_mul.h"
#include "tests/kernels/gpu_test_util.h"

namespace fxfuse::runtime {
namespace {

using kernels::testing::DeviceBuffer;
using kernels::testing::NextSeed;
using kernels::testing::RandomD16;

struct NormCase {
  int64_t M, N, K;
  DType dtype = DType::BF16;
  bool residual = true, weight = true, unrounded = false, divide = false;
};

struct SiluCase {
  int64_t M, N, K;
  DType dtype = DType::BF16;
  bool divide = false;
};

// Random e4m3 weight bytes of moderate magnitude, never NaN.
std::vector<uint8_t> randomWeight(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v(n);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : v) {
    do b = static_cast<uint8_t>(byte(rng));
    while ((b & 0x7f) == 0x7f || (b & 0x78) > 0x50);  // no NaN, |w| <= 2^3
  }
  return v;
}

// The GEMM of both paths: weight, scales, bf16 output; x given (chain) or computed (prologue).
struct Gemm {
  DeviceBuffer w, sw, out_chain, out_fused;
  SmallMFp8GemmParams p;
  Gemm(int64_t M, int64_t N, int64_t K, const float* scale_x, std::mt19937_64& rng)
      : w(static_cast<size_t>(N * K)), sw(4), out_chain(static_cast<size_t>(M * N * 2)),
        out_fused(static_cast<size_t>(M * N * 2)) {
    w.Upload(randomWeight(static_cast<size_t>(N * K), rng));
    sw.Upload(std::vector<float>{1.0f / 32});
    out_chain.Poison();
    out_fused.Poison();
    p.M = M, p.N = N, p.K = K;
    p.w = w.get(), p.w_row_stride = K;
    p.scale_x = scale_x, p.scale_w = static_cast<const float*>(sw.get());
    p.out_row_stride = N, p.out_dtype = DType::BF16;
  }
  void runChain(const void* x) {
    SmallMFp8GemmParams q = p;
    q.x = x, q.x_row_stride = p.K, q.out = out_chain.get();
    REQUIRE(SmallMFp8GemmUnsupported(q) == nullptr);
    FXFUSE_CUDA_REQUIRE(LaunchSmallMFp8Gemm(q, nullptr));
  }
  void runFused(const SmallMFp8PrologueParams& prologue) {
    SmallMFp8GemmParams q = p;
    q.prologue = prologue, q.out = out_fused.get();
    const char* why = SmallMFp8GemmUnsupported(q);
    INFO((why ? why : ""));
    REQUIRE(why == nullptr);
    FXFUSE_CUDA_REQUIRE(LaunchSmallMFp8Gemm(q, nullptr));
  }
  bool same() const {
    return out_chain.Download<uint8_t>(out_chain.bytes()) == out_fused.Download<uint8_t>(out_fused.bytes());
  }
};

void runNorm(const NormCase& c) {
  const uint64_t seed = NextSeed();
  std::mt19937_64 rng(seed);
  INFO("M " << c.M << " N " << c.N << " K " << c.K << " " << kernels::DTypeName(c.dtype) << " residual "
            << c.residual << " weight " << c.weight << " unrounded " << c.unrounded << " divide " << c.divide
            << " seed " << seed);
  const size_t rows = static_cast<size_t>(c.M * c.K);
  const std::vector<uint16_t> input = RandomD16(rows, c.dtype, 1.0f, rng), residual = RandomD16(rows, c.dtype, 2.0f, rng);
  DeviceBuffer din(rows * 2), dres_chain(rows * 2), dres_fused(rows * 2), dweight(static_cast<size_t>(c.K) * 2),
      dscale(4), dx(rows), arrivals(4);
  din.Upload(input);
  dres_chain.Upload(residual);
  dres_fused.Upload(residual);
  dweight.Upload(RandomD16(static_cast<size_t>(c.K), c.dtype, 0.5f, rng));
  dscale.Upload(std::vector<float>{0.0137f});  // |n| up to ~6 spreads over the e4m3 range
  FXFUSE_CUDA_REQUIRE(cudaMemset(arrivals.get(), 0, 4));
  const float* scale = static_cast<const float*>(dscale.get());
  Gemm gemm(c.M, c.N, c.K, scale, rng);

  kernels::RmsNormQuantFp8Params norm;
  norm.num_tokens = c.M, norm.hidden_size = c.K, norm.dtype = norm.weight_dtype = c.dtype;
  norm.input = din.get(), norm.input_row_stride = c.K;
  if (c.weight) norm.weight = dweight.get();
  if (c.residual) norm.residual = dres_chain.get(), norm.residual_row_stride = c.K;
  norm.residual_variance = c.unrounded ? kernels::ResidualVariance::kUnroundedSum : kernels::ResidualVariance::kRoundedSum;
  norm.output = dx.get(), norm.output_row_stride = c.K;
  norm.scale.scale = const_cast<float*>(scale);
  norm.scale.application = c.divide ? kernels::ScaleApplication::kDivide : kernels::ScaleApplication::kMultiplyByReciprocal;
  kernels::RmsNormRowPartition part;
  REQUIRE(kernels::RmsNormQuantFp8RowPartition(norm, &part).ok());
  REQUIRE(kernels::RmsNormQuantFp8(norm, nullptr).ok());
  gemm.runChain(dx.get());

  SmallMFp8PrologueParams pro;
  pro.kind = SmallMFp8Prologue::kRmsNormQuant;
  pro.dtype = c.dtype;
  pro.input = din.get(), pro.input_row_stride = c.K;
  if (c.residual) pro.residual = dres_fused.get(), pro.residual_row_stride = c.K, pro.arrivals = static_cast<unsigned*>(arrivals.get());
  pro.residual_unrounded = part.residual_unrounded;
  if (c.weight) pro.weight = dweight.get();
  pro.epsilon = norm.epsilon;
  pro.scale = scale, pro.divide = part.divide;
  pro.norm_threads = part.threads, pro.norm_vecs_per_thread = part.vecs_per_thread;
  for (int run = 0; run < 2; ++run) {
    if (run == 1) dres_fused.Upload(residual), gemm.out_fused.Poison();
    gemm.runFused(pro);
    FXFUSE_CUDA_REQUIRE(cudaDeviceSynchronize());
    INFO("run " << run);
    CHECK(gemm.same());
    if (c.residual) CHECK(dres_chain.Download<uint8_t>(rows * 2) == dres_fused.Download<uint8_t>(rows * 2));
    CHECK(arrivals.Download<uint32_t>(1)[0] == 0u);
  }
}

void runSilu(const SiluCase& c) {
  const uint64_t seed = NextSeed();
  std::mt19937_64 rng(seed);
  INFO("M " << c.M << " N " << c.N << " K " << c.K << " " << kernels::DTypeName(c.dtype) << " divide " << c.divide
            << " seed " << seed);
  const size_t in_elems = static_cast<size_t>(c.M * 2 * c.K);
  DeviceBuffer din(in_elems * 2), dscale(4), dx(static_cast<size_t>(c.M * c.K));
  din.Upload(RandomD16(in_elems, c.dtype, 2.0f, rng));
  dscale.Upload(std::vector<float>{0.0211f});
  const float* scale = static_cast<const float*>(dscale.get());
  Gemm gemm(c.M, c.N, c.K, scale, rng);

  kernels::SiluAndMulParams silu;
  silu.num_tokens = c.M, silu.hidden_size = c.K, silu.dtype = c.dtype;
  silu.input = din.get(), silu.input_row_stride = 2 * c.K;
  silu.output_dtype = DType::F8E4M3FN, silu.output = dx.get(), silu.output_row_stride = c.K;
  silu.scale = scale;
  silu.scale_application = c.divide ? kernels::ScaleApplication::kDivide : kernels::ScaleApplication::kMultiplyByReciprocal;
  REQUIRE(kernels::SiluAndMul(silu, nullptr).ok());
  gemm.runChain(dx.get());

  SmallMFp8PrologueParams pro;
  pro.kind = SmallMFp8Prologue::kSiluAndMulQuant;
  pro.dtype = c.dtype;
  pro.input = din.get(), pro.input_row_stride = 2 * c.K;
  pro.scale = scale, pro.divide = c.divide;
  gemm.runFused(pro);
  FXFUSE_CUDA_REQUIRE(cudaDeviceSynchronize());
  CHECK(gemm.same());
}

TEST_CASE("norm prologue: the chain's bits at every row count and option", "[gpu][gemm]") {
  for (int64_t M : {1, 2, 5, 8}) runNorm({M, 200, 4096});
  for (DType t : {DType::BF16, DType::F16}) {
    runNorm({3, 72, 1040, t});  // 130 vectors: a partition of 160 threads, 30 idle
    runNorm({4, 72, 1040, t, false});
    runNorm({4, 72, 1040, t, true, false});
    runNorm({4, 72, 1040, t, true, true, true});
    runNorm({4, 72, 1040, t, true, true, false, true});
  }
}

TEST_CASE("norm prologue: Llama-3.1-8B and 70B widths", "[gpu][gemm]") {
  runNorm({1, 6144, 4096});    // 8B qkv
  runNorm({8, 28672, 4096});   // 8B gate/up: several blocks per SM
  runNorm({1, 10240, 8192});   // 70B qkv
  runNorm({8, 2048, 16384});   // the largest K a norm prologue takes
}

TEST_CASE("SiLU prologue: the chain's bits at every row count and option", "[gpu][gemm]") {
  for (int64_t M : {1, 3, 8}) runSilu({M, 100, 1040});
  runSilu({2, 16, 16});  // one partial K step
  runSilu({5, 40, 2064, DType::F16});
  runSilu({6, 40, 2064, DType::BF16, true});
  runSilu({1, 4096, 14336});  // 8B down
  runSilu({8, 4096, 14336});
  runSilu({4, 1024, 28672});  // 70B down (a slice)
}

}  // namespace
}  // namespace fxfuse::runtime
