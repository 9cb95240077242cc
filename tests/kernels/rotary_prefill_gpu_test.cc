// The prefill attention's rotary prologue (kernels/attention/prefill_sm90.cu) against the chain
// it replaces, on the same operands: the dense plan's rotation step (LaunchReshapeAndCache into
// query_out) and then the prefill kernel on the rotated rows (Sm90Attention's route for more
// than 16 tokens), against the fused launch the session makes (RotatedAttentionOf, then
// Sm90RotatedAttention). The kernel rotates its tiles in shared memory with the rotation step's
// rounding before the same products, so the outputs must match bit for bit (NaN for NaN).
// Cases: a dense decoder layer's layout (q and k column ranges of the qkv rows, V another) at
// 17 to 128 tokens, causal and not, grouped heads, head sizes 64 and 128, both 16-bit dtypes, an
// fp32 table, FP8 output, positions off the table; and the forms it leaves to the rotation step.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "compiler/runtime/attention_prologue.h"
#include "compiler/runtime/sm90_attention.h"
#include "kernels/attention/attention.h"
#include "kernels/reference/numerics.h"
#include "kernels/runtime/attention.h"
#include "kernels/runtime/paged_attention.h"
#include "tests/kernels/gpu_test_util.h"

namespace fxfuse::runtime {
namespace {

using kernels::testing::DeviceBuffer;
using kernels::testing::NextSeed;
namespace ref = kernels::reference;

struct Case {
  DType dtype = DType::BF16, out_dtype = DType::BF16, table_dtype = DType::BF16;
  int64_t Hq = 32, Hk = 8, T = 64, E = 128;
  bool causal = true;
  bool off_table = false;  // token 1's position is past the table (left unrotated)
};

std::vector<uint16_t> randomRows(int64_t n, DType dt, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = ref::FloatToD16Bits(normal(rng), dt);
  return v;
}

// The layer's buffers for one case: qkv rows [T, (Hq + 2 Hk) E + 8], a cos | sin table, positions,
// the rotation step's rows [T, (Hq + Hk) E], and the attention over the rotated rows.
struct Layer {
  Case c;
  int64_t row = 0, table_rows = 4096;
  DeviceBuffer qkv, table, positions, scale, rotated;
  ReshapeAndCacheParams rotation;
  AttentionParams attention;  // of the rotated rows, output unset

  explicit Layer(const Case& k, std::mt19937_64& rng)
      : c(k),
        row((k.Hq + 2 * k.Hk) * k.E + 8),
        qkv(static_cast<size_t>(k.T * row * 2)),
        table(static_cast<size_t>(table_rows * k.E * (k.table_dtype == DType::F32 ? 4 : 2))),
        positions(static_cast<size_t>(k.T * 8)),
        scale(4),
        rotated(static_cast<size_t>(k.T * (k.Hq + k.Hk) * k.E * 2)) {
    qkv.Upload(randomRows(c.T * row, c.dtype, rng));
    if (c.table_dtype == DType::F32) {
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> t(static_cast<size_t>(table_rows * c.E));
      for (auto& x : t) x = normal(rng);
      table.Upload(t);
    } else {
      table.Upload(randomRows(table_rows * c.E, c.table_dtype, rng));
    }
    std::vector<int64_t> pos(static_cast<size_t>(c.T));
    for (auto& p : pos) p = static_cast<int64_t>(rng() % table_rows);
    if (c.off_table) pos[1] = table_rows + 5;
    positions.Upload(pos);
    scale.Upload(std::vector<float>{0.37f});
    rotated.Poison();
    ReshapeAndCacheParams& r = rotation;
    r.dtype = r.cache_dtype = c.dtype;
    r.num_tokens = c.T, r.head_size = c.E, r.block_size = 1;
    r.query = qkv.get(), r.query_stride[0] = row, r.query_stride[1] = c.E;
    r.query_out = rotated.get(), r.query_out_stride[0] = (c.Hq + c.Hk) * c.E, r.query_out_stride[1] = c.E;
    r.heads_q = c.Hq + c.Hk;
    r.positions = static_cast<const int64_t*>(positions.get());
    r.cos_sin_cache = table.get(), r.cos_sin_dtype = c.table_dtype;
    r.cos_sin_rows = table_rows, r.cos_sin_stride = c.E, r.rotary_dim = c.E, r.neox = true;
    AttentionParams& a = attention;
    a.dtype = c.dtype, a.out_dtype = c.out_dtype, a.round_dtype = c.dtype;
    a.B = 1, a.Hq = c.Hq, a.Hk = c.Hk, a.Sq = a.Sk = c.T, a.E = a.Ev = c.E;
    a.causal = c.causal;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.E));
    const auto* rows = static_cast<const uint16_t*>(rotated.get());
    a.q = rows, a.k = rows + c.Hq * c.E;
    a.v = static_cast<const uint16_t*>(qkv.get()) + (c.Hq + c.Hk) * c.E;
    for (auto* s : {&a.q_stride, &a.k_stride})
      (*s)[0] = c.T * r.query_out_stride[0], (*s)[1] = c.E, (*s)[2] = r.query_out_stride[0], (*s)[3] = 1;
    a.v_stride[0] = c.T * row, a.v_stride[1] = c.E, a.v_stride[2] = row, a.v_stride[3] = 1;
    a.o_stride[0] = c.T * c.Hq * c.E, a.o_stride[1] = c.E, a.o_stride[2] = c.Hq * c.E, a.o_stride[3] = 1;
    a.out_scale = static_cast<const float*>(scale.get());
  }
  size_t outBytes() const { return static_cast<size_t>(c.T * c.Hq * c.E * (c.out_dtype == DType::F8E4M3FN ? 1 : 2)); }
};

