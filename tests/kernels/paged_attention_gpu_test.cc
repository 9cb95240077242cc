// GPU tests of the paged KV-cache kernels (kernels/runtime/paged_attention.h) against a float64
// CPU reference of fxfuse.paged_attention (docs/canonical-ops.md): the cache write must be bit
// exact (16-bit copy, or vLLM's fp8(satfinite(x / scale))), the attention within one rounding
// step of the output dtype of the exact result (fp32 online softmax against f64), padding
// rows exactly 0, in one pass and split-KV (merged chunks). Cases: decode-only, prefill-only,
// chunked prefill mixed with decode, padding tokens (slot -1), an empty sequence, GQA and MHA,
// block-boundary contexts, FP8 cache, FP8 output, fp16, head sizes 16/32/33/64/96/128/256 (rows
// of 32 to 512 bytes through the cp.async ring, 1 to 16 rows per pass of a warp, and the direct
// loads of rows that are not whole 16-byte pieces), block sizes 1/16/32, q far outside and
// below f16's range over an FP8 cache, 1 to 8 query heads per KV head, contexts up to 1000.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <vector>

#include "kernels/reference/numerics.h"
#include "kernels/runtime/dense_paged_view.h"
#include "kernels/runtime/paged_attention.h"
#include "tests/kernels/gpu_test_util.h"

