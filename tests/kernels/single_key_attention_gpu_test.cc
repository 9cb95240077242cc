// Attention over a single key (kernels/runtime/single_key_attention.cu) against the reference
// attention kernel on the same operands: byte for byte (NaN for NaN), in the layouts a dense
// decoder layer's first token has (K a rotated copy, V a column range of the qkv rows), with
// grouped heads, several query tokens (causal and not), a head size that is not a multiple of
// 32, both 16-bit dtypes, FP8 output, and scores that are not finite (+inf, NaN: NaN rows).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/reference/numerics.h"
#include "kernels/runtime/attention.h"
#include "tests/kernels/gpu_test_util.h"

namespace fxfuse::runtime {
namespace {

using kernels::testing::DeviceBuffer;
using kernels::testing::NextSeed;
namespace ref = kernels::reference;

struct Case {
  DType dtype = DType::BF16, out_dtype = DType::BF16;
  int64_t B = 1, Hq = 32, Hk = 8, Sq = 1, E = 128;
  bool causal = true;
  int64_t q_row = 0, k_row = 0, v_row = 0;  // elements between query tokens / key rows (0: dense)
  bool poison_scores = false;               // q of head 1 holds +inf, of head 2 a NaN
};

// [B, H, S, E] strides over rows of `row` elements per token (heads side by side in a row).
void rowStrides(int64_t (&s)[4], int64_t H, int64_t S, int64_t E, int64_t row) {
  const int64_t r = row ? row : H * E;
  s[0] = S * r, s[1] = E, s[2] = r, s[3] = 1;
}

bool sameOutput(uint16_t a, uint16_t b, DType t) {
  const float fa = ref::D16BitsToFloat(a, t), fb = ref::D16BitsToFloat(b, t);
  return a == b || (std::isnan(fa) && std::isnan(fb));
}

void runCase(const Case& c) {
  const uint64_t seed = NextSeed();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  AttentionParams p;
  p.dtype = c.dtype, p.out_dtype = c.out_dtype, p.round_dtype = c.dtype;
  p.B = c.B, p.Hq = c.Hq, p.Hk = c.Hk, p.Sq = c.Sq, p.Sk = 1, p.E = p.Ev = c.E;
  p.causal = c.causal;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.E));
  rowStrides(p.q_stride, c.Hq, c.Sq, c.E, c.q_row);
  rowStrides(p.k_stride, c.Hk, 1, c.E, c.k_row);
  rowStrides(p.v_stride, c.Hk, 1, c.E, c.v_row);
  rowStrides(p.o_stride, c.Hq, c.Sq, c.E, 0);
  auto random16 = [&](int64_t n) {
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = ref::FloatToD16Bits(normal(rng), c.dtype);
    return v;
  };
  std::vector<uint16_t> q = random16(c.B * p.q_stride[0]), k = random16(c.B * p.k_stride[0]),
                        v = random16(c.B * p.v_stride[0]);
  if (c.poison_scores) {
    q[static_cast<size_t>(1 * p.q_stride[1] + 3)] = ref::FloatToD16Bits(INFINITY, c.dtype);
    q[static_cast<size_t>(2 * p.q_stride[1] + 7)] = ref::FloatToD16Bits(NAN, c.dtype);
  }
  DeviceBuffer dq(q.size() * 2), dk(k.size() * 2), dv(v.size() * 2), dscale(4);
  const int64_t outs = c.B * p.o_stride[0];
  const size_t out_bytes = static_cast<size_t>(outs) * (c.out_dtype == DType::F8E4M3FN ? 1 : 2);
  DeviceBuffer got(out_bytes), want(out_bytes);
  dq.Upload(q), dk.Upload(k), dv.Upload(v), dscale.Upload(std::vector<float>{0.37f});
  got.Poison(), want.Poison();
  p.q = dq.get(), p.k = dk.get(), p.v = dv.get();
  p.out_scale = static_cast<const float*>(dscale.get());
  p.out = got.get();
  REQUIRE(SingleKeyAttentionUnsupported(p) == nullptr);
  AttentionParams r = p;
  r.out = want.get();
  FXFUSE_CUDA_REQUIRE(LaunchSingleKeyAttention(p, nullptr));
  FXFUSE_CUDA_REQUIRE(LaunchAttention(r, nullptr));
  FXFUSE_CUDA_REQUIRE(cudaDeviceSynchronize());
  int failures = 0, nans = 0;
  if (c.out_dtype == DType::F8E4M3FN) {
    const auto g = got.Download<uint8_t>(out_bytes), w = want.Download<uint8_t>(out_bytes);
    for (size_t i = 0; i < g.size(); ++i) {
      failures += g[i] != w[i] && !(ref::IsE4m3NaN(g[i]) && ref::IsE4m3NaN(w[i]));
      nans += ref::IsE4m3NaN(g[i]);
    }
  } else {
    const auto g = got.Download<uint16_t>(static_cast<size_t>(outs)), w = want.Download<uint16_t>(static_cast<size_t>(outs));
    for (size_t i = 0; i < g.size(); ++i) {
      failures += !sameOutput(g[i], w[i], c.out_dtype);
      nans += std::isnan(ref::D16BitsToFloat(g[i], c.out_dtype));
    }
  }
  INFO("B " << c.B << " Hq " << c.Hq << " Hk " << c.Hk << " Sq " << c.Sq << " E " << c.E << " seed " << seed);
  CHECK(failures == 0);
  // Each poisoned head's rows (Sq query tokens of batch 0, E elements each) are NaN, no others.
  CHECK(nans == (c.poison_scores ? 2 * c.E : 0));
}

TEST_CASE("single-key attention: a dense layer's first token", "[gpu][attention]") {
  Case layer;  // q a column range of the rotation step's [T, 5120] rows, K too, V of qkv's [T, 6144]
  layer.q_row = 5120, layer.k_row = 5120, layer.v_row = 6144;
  runCase(layer);
  layer.out_dtype = DType::F8E4M3FN;  // the attention + FP8 output quant fusion
  runCase(layer);
}

TEST_CASE("single-key attention: batches, query tokens, head sizes, dtypes", "[gpu][attention]") {
  runCase({DType::F16, DType::F16, 3, 8, 2, 3, 80, true});
  runCase({DType::BF16, DType::BF16, 2, 4, 4, 5, 64, false});
  runCase({DType::F16, DType::F8E4M3FN, 2, 6, 3, 1, 256, true});
  runCase({DType::BF16, DType::BF16, 1, 1, 1, 1, 1, true});
}

TEST_CASE("single-key attention: scores that are not finite give NaN rows", "[gpu][attention]") {
  Case c;
  c.poison_scores = true;
  runCase(c);
  c.out_dtype = DType::F8E4M3FN;
  runCase(c);
}

}  // namespace
}  // namespace fxfuse::runtime