void runCase(const Case& c) {
  const uint64_t seed = NextSeed();
  INFO("Hq " << c.Hq << " Hk " << c.Hk << " T " << c.T << " E " << c.E << " causal " << c.causal << " dtype "
             << static_cast<int>(c.dtype) << " out " << static_cast<int>(c.out_dtype) << " table "
             << static_cast<int>(c.table_dtype) << " seed " << seed);
  std::mt19937_64 rng(seed);
  Layer l(c, rng);
  DeviceBuffer got(l.outBytes()), want(l.outBytes());
  got.Poison(), want.Poison();
  // The chain: the rotation step, then the prefill kernel on its rows.
  std::vector<std::function<void()>> cleanup;
  AttentionParams chain = l.attention;
  chain.out = want.get();
  const auto plain = Sm90Attention(chain, &cleanup);
  REQUIRE(plain);
  FXFUSE_CUDA_REQUIRE(LaunchReshapeAndCache(l.rotation, nullptr));
  FXFUSE_CUDA_REQUIRE(plain(nullptr));
  // What the session launches instead.
  auto fused = RotatedAttentionOf(l.rotation, l.attention);
  REQUIRE(fused.has_value());
  fused->first.out = got.get();
  const auto launch = Sm90RotatedAttention(fused->first, fused->second);
  REQUIRE(launch);
  FXFUSE_CUDA_REQUIRE(launch(nullptr));
  FXFUSE_CUDA_REQUIRE(cudaDeviceSynchronize());
  for (auto& f : cleanup) f();
  const auto g = got.Download<uint8_t>(l.outBytes()), w = want.Download<uint8_t>(l.outBytes());
  size_t differ = 0, first = g.size();
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] != w[i] && (differ++ == 0)) first = i;
  INFO(differ << " bytes differ of " << g.size() << ", the first at " << first);
  CHECK(differ == 0);
  // Not a vacuous match: the output was written (the poison is NaN) and the rotation mattered.
  const size_t elem = c.out_dtype == DType::F8E4M3FN ? 1 : 2;
  uint16_t first_value = 0;
  std::memcpy(&first_value, w.data(), elem);
  CHECK(first_value != (elem == 1 ? 0xFFu : 0xFFFFu));
}

TEST_CASE("rotary prefill: a dense decoder layer's tokens", "[gpu][attention]") {
  for (int64_t T : {17, 64, 100, 128}) {
    Case c;
    c.T = T;
    runCase(c);
    c.out_dtype = DType::F8E4M3FN;  // the attention + FP8 output quant fusion
    runCase(c);
    c.out_dtype = DType::BF16, c.causal = false;
    runCase(c);
  }
}

TEST_CASE("rotary prefill: head sizes, dtypes, groups, tables", "[gpu][attention]") {
  runCase({DType::F16, DType::F16, DType::F16, 8, 2, 40, 64, true, false});
  runCase({DType::BF16, DType::BF16, DType::F32, 16, 16, 33, 128, true, false});
  runCase({DType::BF16, DType::BF16, DType::BF16, 8, 1, 96, 64, false, true});  // position off the table
  runCase({DType::F16, DType::F8E4M3FN, DType::F32, 32, 8, 128, 128, true, false});
}

TEST_CASE("rotary prefill: what it leaves to the rotation step", "[gpu][attention]") {
  std::mt19937_64 rng(NextSeed());
  Case c;
  c.T = fxfuse::attention::kRotaryPrefillMaxTokens + 1;
  Layer many(c, rng);
  auto fused = RotatedAttentionOf(many.rotation, many.attention);
  REQUIRE(fused.has_value());
  CHECK_FALSE(Sm90RotatedAttention(fused->first, fused->second));  // more tokens than one query tile
  c.T = 64;
  Layer l(c, rng);
  DeviceBuffer out(l.outBytes());
  AttentionParams a = l.attention;
  a.out = out.get();
  fused = RotatedAttentionOf(l.rotation, a);
  REQUIRE(fused.has_value());
  CHECK(Sm90RotatedAttention(fused->first, fused->second));
  AttentionRotary partial = fused->second;
  partial.rotary_dim = 64;
  CHECK_FALSE(Sm90RotatedAttention(fused->first, partial));
  AttentionRotary gptj = fused->second;
  gptj.neox = false;
  CHECK_FALSE(Sm90RotatedAttention(fused->first, gptj));
}

}  // namespace
}  // namespace fxfuse::runtime