namespace fxfuse::runtime {
namespace {

using kernels::testing::DeviceBuffer;
using kernels::testing::NextSeed;
namespace ref = kernels::reference;

struct Case {
  const char* name;
  DType dtype = DType::BF16;
  bool fp8_cache = false, fp8_out = false;
  int64_t heads_q = 8, heads_kv = 2, head_size = 128, block_size = 16;
  std::vector<int64_t> query_lens, context_lens;
  int64_t padding_tokens = 0;  // tokens after qsl[B], slot -1
  int64_t spare_blocks = 3;
  float k_scale = 0.02f, v_scale = 0.03f, out_scale = 0.01f;
  float q_stddev = 1.0f;  // q normal with this standard deviation
};

// The batch as the kernels see it, and the host copies the reference works on.
struct Batch {
  int64_t tokens = 0, num_blocks = 0, max_blocks = 0;
  std::vector<int32_t> qsl, seq_lens, block_table;
  std::vector<int64_t> slots;
};

void checkAttention(const Case& c, const std::vector<double>& ref, DeviceBuffer& dout, size_t q_n, const char* variant);

Batch makeBatch(const Case& c, std::mt19937_64& rng) {
  Batch b;
  const int64_t B = static_cast<int64_t>(c.query_lens.size());
  b.qsl.push_back(0);
  int64_t used = 0;
  for (int64_t s = 0; s < B; ++s) {
    b.qsl.push_back(b.qsl.back() + static_cast<int32_t>(c.query_lens[s]));
    b.seq_lens.push_back(static_cast<int32_t>(c.context_lens[s]));
    const int64_t n = (c.context_lens[s] + c.block_size - 1) / c.block_size;
    b.max_blocks = std::max(b.max_blocks, n);
    used += n;
  }
  b.max_blocks = std::max<int64_t>(b.max_blocks, 1) + 1;  // an unused column: never read
  b.tokens = b.qsl.back() + c.padding_tokens;
  b.num_blocks = used + c.spare_blocks;
  std::vector<int32_t> ids(static_cast<size_t>(b.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  b.block_table.assign(static_cast<size_t>(B * b.max_blocks), -7);  // garbage past each sequence's blocks
  size_t next = 0;
  for (int64_t s = 0; s < B; ++s)
    for (int64_t j = 0; j * c.block_size < c.context_lens[s]; ++j) b.block_table[s * b.max_blocks + j] = ids[next++];
  b.slots.assign(static_cast<size_t>(b.tokens), -1);
  for (int64_t s = 0; s < B; ++s)
    for (int64_t i = 0; i < c.query_lens[s]; ++i) {
      const int64_t pos = c.context_lens[s] - c.query_lens[s] + i;
      b.slots[b.qsl[s] + i] = b.block_table[s * b.max_blocks + pos / c.block_size] * c.block_size + pos % c.block_size;
    }
  return b;
}

float toFloat(uint16_t bits, DType dt) { return ref::D16BitsToFloat(bits, dt); }

// Cache element as the reference reads it: f32(fp8) * scale rounded to f32, or the 16-bit value.
double cacheValue(const Case& c, const std::vector<uint16_t>& c16, const std::vector<uint8_t>& c8, int64_t i, float scale) {
  if (c.fp8_cache) return static_cast<double>(ref::E4m3BitsToFloat(c8[static_cast<size_t>(i)]) * scale);
  return toFloat(c16[static_cast<size_t>(i)], c.dtype);
}

// The reference cache write (step (a)) on the host copies.
void writeReference(const Case& c, const Batch& b, const std::vector<uint16_t>& src, std::vector<uint16_t>& c16,
                    std::vector<uint8_t>& c8, float scale) {
  const int64_t row = c.heads_kv * c.head_size;
  for (int64_t t = 0; t < b.tokens; ++t) {
    if (b.slots[t] < 0) continue;
    for (int64_t i = 0; i < row; ++i) {
      const size_t dst = static_cast<size_t>(b.slots[t] * row + i), from = static_cast<size_t>(t * row + i);
      if (c.fp8_cache) c8[dst] = ref::QuantizeToE4m3(toFloat(src[from], c.dtype), scale, /*divide=*/true);
      else c16[dst] = src[from];
    }
  }
}

// Step (b) in float64: [T, Hq, E] exact attention values (NaN marks padding rows: expected 0).
std::vector<double> attendReference(const Case& c, const Batch& b, const std::vector<uint16_t>& q,
                                    const std::vector<uint16_t>& k16, const std::vector<uint8_t>& k8,
                                    const std::vector<uint16_t>& v16, const std::vector<uint8_t>& v8, float scale) {
  const int64_t Hq = c.heads_q, Hk = c.heads_kv, E = c.head_size;
  std::vector<double> out(static_cast<size_t>(b.tokens * Hq * E), std::nan(""));
  for (size_t s = 0; s + 1 < b.qsl.size(); ++s) {
    const int64_t ql = b.qsl[s + 1] - b.qsl[s], ctx = b.seq_lens[s];
    for (int64_t i = 0; i < ql; ++i) {
      const int64_t t = b.qsl[s] + i, pos = ctx - ql + i;
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t hk = h / (Hq / Hk);
        std::vector<double> sc(static_cast<size_t>(pos + 1));
        double mx = -INFINITY;
        auto at = [&](int64_t j, int64_t e) {
          const int64_t blk = b.block_table[static_cast<int64_t>(s) * b.max_blocks + j / c.block_size];
          return ((blk * c.block_size + j % c.block_size) * Hk + hk) * E + e;
        };
        for (int64_t j = 0; j <= pos; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < E; ++e)
            dot += static_cast<double>(toFloat(q[static_cast<size_t>((t * Hq + h) * E + e)], c.dtype)) *
                   cacheValue(c, k16, k8, at(j, e), c.k_scale);
          sc[static_cast<size_t>(j)] = dot * scale;
          mx = std::max(mx, sc[static_cast<size_t>(j)]);
        }
        double l = 0;
        for (double& x : sc) l += (x = std::exp(x - mx));
        for (int64_t e = 0; e < E; ++e) {
          double o = 0;
          for (int64_t j = 0; j <= pos; ++j) o += sc[static_cast<size_t>(j)] * cacheValue(c, v16, v8, at(j, e), c.v_scale);
          out[static_cast<size_t>((t * Hq + h) * E + e)] = o / l;
        }
      }
    }
  }
  return out;
}

std::vector<uint8_t> randomFp8(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v(n);
  for (auto& x : v) {
    do x = static_cast<uint8_t>(rng()); while (ref::IsE4m3NaN(x));
  }
  return v;
}

void runCase(const Case& c) {
  const uint64_t seed = NextSeed();
  INFO("case " << c.name << ", seed " << seed);
  std::mt19937_64 rng(seed);
  const Batch b = makeBatch(c, rng);
  const int64_t T = b.tokens, Hq = c.heads_q, Hk = c.heads_kv, E = c.head_size;
  const size_t q_n = static_cast<size_t>(T * Hq * E), kv_n = static_cast<size_t>(T * Hk * E);
  const size_t cache_n = static_cast<size_t>(b.num_blocks * c.block_size * Hk * E);
  std::vector<uint16_t> q = kernels::testing::RandomD16(q_n, c.dtype, c.q_stddev, rng);
  std::vector<uint16_t> k = kernels::testing::RandomD16(kv_n, c.dtype, 3.0f, rng);  // some FP8 writes saturate
  std::vector<uint16_t> v = kernels::testing::RandomD16(kv_n, c.dtype, 1.0f, rng);
  std::vector<uint16_t> k16 = kernels::testing::RandomD16(cache_n, c.dtype, 1.0f, rng);
  std::vector<uint16_t> v16 = kernels::testing::RandomD16(cache_n, c.dtype, 1.0f, rng);
  std::vector<uint8_t> k8 = randomFp8(cache_n, rng), v8 = randomFp8(cache_n, rng);
  const size_t cache_bytes = cache_n * (c.fp8_cache ? 1 : 2);
  DeviceBuffer dq(q_n * 2), dk(kv_n * 2 + 2), dv(kv_n * 2 + 2), dkc(cache_bytes + 1), dvc(cache_bytes + 1);
  DeviceBuffer dslots(b.slots.size() * 8 + 8), dtable(b.block_table.size() * 4 + 4), dlens(b.seq_lens.size() * 4 + 4),
      dqsl(b.qsl.size() * 4), dscales(3 * sizeof(float)), dout(q_n * 2);
  dq.Upload(q);
  dk.Upload(k);
  dv.Upload(v);
  if (c.fp8_cache) {
    dkc.Upload(k8);
    dvc.Upload(v8);
  } else {
    dkc.Upload(k16);
    dvc.Upload(v16);
  }
  dslots.Upload(b.slots);
  dtable.Upload(b.block_table);
  dlens.Upload(b.seq_lens);
  dqsl.Upload(b.qsl);
  dscales.Upload(std::vector<float>{c.k_scale, c.v_scale, c.out_scale});
  dout.Poison();
  const float* scales = static_cast<const float*>(dscales.get());

  ReshapeAndCacheParams w;
  w.dtype = c.dtype;
  w.cache_dtype = c.fp8_cache ? DType::F8E4M3FN : c.dtype;
  w.key = dk.get();
  w.value = dv.get();
  w.key_stride[0] = w.value_stride[0] = Hk * E;
  w.key_stride[1] = w.value_stride[1] = E;
  w.key_cache = dkc.get();
  w.value_cache = dvc.get();
  w.slot_mapping = static_cast<const int64_t*>(dslots.get());
  w.num_tokens = T;
  w.heads_kv = Hk;
  w.head_size = E;
  w.num_blocks = b.num_blocks;
  w.block_size = c.block_size;
  w.k_scale = scales;
  w.v_scale = scales + 1;
  FXFUSE_CUDA_REQUIRE(LaunchReshapeAndCache(w, nullptr));

  PagedAttentionParams a;
  a.dtype = c.dtype;
  a.cache_dtype = w.cache_dtype;
  a.q = dq.get();
  a.q_stride[0] = Hq * E;
  a.q_stride[1] = E;
  a.key_cache = dkc.get();
  a.value_cache = dvc.get();
  a.block_table = static_cast<const int32_t*>(dtable.get());
  a.block_table_stride = b.max_blocks;
  a.seq_lens = static_cast<const int32_t*>(dlens.get());
  a.query_start_loc = static_cast<const int32_t*>(dqsl.get());
  a.num_tokens = T;
  a.num_seqs = static_cast<int64_t>(b.seq_lens.size());
  a.max_blocks = b.max_blocks;
  a.heads_q = Hq;
  a.heads_kv = Hk;
  a.head_size = E;
  a.num_blocks = b.num_blocks;
  a.block_size = c.block_size;
  a.k_scale = scales;
  a.v_scale = scales + 1;
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(E));
  a.scale = softmax_scale;
  a.out = dout.get();
  a.o_stride[0] = Hq * E;
  a.o_stride[1] = E;
  a.out_dtype = c.fp8_out ? DType::F8E4M3FN : c.dtype;
  a.out_scale = scales + 2;
  FXFUSE_CUDA_REQUIRE(LaunchPagedAttention(a, nullptr));  // one pass over every context
  FXFUSE_CUDA_REQUIRE(cudaDeviceSynchronize());

