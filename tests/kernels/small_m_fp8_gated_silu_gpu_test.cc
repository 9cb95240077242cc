// GPU test of the small-M FP8 GEMM's gated-SiLU epilogue (kernels/runtime/small_m_fp8_gemm.h):
// the gate/up GEMM that applies silu_and_mul_quant to its own output must give the bytes of
// the unfused chain (the GEMM writing [M, 2d] in BF16/F16, then the library's
// silu_and_mul_quant) wherever both GEMMs split K the same way (K <= 512: at most four slices,
// which the epilogue keeps; the Llama-3.1-8B gate/up shape: one slice), for both output dtypes,
// both scale applications, every token-tile count, d not a multiple of a CTA's gate tiles, and
// padded output rows (the padding stays untouched). Where the epilogue must take fewer K
// slices than the plain GEMM (Llama-3.1-70B's gate/up: 8 → 4) the GEMM sums in another order,
// so there the outputs may differ by one FP8 step in a few elements and no more. A swapped gate
// and up, a misplaced pair or a lost rounding step changes most bytes.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/runtime/small_m_fp8_gemm.h"
#include "kernels/silu_and_mul.h"
#include "tests/kernels/gpu_test_util.h"

namespace fxfuse::runtime {
namespace {

using kernels::testing::DeviceBuffer;
using kernels::testing::NextSeed;
using kernels::testing::RandomFp8Bytes;

struct Case {
  int64_t M, d, K;
  DType dtype = DType::BF16;
  bool divide = false;
  int64_t out_pad = 0;      // extra bytes per FP8 output row
  bool exact = true;        // false: K slices may differ (one FP8 step allowed in <= 1 % of elements)
  int ring_stages = 0;      // the fused GEMM's ring stages: 0 = the kernel's rule
  int tile_rows = 0;        // both GEMMs' wgmma tile height: 0 = the kernel's rule
};

// Distance of two e4m3 bytes in representable steps (same sign assumed when both nonzero).
int fp8Steps(uint8_t a, uint8_t b) {
  const auto ordinal = [](uint8_t v) { return (v & 0x80) ? -static_cast<int>(v & 0x7f) : static_cast<int>(v); };
  return std::abs(ordinal(a) - ordinal(b));
}

void runCase(const Case& c) {
  const uint64_t seed = NextSeed();
  std::mt19937_64 rng(seed);
  const int64_t N = 2 * c.d, out_stride = c.d + c.out_pad;
  INFO("M " << c.M << " d " << c.d << " K " << c.K << " " << kernels::DTypeName(c.dtype) << " divide " << c.divide
            << " pad " << c.out_pad << " seed " << seed);
  DeviceBuffer dx(static_cast<size_t>(c.M * c.K)), dw(static_cast<size_t>(N * c.K)), dsx(4), dsw(4), dsq(4);
  DeviceBuffer dgemm(static_cast<size_t>(c.M * N * 2)), dchain(static_cast<size_t>(c.M * out_stride)),
      dfused(static_cast<size_t>(c.M * out_stride));
  dx.Upload(RandomFp8Bytes(static_cast<size_t>(c.M * c.K), rng, 9));
  dw.Upload(RandomFp8Bytes(static_cast<size_t>(N * c.K), rng, 7));
  // Scales that put the GEMM's outputs around 1..8 (silu's interesting range) and spread h
  // over the e4m3 range.
  dsx.Upload(std::vector<float>{2.0f / std::sqrt(static_cast<float>(c.K))});
  dsw.Upload(std::vector<float>{1.0f});
  dsq.Upload(std::vector<float>{0.1f});
  dchain.Poison();
  dfused.Poison();

  SmallMFp8GemmParams p;
  p.M = c.M, p.N = N, p.K = c.K;
  p.x = dx.get(), p.x_row_stride = c.K;
  p.w = dw.get(), p.w_row_stride = c.K;
  p.scale_x = static_cast<const float*>(dsx.get()), p.scale_w = static_cast<const float*>(dsw.get());
  p.out = dgemm.get(), p.out_row_stride = N, p.out_dtype = c.dtype;
  p.wgmma_tile_rows = c.tile_rows;  // the same tiles (and so K slices) for the chain's GEMM
  REQUIRE(SmallMFp8GemmUnsupported(p) == nullptr);
  FXFUSE_CUDA_REQUIRE(LaunchSmallMFp8Gemm(p, nullptr));
  kernels::SiluAndMulParams silu;
  silu.num_tokens = c.M, silu.hidden_size = c.d, silu.dtype = c.dtype;
  silu.input = dgemm.get(), silu.input_row_stride = N;
  silu.output_dtype = DType::F8E4M3FN, silu.output = dchain.get(), silu.output_row_stride = out_stride;
  silu.scale = static_cast<const float*>(dsq.get());
  silu.scale_application = c.divide ? kernels::ScaleApplication::kDivide : kernels::ScaleApplication::kMultiplyByReciprocal;
  REQUIRE(kernels::SiluAndMul(silu, nullptr).ok());

  SmallMFp8GemmParams q = p;
  q.out = nullptr;
  q.gated_silu.out = dfused.get(), q.gated_silu.out_row_stride = out_stride;
  q.gated_silu.scale = silu.scale, q.gated_silu.divide = kernels::SiluAndMulScaleDivides(silu);
  q.ring_stages = c.ring_stages;
  const char* why = SmallMFp8GemmUnsupported(q);
  INFO((why ? why : "accepted"));
  REQUIRE(why == nullptr);
  FXFUSE_CUDA_REQUIRE(LaunchSmallMFp8Gemm(q, nullptr));
  FXFUSE_CUDA_REQUIRE(cudaDeviceSynchronize());

  const std::vector<uint8_t> chain = dchain.Download<uint8_t>(dchain.bytes()), fused = dfused.Download<uint8_t>(dfused.bytes());
  int64_t differ = 0, far = 0, padding = 0, nonzero = 0;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < out_stride; ++n) {
      const size_t i = static_cast<size_t>(m * out_stride + n);
      if (n >= c.d) {
        padding += fused[i] != 0xFF;
        continue;
      }
      nonzero += (chain[i] & 0x7f) != 0;
      if (chain[i] != fused[i]) ++differ, far += fp8Steps(chain[i], fused[i]) > 1;
    }
  INFO(differ << " of " << c.M * c.d << " outputs differ (" << far << " by more than one step), " << nonzero
              << " nonzero, padding written " << padding);
  CHECK(padding == 0);
  CHECK(nonzero > c.M * c.d / 2);  // the test data reach the FP8 range
  if (c.exact) {
    CHECK(differ == 0);
  } else {
    CHECK(far == 0);
    CHECK(differ * 100 <= c.M * c.d);
  }
}

TEST_CASE("gated-SiLU epilogue: the chain's bytes at every token-tile count", "[gpu][gemm]") {
  for (int64_t M : {1, 2, 7, 8, 9, 16}) runCase({M, 208, 512});  // 13 gate tiles: a partial pair group
  runCase({3, 16, 16});                                          // one pair, one partial K step
  runCase({5, 48, 128, DType::F16});
  runCase({4, 80, 384, DType::BF16, true});
  runCase({12, 80, 384, DType::F16, true, 8});
}

TEST_CASE("gated-SiLU epilogue: Llama-3.1-8B and 70B gate/up", "[gpu][gemm]") {
  runCase({1, 14336, 4096});  // 8B: one K slice either way
  runCase({8, 14336, 4096});
  runCase({16, 14336, 4096});
  runCase({1, 28672, 8192, DType::BF16, false, 0, false});  // 70B: 8 slices plain, 4 gated
  runCase({8, 28672, 8192, DType::BF16, false, 0, false});
}

// Above 16 rows the wgmma kernel takes the epilogue: tiles of 32 gate rows and their up rows,
// the plain kernel's K slices (so the sums, and the bytes, are the chain's).
TEST_CASE("gated-SiLU epilogue: the wgmma kernel's rows", "[gpu][gemm]") {
  for (int64_t M : {17, 32, 33, 64}) runCase({M, 96, 512});  // 3 tiles: one cluster of several per tile
  runCase({40, 32, 16});                                       // one tile, one partial K step
  runCase({24, 64, 384, DType::F16, true, 8});
  runCase({32, 14336, 4096});  // 8B gate/up at batch 32 and 64
  runCase({64, 14336, 4096});
  runCase({64, 28672, 8192});  // 70B
}

// Tiles of 128 rows (64 gate rows and their up rows, two warpgroups): the same bytes.
TEST_CASE("gated-SiLU epilogue: the wgmma kernel's 128-row tiles", "[gpu][gemm]") {
  for (Case c : {Case{17, 192, 512}, Case{33, 192, 512}, Case{64, 64, 16}, Case{24, 128, 384, DType::F16, true, 8},
                 Case{32, 14336, 4096}, Case{64, 14336, 4096}, Case{64, 28672, 8192}}) {
    c.tile_rows = kSmallMFp8WgmmaWideTileRows;
    runCase(c);
  }
}

// The deep ring (half its stages filled after the grid wait) leaves the same bytes: the order
// of each sum over K is the same.
TEST_CASE("gated-SiLU epilogue: the deep ring", "[gpu][gemm]") {
  for (Case c : {Case{1, 208, 512}, Case{8, 208, 512}, Case{3, 16, 16}, Case{1, 14336, 4096}, Case{8, 14336, 4096}}) {
    c.ring_stages = kSmallMFp8DeepRingStages;
    runCase(c);
  }
}

}  // namespace
}  // namespace fxfuse::runtime
