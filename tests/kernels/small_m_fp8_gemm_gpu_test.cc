// GPU test of the small-M FP8 GEMM (kernels/runtime/small_m_fp8_gemm.h) against a float64 CPU
// reference of the same rounding (scale product in f32, acc * scale, + bias, output dtype).
// The bound per element: two steps of the output dtype, plus the accumulation error of the
// exact sum: 2^-20 of the sum of |products| (scaled) for the mma.sync kernel (f16 MMA with fp32
// accumulation); for the wgmma kernel, whose FP8 MMA adds at about 14 bits within each
// 128-byte K step before the fp32 sum, the project's FP8 GEMM accumulation bound
// (ref::Fp8GemmAccumulationFraction: 2^-12 at K <= 512, (K - 1) 2^-21 above). A lost 32-byte
// K slice or a misread layout is off by 32/K of the sum or more (2^-7 at K = 4096). Cases cover every token-tile count
// (M 1..16 across the 8-token tiles) and both token widths of the wgmma kernel (M 17..64, and
// M <= 16 through it directly), N not a multiple of the tile, K with a partial 128-byte step and
// with one 16-byte step, padded row strides (the padding must stay untouched), bias of each
// dtype and every output dtype; and Llama-3.1-8B decode shapes.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

#include "kernels/quant_fp8.h"
#include "kernels/reference/numerics.h"
#include "kernels/runtime/small_m_fp8_gemm.h"
#include "tests/kernels/gpu_test_util.h"