  // (a) bit exact.
  writeReference(c, b, k, k16, k8, c.k_scale);
  writeReference(c, b, v, v16, v8, c.v_scale);
  if (c.fp8_cache) {
    CHECK(dkc.Download<uint8_t>(cache_n) == k8);
    CHECK(dvc.Download<uint8_t>(cache_n) == v8);
  } else {
    CHECK(dkc.Download<uint16_t>(cache_n) == k16);
    CHECK(dvc.Download<uint16_t>(cache_n) == v16);
  }
  // (b) within one rounding step of the exact value (plus fp32 accumulation noise): in one
  // pass, with the split the planner picks for an H200, in 7 chunks (chunk lengths that cross
  // block boundaries) and in 256 (chunks of the minimum length, most of them past the context).
  // Both score paths where the tensor-core one applies (head size 64 or 128):
  // the default, then CUDA cores (FXFUSE_PAGED_MMA=0); each also with the batch metadata read
  // before the kernels wait for the preceding grid (metadata_read_only, as plans launch them).
  const std::vector<double> ref = attendReference(c, b, q, k16, k8, v16, v8, softmax_scale);
  checkAttention(c, ref, dout, q_n, "one pass");
  auto launchChecked = [&](const PagedAttentionParams& params, const char* variant) {
    dout.Poison();
    FXFUSE_CUDA_REQUIRE(LaunchPagedAttention(params, nullptr));
    FXFUSE_CUDA_REQUIRE(cudaDeviceSynchronize());
    checkAttention(c, ref, dout, q_n, variant);
  };
  for (const char* mma : {"1", "0"}) {
    INFO("FXFUSE_PAGED_MMA=" << mma);
    setenv("FXFUSE_PAGED_MMA", mma, 1);
    launchChecked(a, "one pass");
    PagedAttentionParams planned = a;
    PlanPagedAttentionSplits(planned, 132);
    PagedAttentionParams seven = a, many = a;
    seven.num_splits = 7;
    many.num_splits = 256;
    for (PagedAttentionParams* split : {&planned, &seven, &many}) {
      if (split->num_splits <= 1) continue;
      DeviceBuffer workspace(static_cast<size_t>(PagedAttentionWorkspaceBytes(*split)));
      split->workspace = static_cast<float*>(workspace.get());
      launchChecked(*split, split == &planned ? "planned split" : split == &seven ? "7 chunks" : "256 chunks");
      // The metadata and first block ids read before the wait for the preceding grid.
      PagedAttentionParams early = *split;
      early.metadata_read_only = true;
      launchChecked(early, "metadata read before the wait");
    }
    PagedAttentionParams early_one_pass = a;
    early_one_pass.metadata_read_only = true;
    launchChecked(early_one_pass, "one pass, metadata read before the wait");
  }
  unsetenv("FXFUSE_PAGED_MMA");
}

// The attention output in `dout` against the exact reference `ref` (NaN: a padding row, 0).
void checkAttention(const Case& c, const std::vector<double>& ref, DeviceBuffer& dout, size_t q_n, const char* variant) {
  INFO(variant);
  const std::vector<uint8_t> got8 = c.fp8_out ? dout.Download<uint8_t>(q_n) : std::vector<uint8_t>();
  const std::vector<uint16_t> got16 = c.fp8_out ? std::vector<uint16_t>() : dout.Download<uint16_t>(q_n);
  int64_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < q_n; ++i) {
    const bool padding = std::isnan(ref[i]);
    bool ok;
    double got;
    if (c.fp8_out) {
      const uint8_t g = got8[i];
      got = ref::E4m3BitsToFloat(g);
      const uint8_t want = ref::QuantizeToE4m3(ref::Round16(static_cast<float>(ref[i]), c.dtype), c.out_scale, false);
      ok = padding ? g == 0 : ref::E4m3StepDistance(g, want) <= 1;
    } else {
      const uint16_t g = got16[i];
      got = toFloat(g, c.dtype);
      const uint16_t want = ref::FloatToD16Bits(static_cast<float>(ref[i]), c.dtype);
      ok = padding ? g == 0 : (ref::D16UlpDistance(g, want) <= 1 || std::abs(got - ref[i]) <= 1e-4);
    }
    if (!ok && bad++ == 0) first << "element " << i << ": gpu " << got << ", exact " << ref[i];
  }
  INFO(first.str());
  CHECK(bad == 0);
}

