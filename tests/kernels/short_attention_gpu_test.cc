// The short attention (kernels/runtime/short_attention.cu) against the chain it replaces, on the
// same operands: the reference attention kernel, and with a rotary prologue the rotation step
// (LaunchReshapeAndCache into query_out) followed by the reference attention on the rotated
// rows, the fused operands derived by the runtime's own RotatedAttentionOf. The sums add in
// another order, so outputs may differ by an ulp, rarely; NaN must match NaN (an unwritten,
// poisoned output is NaN). Cases: the dense decoder layer's layouts at T = 2 .. 64 (q and k a
// column range of the qkv rows, V another), causal and not, more keys than queries and more
// queries than keys, grouped heads, head sizes 2 / 64 / 80 / 96 / 128, both 16-bit dtypes, FP8 output, GPT-J and
// partial rotary, positions off the table, and scores that are not finite (NaN rows).
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <vector>

#include "compiler/runtime/attention_prologue.h"
#include "kernels/reference/numerics.h"
#include "kernels/runtime/attention.h"
#include "kernels/runtime/paged_attention.h"
#include "tests/kernels/gpu_test_util.h"

namespace fxfuse::runtime {
namespace {

using kernels::testing::DeviceBuffer;
using kernels::testing::NextSeed;
using kernels::testing::Tolerance;
namespace ref = kernels::reference;

struct Case {
  DType dtype = DType::BF16, out_dtype = DType::BF16;
  int64_t B = 1, Hq = 32, Hk = 8, Sq = 8, Sk = 8, E = 128;
  bool causal = true;
  bool rotary = false, neox = true;
  int64_t rotary_dim = 128;
  bool poison_scores = false;  // q of head 1, token 0 holds +inf, of head 2 a NaN
  bool off_table = false;      // token 1's position is past the table (left unrotated)
};

// Two ulps, or 2^-12 absolute (an output near zero is a sum that cancels: its ulps are tiny and
// the order of the sums moves it by more of them), on at most 2 % of the elements: the order of
// the fp32 sums differs from the reference's. A wrong scale, mask or rotation moves most
// elements by far more (the V values are N(0, 1)).
const Tolerance kTolerance{2, 0.02};
constexpr double kAbsolute = 1.0 / 4096;

// One [tokens, width] row-major buffer of random 16-bit values.
std::vector<uint16_t> randomRows(int64_t n, DType dt, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = ref::FloatToD16Bits(normal(rng), dt);
  return v;
}

void expectClose(const Case& c, const DeviceBuffer& got, const DeviceBuffer& want, int64_t rows, int64_t cols) {
  const size_t n = static_cast<size_t>(rows * cols);
  if (c.out_dtype == DType::F8E4M3FN) {
    kernels::testing::ExpectFp8Close("short attention (fp8)", got.Download<uint8_t>(n), want.Download<uint8_t>(n), rows,
                                     cols, cols, kTolerance);
    return;
  }
  const auto g = got.Download<uint16_t>(n), w = want.Download<uint16_t>(n);
  int64_t failures = 0, mismatches = 0;
  std::ostringstream log;
  for (size_t i = 0; i < n; ++i) {
    const float fg = ref::D16BitsToFloat(g[i], c.out_dtype), fw = ref::D16BitsToFloat(w[i], c.out_dtype);
    if (g[i] == w[i] || (std::isnan(fg) && std::isnan(fw))) continue;
    ++mismatches;
    const bool close = !std::isnan(fg) && !std::isnan(fw) &&
                       (ref::D16UlpDistance(g[i], w[i]) <= kTolerance.max_distance || std::fabs(fg - fw) <= kAbsolute);
    if (!close && failures++ < 8) log << "  [" << i << "] got " << fg << " want " << fw << "\n";
  }
  INFO("short attention: " << failures << " failures, " << mismatches << " mismatches of " << n << "\n" << log.str());
  CHECK(failures == 0);
  CHECK(static_cast<double>(mismatches) <= kTolerance.max_mismatch_fraction * static_cast<double>(n));
}

// q, k, v as a dense layer lays them out: per batch, Sk tokens of one qkv row [q | k | v | pad]
// (q of the first Sq tokens); out [B, Sq, Hq, E] token-major, as the layer's o-projection reads it.
void runCase(const Case& c) {
  const uint64_t seed = NextSeed();
  INFO("B " << c.B << " Hq " << c.Hq << " Hk " << c.Hk << " Sq " << c.Sq << " Sk " << c.Sk << " E " << c.E << " causal "
            << c.causal << " rotary " << c.rotary << " seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t row = (c.Hq + 2 * c.Hk) * c.E + 8, tokens = std::max(c.Sq, c.Sk);
  std::vector<uint16_t> qkv = randomRows(c.B * tokens * row, c.dtype, rng);
  if (c.poison_scores) {
    qkv[static_cast<size_t>(1 * c.E + 3)] = ref::FloatToD16Bits(INFINITY, c.dtype);
    qkv[static_cast<size_t>(2 * c.E + 7)] = ref::FloatToD16Bits(NAN, c.dtype);
  }
  const int64_t table_rows = 4096;
  std::vector<uint16_t> table = randomRows(table_rows * c.rotary_dim, c.dtype, rng);
  std::vector<int64_t> positions(static_cast<size_t>(tokens));
  for (auto& p : positions) p = static_cast<int64_t>(rng() % table_rows);
  if (c.off_table && tokens > 1) positions[1] = table_rows + 5;
  DeviceBuffer dqkv(qkv.size() * 2), dtable(table.size() * 2), dpos(positions.size() * 8), dscale(4);
  dqkv.Upload(qkv), dtable.Upload(table), dpos.Upload(positions), dscale.Upload(std::vector<float>{0.37f});
  const int64_t out_elems = c.B * c.Sq * c.Hq * c.E;
  const size_t out_bytes = static_cast<size_t>(out_elems) * (c.out_dtype == DType::F8E4M3FN ? 1 : 2);
  DeviceBuffer got(out_bytes), want(out_bytes), rotated(static_cast<size_t>(tokens * (c.Hq + c.Hk) * c.E * 2));
  got.Poison(), want.Poison(), rotated.Poison();

  AttentionParams p;
  p.dtype = c.dtype, p.out_dtype = c.out_dtype, p.round_dtype = c.dtype;
  p.B = c.B, p.Hq = c.Hq, p.Hk = c.Hk, p.Sq = c.Sq, p.Sk = c.Sk, p.E = p.Ev = c.E;
  p.causal = c.causal;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.E));
  const auto* base = static_cast<const uint16_t*>(dqkv.get());
  p.q = base, p.k = base + c.Hq * c.E, p.v = base + (c.Hq + c.Hk) * c.E;
  for (auto* s : {&p.q_stride, &p.k_stride, &p.v_stride})
    (*s)[0] = tokens * row, (*s)[1] = c.E, (*s)[2] = row, (*s)[3] = 1;
  p.o_stride[0] = c.Sq * c.Hq * c.E, p.o_stride[1] = c.E, p.o_stride[2] = c.Hq * c.E, p.o_stride[3] = 1;
  p.out_scale = static_cast<const float*>(dscale.get());
  AttentionParams r = p;  // the reference's
  r.out = want.get();
  p.out = got.get();
  if (!c.rotary) {
    REQUIRE(ShortAttentionUnsupported(p, nullptr) == nullptr);
    FXFUSE_CUDA_REQUIRE(LaunchShortAttention(p, nullptr, nullptr));
  } else {
    ReshapeAndCacheParams rot;  // the dense plan's rotary step: q and k heads into `rotated`
    rot.dtype = rot.cache_dtype = c.dtype;
    rot.num_tokens = tokens, rot.head_size = c.E, rot.block_size = 1;
    rot.query = dqkv.get(), rot.query_stride[0] = row, rot.query_stride[1] = c.E;
    rot.query_out = rotated.get(), rot.query_out_stride[0] = (c.Hq + c.Hk) * c.E, rot.query_out_stride[1] = c.E;
    rot.heads_q = c.Hq + c.Hk;
    rot.positions = static_cast<const int64_t*>(dpos.get());
    rot.cos_sin_cache = dtable.get(), rot.cos_sin_dtype = c.dtype;
    rot.cos_sin_rows = table_rows, rot.cos_sin_stride = c.rotary_dim, rot.rotary_dim = c.rotary_dim;
    rot.neox = c.neox;
    FXFUSE_CUDA_REQUIRE(LaunchReshapeAndCache(rot, nullptr));
    const auto* rows = static_cast<const uint16_t*>(rotated.get());
    r.q = rows, r.k = rows + c.Hq * c.E;
    r.q_stride[2] = r.k_stride[2] = rot.query_out_stride[0];
    auto fused = RotatedAttentionOf(rot, r);  // what the session launches instead
    REQUIRE(fused.has_value());
    fused->first.out = got.get();
    FXFUSE_CUDA_REQUIRE(LaunchShortAttention(fused->first, &fused->second, nullptr));
  }
  FXFUSE_CUDA_REQUIRE(LaunchAttention(r, nullptr));
  FXFUSE_CUDA_REQUIRE(cudaDeviceSynchronize());
  expectClose(c, got, want, c.B * c.Sq * c.Hq, c.E);
  if (c.poison_scores) {  // the poisoned heads' rows are NaN (checked against the reference above)
    const auto g = want.Download<uint16_t>(static_cast<size_t>(out_elems));
    if (c.out_dtype != DType::F8E4M3FN) CHECK(std::isnan(ref::D16BitsToFloat(g[static_cast<size_t>(c.E)], c.dtype)));
  }
}

TEST_CASE("short attention: a dense decoder layer's tokens", "[gpu][attention]") {
  for (int64_t T : {2, 8, 16}) {
    Case c;
    c.Sq = c.Sk = T;
    runCase(c);
    c.rotary = true;
    runCase(c);
    c.out_dtype = DType::F8E4M3FN;  // the attention + FP8 output quant fusion
    runCase(c);
  }
}

TEST_CASE("short attention: batches, key counts, head sizes, dtypes, masks", "[gpu][attention]") {
  runCase({DType::F16, DType::F16, 2, 8, 2, 5, 13, 80, false});
  runCase({DType::BF16, DType::BF16, 3, 4, 4, 16, 16, 64, true});
  runCase({DType::BF16, DType::BF16, 1, 8, 2, 20, 7, 128, false});  // more queries than keys
  runCase({DType::F16, DType::F16, 1, 8, 2, 20, 7, 96, true});
  runCase({DType::F16, DType::F8E4M3FN, 1, 6, 3, 3, 1, 128, true});
  runCase({DType::BF16, DType::BF16, 1, 1, 1, 1, 1, 2, false});
  runCase({DType::BF16, DType::BF16, 2, 16, 1, 9, 9, 128, false});
}

TEST_CASE("short attention: rotary forms", "[gpu][attention]") {
  Case gptj;
  gptj.rotary = true, gptj.neox = false, gptj.Sq = gptj.Sk = 12;
  runCase(gptj);
  gptj.rotary_dim = 38;  // partial, an odd number of pairs
  runCase(gptj);
  Case partial;
  partial.rotary = true, partial.rotary_dim = 64, partial.Sq = partial.Sk = 14,
  partial.dtype = partial.out_dtype = DType::F16;
  runCase(partial);
  Case off;
  off.rotary = true, off.off_table = true, off.Sq = off.Sk = 5, off.E = 64, off.rotary_dim = 64, off.Hq = 8, off.Hk = 8;
  runCase(off);
}

TEST_CASE("short attention: scores that are not finite give NaN rows", "[gpu][attention]") {
  Case c;
  c.poison_scores = true;
  runCase(c);
  c.rotary = true;
  runCase(c);
}

}  // namespace
}  // namespace fxfuse::runtime