namespace fxfuse::runtime {
namespace {

using kernels::testing::DeviceBuffer;
using kernels::testing::NextSeed;
namespace ref = kernels::reference;

struct Case {
  int64_t M, N, K;
  DType out_dtype = DType::BF16;
  bool bias = false;
  DType bias_dtype = DType::BF16;
  int64_t x_pad = 0, w_pad = 0, out_pad = 0;  // extra row stride (bytes for x/w, elements for out)
  bool wgmma = false;  // LaunchSmallMFp8GemmWgmma whatever M is (the launcher picks by M)
  int splits = 0;      // K slices per tile: 0 = the kernel's rule
  int l2_prefetch_bytes = -1;  // the mma.sync kernel's L2 prefetch size: -1 = its default
  int ring_stages = 0;         // the mma.sync kernel's ring stages: 0 = its rule
  int tile_rows = 0;           // the wgmma kernel's weight rows per CTA: 0 = its rule
  // The weight written on the device by a quantization kernel launched just before the GEMM
  // (programmatic launch, the stream of a plan), over a poisoned buffer; w_read_only false then:
  // a GEMM filling its ring before the wait would read the poison of rows not yet written.
  bool w_from_quant = false;
};

// Random e4m3 bytes of moderate magnitude (|v| <= 2^4, both signs, subnormals included), never NaN.
std::vector<uint8_t> randomFp8(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v(n);
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : v) {
    do b = static_cast<uint8_t>(byte(rng));
    while (ref::IsE4m3NaN(b) || std::fabs(ref::E4m3BitsToFloat(b)) > 16.0f);
  }
  return v;
}

int bytesOf(DType t) { return t == DType::F32 ? 4 : 2; }

// The e4m3 values of `fp8` as bf16 bits (every e4m3 value is a bf16 value).
std::vector<uint16_t> asBf16(const std::vector<uint8_t>& fp8) {
  std::vector<uint16_t> out(fp8.size());
  for (size_t i = 0; i < fp8.size(); ++i) out[i] = ref::FloatToD16Bits(ref::E4m3BitsToFloat(fp8[i]), DType::BF16);
  return out;
}

float readOut(const std::vector<uint8_t>& bytes, int64_t i, DType t) {
  if (t == DType::F32) {
    float f;
    std::memcpy(&f, &bytes[static_cast<size_t>(i) * 4], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &bytes[static_cast<size_t>(i) * 2], 2);
  return ref::D16BitsToFloat(h, t);
}

double roundTo(double v, DType t) {
  if (t == DType::F32) return static_cast<float>(v);
  return ref::Round16(static_cast<float>(v), t);
}

double stepOf(double v, DType t) {  // one step of the output dtype at v
  const int bits = t == DType::F32 ? 24 : t == DType::BF16 ? 8 : 11;
  return std::ldexp(1.0, std::ilogb(std::max(std::fabs(v), 1e-30)) - bits + 1);
}

void runCase(const Case& c) {
  const uint64_t seed = NextSeed();
  std::mt19937_64 rng(seed);
  const int64_t xs = c.K + c.x_pad, ws = c.K + c.w_pad, os = c.N + c.out_pad;
  const std::vector<uint8_t> x = randomFp8(static_cast<size_t>(c.M * xs), rng);
  std::vector<uint8_t> w = randomFp8(static_cast<size_t>(c.N * ws), rng);
  if (c.w_from_quant)  // -0 as +0: the test is about when the GEMM reads w, not how quant writes -0
    std::replace(w.begin(), w.end(), static_cast<uint8_t>(0x80), static_cast<uint8_t>(0x00));
  std::uniform_real_distribution<float> unit(0.25f, 2.0f);
  const float sx = unit(rng) / 64, sw = unit(rng) / 64;
  std::vector<uint8_t> bias_bytes(static_cast<size_t>(c.N * 4));
  std::vector<double> bias(static_cast<size_t>(c.N), 0.0);
  if (c.bias)
    for (int64_t n = 0; n < c.N; ++n) {
      const float b = unit(rng) - 1.0f;
      if (c.bias_dtype == DType::F32) {
        std::memcpy(&bias_bytes[static_cast<size_t>(n) * 4], &b, 4);
        bias[static_cast<size_t>(n)] = b;
      } else {
        const uint16_t h = ref::FloatToD16Bits(b, c.bias_dtype);
        std::memcpy(&bias_bytes[static_cast<size_t>(n) * 2], &h, 2);
        bias[static_cast<size_t>(n)] = ref::D16BitsToFloat(h, c.bias_dtype);
      }
    }
  DeviceBuffer dx(x.size()), dw(w.size()), dsx(4), dsw(4), dbias(bias_bytes.size());
  DeviceBuffer dout(static_cast<size_t>(c.M * os * bytesOf(c.out_dtype)));
  DeviceBuffer dw16(c.w_from_quant ? w.size() * 2 : 1), done(4);
  dx.Upload(x);
  if (c.w_from_quant) {
    dw16.Upload(asBf16(w));
    done.Upload(std::vector<float>{1.0f});
    dw.Poison();
  } else {
    dw.Upload(w);
  }
  dsx.Upload(std::vector<float>{sx});
  dsw.Upload(std::vector<float>{sw});
  dbias.Upload(bias_bytes);
  dout.Poison();
  SmallMFp8GemmParams p;
  p.M = c.M, p.N = c.N, p.K = c.K;
  p.x = dx.get(), p.x_row_stride = xs;
  p.w = dw.get(), p.w_row_stride = ws;
  p.scale_x = static_cast<const float*>(dsx.get());
  p.scale_w = static_cast<const float*>(dsw.get());
  if (c.bias) p.bias = dbias.get(), p.bias_dtype = c.bias_dtype;
  p.out = dout.get(), p.out_row_stride = os, p.out_dtype = c.out_dtype;
  p.splits = c.splits;
  p.l2_prefetch_bytes = c.l2_prefetch_bytes;
  p.ring_stages = c.ring_stages;
  p.wgmma_tile_rows = c.tile_rows;
  p.w_read_only = !c.w_from_quant;
  REQUIRE(SmallMFp8GemmUnsupported(p) == nullptr);
  cudaStream_t stream = nullptr;
  FXFUSE_CUDA_REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (c.w_from_quant) {  // w = fp8(w16 * 1): exact, w16 holds e4m3 values
    kernels::QuantFp8Params q;
    q.num_tokens = c.N, q.hidden_size = ws, q.dtype = DType::BF16;
    q.input = dw16.get(), q.output = dw.get();
    q.scale.scale = static_cast<float*>(done.get());
    REQUIRE(kernels::QuantFp8(q, stream).ok());
  }
  FXFUSE_CUDA_REQUIRE(c.wgmma ? LaunchSmallMFp8GemmWgmma(p, stream) : LaunchSmallMFp8Gemm(p, stream));
  FXFUSE_CUDA_REQUIRE(cudaStreamSynchronize(stream));
  FXFUSE_CUDA_REQUIRE(cudaStreamDestroy(stream));
  if (c.w_from_quant) REQUIRE(dw.Download<uint8_t>(w.size()) == w);
  const std::vector<uint8_t> got = dout.Download<uint8_t>(dout.bytes());
  const float scale = sx * sw;
  // The reference decodes each e4m3 byte once (a 256-entry table): the Llama shapes are billions
  // of products, and decoding per product kept the test past its device-run timeout.
  std::vector<double> decoded(256);
  for (int b = 0; b < 256; ++b) decoded[static_cast<size_t>(b)] = ref::E4m3BitsToFloat(static_cast<uint8_t>(b));
  int64_t failures = 0;
  double worst_accumulation = 0;  // F32 output: the largest |got - exact| / (sum of |products| x scale)
  std::ostringstream log;
  for (int64_t m = 0; m < c.M; ++m)
    for (int64_t n = 0; n < os; ++n) {
      const float g = readOut(got, m * os + n, c.out_dtype);
      if (n >= c.N) {  // padding: still the poison (NaN)
        if (!std::isnan(g) && failures++ < 8) log << "  padding (" << m << ", " << n << ") written\n";
        continue;
      }
      double acc = 0, mag = 0;
      const uint8_t* x_row = &x[static_cast<size_t>(m * xs)];
      const uint8_t* w_row = &w[static_cast<size_t>(n * ws)];
      for (int64_t k = 0; k < c.K; ++k) {
        const double prod = decoded[x_row[k]] * decoded[w_row[k]];
        acc += prod;
        mag += std::fabs(prod);
      }
      double v = static_cast<float>(static_cast<float>(acc) * scale);
      if (c.bias) v = static_cast<float>(v + bias[static_cast<size_t>(n)]);
      const double want = roundTo(v, c.out_dtype);
      if (c.out_dtype == DType::F32 && mag > 0)
        worst_accumulation = std::max(worst_accumulation, std::fabs(g - v) / (mag * scale));
      const bool wgmma_kernel = c.wgmma || c.M > kSmallMFp8MmaSyncMaxRows;
      const double accumulation = wgmma_kernel ? ref::Fp8GemmAccumulationFraction(c.K) : std::ldexp(1.0, -20);
      const double bound = 2 * stepOf(want, c.out_dtype) + mag * scale * accumulation;
      if (!(std::fabs(g - want) <= bound) && failures++ < 8)
        log << "  (" << m << ", " << n << "): got " << g << " want " << want << " bound " << bound << "\n";
    }
  INFO("M " << c.M << " N " << c.N << " K " << c.K << " out " << kernels::DTypeName(c.out_dtype) << " bias "
            << c.bias << (c.wgmma ? " wgmma" : "") << (c.w_from_quant ? " w quantized before it" : "") << " splits "
            << c.splits << " L2 prefetch " << c.l2_prefetch_bytes << " seed " << seed << ": " << failures
            << " failures\n"
            << log.str());
  CHECK(failures == 0);
  if (c.out_dtype == DType::F32)
    WARN("M " << c.M << " N " << c.N << " K " << c.K << (c.wgmma || c.M > kSmallMFp8MmaSyncMaxRows ? " wgmma" : "")
              << ": largest accumulation error 2^" << std::log2(std::max(worst_accumulation, 1e-30))
              << " of the sum of |products|");
}

TEST_CASE("small-M FP8 GEMM matches the reference at every token-tile count", "[gpu][gemm]") {
  // K = 1040: 9 steps of 128 bytes over 8 splits of 2, so the last splits have one step or none.
  for (int64_t M : {1, 2, 7, 8, 9, 15, 16}) runCase({M, 40, 1040});
}

TEST_CASE("small-M FP8 GEMM: K with a partial step, one step, and N not a multiple of 16", "[gpu][gemm]") {
  runCase({3, 33, 16});
  runCase({5, 16, 48});
  runCase({8, 1, 64});
  runCase({12, 100, 4112});
  runCase({2, 70, 384});  // 3 steps: two splits of 2 and 1
}

TEST_CASE("small-M FP8 GEMM: more blocks than fit the GPU at once", "[gpu][gemm]") {
  runCase({1, 57344, 256});  // 3584 tiles: several waves of blocks
  runCase({9, 57344, 256});
}

TEST_CASE("small-M FP8 GEMM: padded strides, bias and output dtypes", "[gpu][gemm]") {
  runCase({4, 50, 128, DType::BF16, true, DType::BF16, 16, 32, 3});
  runCase({9, 50, 128, DType::F16, true, DType::F16, 48, 16, 5});
  runCase({14, 50, 256, DType::F32, true, DType::F32, 0, 0, 1});
  runCase({1, 50, 256, DType::BF16, true, DType::F32});
}

TEST_CASE("small-M FP8 GEMM: Llama-3.1-8B decode shapes", "[gpu][gemm]") {
  runCase({1, 6144, 4096});   // qkv
  runCase({8, 4096, 4096});   // o_proj
  runCase({4, 1024, 14336});  // down (a slice of its 4096 rows)
  runCase({1, 28672, 4096});  // gate/up
}

// The wgmma kernel (M 17..64, and any M through LaunchSmallMFp8GemmWgmma).
TEST_CASE("small-M FP8 GEMM (wgmma) matches the reference at every token count class", "[gpu][gemm]") {
  // N = 200: a partial last tile of 64 rows; K = 1040: 9 steps of 128 bytes (a partial one),
  // sliced 4 ways at most (two steps per slice).
  for (int64_t M : {17, 24, 31, 32, 33, 40, 57, 63, 64}) runCase({M, 200, 1040});
  for (int64_t M : {1, 8, 16}) runCase({M, 200, 1040, DType::BF16, false, DType::BF16, 0, 0, 0, true});
}

TEST_CASE("small-M FP8 GEMM (wgmma): one step, clusters of 4, several waves", "[gpu][gemm]") {
  runCase({20, 33, 16});      // one partial K step, one partial tile
  runCase({48, 64, 128});     // one K step
  runCase({33, 128, 32768});  // 2 tiles x 4 slices of 64 steps
  runCase({20, 57344, 128});  // 896 tiles: several waves of CTAs
}

TEST_CASE("small-M FP8 GEMM (wgmma): padded strides, bias and output dtypes", "[gpu][gemm]") {
  runCase({40, 100, 256, DType::BF16, true, DType::BF16, 16, 32, 3});
  runCase({25, 100, 384, DType::F16, true, DType::F16, 48, 16, 5});
  runCase({64, 100, 512, DType::F32, true, DType::F32, 0, 0, 1});
  runCase({17, 100, 512, DType::BF16, true, DType::F32});
  runCase({64, 256, 4096, DType::F32});  // the accumulation error at a Llama K, both kernels
  runCase({16, 256, 4096, DType::F32});
}

TEST_CASE("small-M FP8 GEMM (wgmma): Llama-3.1-8B and 70B decode shapes", "[gpu][gemm]") {
  runCase({32, 6144, 4096});   // qkv, 8B
  runCase({64, 4096, 4096});   // o_proj, 8B
  runCase({64, 1024, 14336});  // down (a slice of its 4096 rows)
  runCase({32, 28672, 4096});  // gate/up
  runCase({64, 1280, 8192});   // 70B qkv (a slice)
}

// Tiles of 128 weight rows (two warpgroups sharing the token box): partial tiles of 128 with a
// full and a partial warpgroup or one warpgroup's rows only, every split, the Llama shapes, the
// output dtypes, padded strides and a weight written just before.
TEST_CASE("small-M FP8 GEMM (wgmma): 128-row tiles", "[gpu][gemm]") {
  auto wide = [](Case c) {
    c.tile_rows = kSmallMFp8WgmmaWideTileRows;
    return c;
  };
  for (int64_t M : {17, 32, 33, 64}) runCase(wide({M, 200, 1040}));  // 200 = 128 + 72
  runCase(wide({40, 50, 1040}));                                     // one partial warpgroup
  runCase(wide({20, 33, 16}));
  runCase(wide({33, 128, 32768}));  // one tile x 4 slices of 64 steps
  runCase(wide({20, 57344, 128}));  // 448 tiles: more than one wave
  for (int s : SmallMFp8GemmWgmmaSplitChoices(1040)) {
    Case c = wide({64, 200, 1040});
    c.splits = s;
    runCase(c);
  }
  runCase(wide({40, 100, 256, DType::BF16, true, DType::BF16, 16, 32, 3}));
  runCase(wide({25, 100, 384, DType::F16, true, DType::F16, 48, 16, 5}));
  runCase(wide({64, 256, 4096, DType::F32}));
  runCase(wide({16, 200, 1040, DType::BF16, false, DType::BF16, 0, 0, 0, true}));  // M <= 16 through the wgmma launcher
  runCase(wide({64, 6144, 4096}));   // 8B qkv
  runCase(wide({32, 4096, 4096}));   // o_proj
  runCase(wide({64, 1024, 14336}));  // down (a slice)
  runCase(wide({64, 28672, 4096}));  // gate/up
  Case quantized = wide({40, 4096, 4096});
  quantized.w_from_quant = true;
  runCase(quantized);
}

// A weight computed by the step before (a weight quantized in the graph) is read only after the
// wait for that step: both kernels, one wave and several, a padded row stride.
TEST_CASE("small-M FP8 GEMM: a weight written by the kernel before it", "[gpu][gemm]") {
  auto quantized = [](Case c) {
    c.w_from_quant = true;
    return c;
  };
  runCase(quantized({1, 6144, 4096}));
  runCase(quantized({8, 57344, 256}));
  runCase(quantized({3, 200, 1040, DType::BF16, false, DType::BF16, 0, 48}));
  runCase(quantized({40, 4096, 4096}));
  runCase(quantized({16, 200, 1040, DType::BF16, false, DType::BF16, 0, 0, 0, true}));
}

// The runtime times every K split of SmallMFp8GemmSplitChoices and runs the fastest, so each
// must be right, not only the rule's: both kernels, a partial tile, a K whose last slices are
// short or empty, and Llama K's (row slices of the weights, to keep the CPU reference short).
TEST_CASE("small-M FP8 GEMM: every K split the runtime may choose", "[gpu][gemm]") {
  const Case shapes[] = {{1, 200, 1040}, {16, 200, 1040}, {33, 200, 1040}, {64, 200, 1040},
                         {8, 1024, 4096}, {64, 2048, 4096}, {40, 512, 14336}};
  for (const Case& shape : shapes) {
    SmallMFp8GemmParams p;
    p.M = shape.M, p.N = shape.N, p.K = shape.K;
    const std::vector<int> choices = SmallMFp8GemmSplitChoices(p);
    REQUIRE(choices.size() >= 2);
    for (int s : choices) {
      Case c = shape;
      c.splits = s;
      runCase(c);
    }
  }
  for (int s : SmallMFp8GemmWgmmaSplitChoices(1040)) {  // the wgmma kernel at M <= 16
    Case c{16, 200, 1040};
    c.wgmma = true;
    c.splits = s;
    runCase(c);
  }
}

// The L2 prefetch size changes only how the weight copies fill L2, never what they copy: each
// size at a partial tile and a short last slice, and with the weight written just before.
TEST_CASE("small-M FP8 GEMM: every L2 prefetch size of the weight copies", "[gpu][gemm]") {
  for (const int bytes : {0, 64, 128, 256}) {
    for (Case c : {Case{1, 200, 1040}, Case{16, 200, 1040}, Case{8, 1024, 4096}}) {
      c.l2_prefetch_bytes = bytes;
      runCase(c);
      c.w_from_quant = true;
      runCase(c);
    }
  }
}

// The deep ring fills half its stages before the grid wait and half after: every split of a
// short and a long K (fewer steps per slice than stages, and many), partial tiles, the weight
// written just before (the stages after the wait must not read it early either), an N of the
// 8B o-projection's shape.
TEST_CASE("small-M FP8 GEMM: the deep ring", "[gpu][gemm]") {
  for (Case shape : {Case{1, 200, 1040}, Case{8, 72, 512}, Case{5, 4096, 4096}}) {
    SmallMFp8GemmParams p;
    p.M = shape.M, p.N = shape.N, p.K = shape.K;
    for (int s : SmallMFp8GemmSplitChoices(p)) {
      Case c = shape;
      c.splits = s;
      c.ring_stages = kSmallMFp8DeepRingStages;
      runCase(c);
      c.w_from_quant = true;
      runCase(c);
    }
  }
}

}  // namespace
}  // namespace fxfuse::runtime