TEST_CASE("paged attention: decode-only batch, GQA, block-boundary contexts", "[gpu][paged_attention]") {
  runCase({"decode", DType::BF16, false, false, 8, 2, 128, 16, {1, 1, 1, 1, 1, 1}, {17, 1, 16, 32, 31, 47}});
}

// More sequences than a warp has lanes: the kernels find a token's sequence 32 starts at a
// time, so the second and third rounds, empty sequences between them and padding after the
// last must all land on the right rows.
TEST_CASE("paged attention: 75 sequences, some empty, decode and short prefill", "[gpu][paged_attention]") {
  Case c{"many-seqs", DType::BF16, false, false, 8, 2, 128, 16, {}, {}};
  for (int i = 0; i < 75; ++i) {
    const int q = i % 5 == 2 ? 0 : i % 7 == 0 ? 3 : 1;
    c.query_lens.push_back(q);
    c.context_lens.push_back(q + (i * 37) % 90);
  }
  c.padding_tokens = 2;
  runCase(c);
}

TEST_CASE("paged attention: prefill-only batch", "[gpu][paged_attention]") {
  runCase({"prefill", DType::BF16, false, false, 4, 4, 64, 16, {37, 5}, {37, 5}});
}

TEST_CASE("paged attention: chunked prefill mixed with decode, an empty sequence, padding tokens", "[gpu][paged_attention]") {
  Case c{"mixed", DType::BF16, false, false, 8, 2, 128, 16, {1, 4, 0, 1, 9}, {16, 20, 12, 33, 9}};
  c.padding_tokens = 3;
  runCase(c);
}

TEST_CASE("paged attention: fp16, head size 96, block size 1", "[gpu][paged_attention]") {
  runCase({"f16", DType::F16, false, false, 6, 3, 96, 1, {1, 3, 2}, {5, 3, 9}});
}

TEST_CASE("paged attention: head size 256, block size 32", "[gpu][paged_attention]") {
  runCase({"e256", DType::BF16, false, false, 4, 1, 256, 32, {1, 2, 1}, {32, 33, 64}});
}

TEST_CASE("paged attention: FP8 cache (saturating write, dequantized read)", "[gpu][paged_attention]") {
  Case c{"fp8-cache", DType::BF16, true, false, 8, 2, 128, 16, {1, 1, 6, 1}, {17, 32, 6, 40}};
  c.padding_tokens = 2;
  runCase(c);
}

// The tensor-core path multiplies an FP8 cache in f16: q far outside f16's range (1e5, whose
// scores stay moderate with a small k_scale) and far below its normal range (1e-6) must be
// scaled into it first.
TEST_CASE("paged attention: FP8 cache, head size 64, q beyond f16's range", "[gpu][paged_attention]") {
  Case huge{"fp8-e64-huge-q", DType::BF16, true, false, 8, 2, 64, 16, {1, 1, 3}, {40, 129, 19}};
  huge.q_stddev = 1e5f;
  huge.k_scale = 1e-6f;
  runCase(huge);
  Case tiny{"fp8-e128-tiny-q", DType::BF16, true, false, 8, 2, 128, 16, {1, 2}, {77, 33}};
  tiny.q_stddev = 1e-6f;
  tiny.k_scale = 1e4f;
  runCase(tiny);
}

TEST_CASE("paged attention: FP8 output", "[gpu][paged_attention]") {
  runCase({"fp8-out", DType::BF16, false, true, 8, 2, 64, 16, {1, 5, 1}, {16, 21, 2}});
}

TEST_CASE("paged attention: FP8 cache and FP8 output, fp16", "[gpu][paged_attention]") {
  Case c{"fp8-both", DType::F16, true, true, 4, 2, 128, 16, {2, 1}, {18, 15}};
  c.padding_tokens = 1;
  runCase(c);
}

TEST_CASE("paged attention: long decode contexts, eight query heads per KV head (Llama-70B)", "[gpu][paged_attention]") {
  runCase({"long-gqa8", DType::BF16, false, false, 64, 8, 128, 16, {1, 1, 1}, {300, 1000, 77}});
}

TEST_CASE("paged attention: three query heads per KV head, odd head size, FP8 cache", "[gpu][paged_attention]") {
  runCase({"odd", DType::F16, true, false, 6, 2, 33, 16, {1, 2}, {70, 129}});
}

TEST_CASE("paged attention: rows shorter than 64 bytes (more copying lanes than a key group's rows)",
          "[gpu][paged_attention]") {
  runCase({"e16", DType::BF16, false, false, 4, 2, 16, 16, {1, 1}, {40, 100}});
  runCase({"e32-fp8", DType::BF16, true, false, 4, 1, 32, 16, {1, 3}, {65, 20}});
}

// A dense one-token decode (rt.attention over K/V [B, Hk, Sk, E] in memory [B, rows, Hk, E], or
// one cache every sequence reads) through the identity view the runtime uses
// (kernels/runtime/dense_paged_view.h): each query attends over all Sk keys of its sequence,
// in one pass and with the split planned for an H200, on both score paths.
struct DenseCase {
  int64_t batch, keys, rows, heads_q = 32, heads_kv = 8, head_size = 128;
  bool broadcast = false, fp8_out = false;
};

void runDenseView(const DenseCase& d) {
  const uint64_t seed = NextSeed();
  INFO("dense view: B " << d.batch << " Sk " << d.keys << " rows " << d.rows << " E " << d.head_size
                        << (d.broadcast ? " broadcast" : "") << (d.fp8_out ? " fp8 out" : "") << ", seed " << seed);
  std::mt19937_64 rng(seed);
  const int64_t B = d.batch, Hq = d.heads_q, Hk = d.heads_kv, E = d.head_size;
  const int64_t seq_stride = d.broadcast ? 0 : d.rows;  // in key rows of Hk * E
  const size_t q_n = static_cast<size_t>(B * Hq * E);
  const size_t cache_n = static_cast<size_t>(((d.broadcast ? 0 : B - 1) * d.rows + d.keys) * Hk * E);
  const std::vector<uint16_t> q = kernels::testing::RandomD16(q_n, DType::BF16, 1.0f, rng);
  const std::vector<uint16_t> k = kernels::testing::RandomD16(cache_n, DType::BF16, 1.0f, rng);
  const std::vector<uint16_t> v = kernels::testing::RandomD16(cache_n, DType::BF16, 1.0f, rng);
  DeviceBuffer dq(q_n * 2), dk(cache_n * 2), dv(cache_n * 2), dout(q_n * 2), dscale(sizeof(float));
  dq.Upload(q);
  dk.Upload(k);
  dv.Upload(v);
  const float out_scale = 0.01f;
  dscale.Upload(std::vector<float>{out_scale});

  AttentionParams a;
  a.dtype = a.round_dtype = DType::BF16;
  a.out_dtype = d.fp8_out ? DType::F8E4M3FN : DType::BF16;
  a.out_scale = static_cast<const float*>(dscale.get());
  a.q = dq.get();
  a.k = dk.get();
  a.v = dv.get();
  a.out = dout.get();
  a.B = B, a.Hq = Hq, a.Hk = Hk, a.Sq = 1, a.Sk = d.keys, a.E = a.Ev = E;
  const int64_t qs[4] = {Hq * E, E, E, 1}, ks[4] = {seq_stride * Hk * E, E, Hk * E, 1};
  std::copy(qs, qs + 4, a.q_stride);
  std::copy(qs, qs + 4, a.o_stride);
  std::copy(ks, ks + 4, a.k_stride);
  std::copy(ks, ks + 4, a.v_stride);
  a.scale = 1.0f / std::sqrt(static_cast<float>(E));
  DensePagedView view;
  REQUIRE(PagedViewOfDenseAttention(a, &view) == "");
  DeviceBuffer dtable(view.block_table.size() * 4), dlens(view.seq_lens.size() * 4), dqsl(view.query_start_loc.size() * 4);
  dtable.Upload(view.block_table);
  dlens.Upload(view.seq_lens);
  dqsl.Upload(view.query_start_loc);
  PagedAttentionParams p = view.params;
  p.block_table = static_cast<const int32_t*>(dtable.get());
  p.seq_lens = static_cast<const int32_t*>(dlens.get());
  p.query_start_loc = static_cast<const int32_t*>(dqsl.get());

  // float64 attention of each query over its sequence's Sk keys, read the dense way.
  std::vector<double> ref(q_n);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      auto at = [&](int64_t j, int64_t e) { return static_cast<size_t>(((b * seq_stride + j) * Hk + h / (Hq / Hk)) * E + e); };
      std::vector<double> sc(static_cast<size_t>(d.keys));
      double mx = -INFINITY, l = 0;
      for (int64_t j = 0; j < d.keys; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e)
          dot += static_cast<double>(toFloat(q[static_cast<size_t>((b * Hq + h) * E + e)], DType::BF16)) *
                 toFloat(k[at(j, e)], DType::BF16);
        sc[static_cast<size_t>(j)] = dot * a.scale;
        mx = std::max(mx, sc[static_cast<size_t>(j)]);
      }
      for (double& x : sc) l += (x = std::exp(x - mx));
      for (int64_t e = 0; e < E; ++e) {
        double o = 0;
        for (int64_t j = 0; j < d.keys; ++j) o += sc[static_cast<size_t>(j)] * toFloat(v[at(j, e)], DType::BF16);
        ref[static_cast<size_t>((b * Hq + h) * E + e)] = o / l;
      }
    }
  Case c{"dense-view", DType::BF16, false, d.fp8_out, Hq, Hk, E, p.block_size, {}, {}};
  c.out_scale = out_scale;
  for (const char* mma : {"1", "0"}) {
    INFO("FXFUSE_PAGED_MMA=" << mma);
    setenv("FXFUSE_PAGED_MMA", mma, 1);
    // The planned split as the runtime prepares it (PrepareDensePagedView: its own uploads).
    PagedAttentionParams planned;
    void* prepared = nullptr;
    const cudaError_t prepare = PrepareDensePagedView(view, 132, &planned, &prepared);
    for (const PagedAttentionParams* launch : {&p, &planned}) {
      FXFUSE_CUDA_REQUIRE(prepare);
      dout.Poison();
      FXFUSE_CUDA_REQUIRE(LaunchPagedAttention(*launch, nullptr));
      FXFUSE_CUDA_REQUIRE(cudaDeviceSynchronize());
      checkAttention(c, ref, dout, q_n, launch == &p ? "one pass" : "planned split, prepared as the runtime does");
    }
    cudaFree(prepared);
  }
  unsetenv("FXFUSE_PAGED_MMA");
}

TEST_CASE("paged attention over a dense decode cache's identity view", "[gpu][paged_attention]") {
  runDenseView({4, 1000, 1000});                  // blocks of 8 (1000 rows apart)
  runDenseView({3, 4096, 4096});                  // blocks of 16, the attention table's layout
  runDenseView({2, 300, 333, 8, 2, 64});          // rows not a multiple of 2: blocks of 1
  runDenseView({1, 2049, 0, 8, 1, 128});          // one sequence, one KV head
  DenseCase shared{5, 640, 0, 16, 4, 128};
  shared.broadcast = true;                        // every sequence reads the same cache
  runDenseView(shared);
  DenseCase fp8{3, 777, 784, 32, 8, 128};
  fp8.fp8_out = true;
  runDenseView(fp8);
}

TEST_CASE("paged attention: bad params are refused", "[gpu][paged_attention]") {
  PagedAttentionParams a;
  a.head_size = kPagedMaxHeadSize + 1;
  a.heads_q = a.heads_kv = 1;
  a.block_size = 16;
  CHECK(LaunchPagedAttention(a, nullptr) == cudaErrorInvalidValue);
  ReshapeAndCacheParams w;
  w.cache_dtype = DType::F8E4M3FN;  // no scales
  w.heads_kv = w.head_size = w.block_size = 1;
  CHECK(LaunchReshapeAndCache(w, nullptr) == cudaErrorInvalidValue);
  cudaGetLastError();
}

}  // namespace
}  // namespace fxfuse::runtime
