// fxfuse.paged_attention against a straightforward computation written here: cache writes
// at the slots, then per sequence a causal (bottom-right aligned) softmax over the keys
// read through the block table, GQA, FP8 caches and FP8 output; and the metadata checks.
#include <catch2/catch.hpp>

#include <cmath>

#include <fmt/format.h>

#include "ir/status.h"
#include "tests/interpreter/test_util.h"
#include "tools/interpreter/numerics.h"

using namespace fxfuse::interp;
using namespace fxfuse::interp::test;
using fxfuse::ir::DType;

namespace {

constexpr int64_t kHq = 4, kHk = 2, kE = 8, kBs = 4;

struct Batch {
  int64_t num_blocks = 8, max_blocks = 4;
  std::vector<int64_t> slots, block_table, seq_lens, query_start;
  bool fp8_cache = false;
  double k_scale = 0.05, v_scale = 0.04;
  std::optional<double> output_scale;
  int64_t tokens() const { return static_cast<int64_t>(slots.size()); }
  int64_t seqs() const { return static_cast<int64_t>(seq_lens.size()); }
};

std::vector<double> randomValues(size_t n, uint64_t seed, double lo, double hi) {
  std::vector<double> v(n);
  uint64_t x = seed * 2862933555777941757ULL + 3037000493ULL;
  for (auto& e : v) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    e = lo + (hi - lo) * static_cast<double>(x >> 11) * 0x1.0p-53;
  }
  return v;
}

std::string graphText(const Batch& b) {
  std::string cache = fmt::format("{}[{}, {}, {}, {}]", b.fp8_cache ? "f8e4m3fn" : "bf16", b.num_blocks, kBs, kHk, kE);
  int64_t T = b.tokens(), B = b.seqs();
  std::string scales = b.fp8_cache ? ", k_scale=%10, v_scale=%11" : "";
  std::string out_scale = b.output_scale ? ", output_scale=%12" : "";
  return fmt::format(
      "graph @g {{\n"
      "  input %1 \"q\": bf16[{T}, {hq}, {e}]\n  input %2 \"k\": bf16[{T}, {hk}, {e}]\n"
      "  input %3 \"v\": bf16[{T}, {hk}, {e}]\n  input %4 \"kc\": {cache}\n  input %5 \"vc\": {cache}\n"
      "  input %6 \"slots\": i64[{T}]\n  input %7 \"bt\": i32[{B}, {mb}]\n  input %8 \"sl\": i32[{B}]\n"
      "  input %9 \"qsl\": i32[{B1}]\n  input %10 \"ks\": f32[1]\n  input %11 \"vs\": f32[1]\n"
      "  input %12 \"os\": f32[1]\n"
      "  %13: {odt}[{T}, {hq}, {e}], %14: {cache}, %15: {cache} = fxfuse.paged_attention.default(query=%1, key=%2, "
      "value=%3, key_cache=%4, value_cache=%5, slot_mapping=%6, block_table=%7, seq_lens=%8, query_start_loc=%9{scales}"
      "{out_scale})\n"
      "  output %13\n  output %14\n  output %15\n}}\n",
      fmt::arg("T", T), fmt::arg("hq", kHq), fmt::arg("hk", kHk), fmt::arg("e", kE), fmt::arg("cache", cache),
      fmt::arg("B", B), fmt::arg("mb", b.max_blocks), fmt::arg("B1", B + 1), fmt::arg("scales", scales),
      fmt::arg("out_scale", out_scale), fmt::arg("odt", b.output_scale ? "f8e4m3fn" : "bf16"));
}

struct Inputs {
  std::vector<double> q, k, v, kc, vc;
};

Inputs makeInputs(const Batch& b, uint64_t seed) {
  Inputs in;
  size_t T = static_cast<size_t>(b.tokens()), cache = static_cast<size_t>(b.num_blocks * kBs * kHk * kE);
  auto bf = [](std::vector<double> v) {
    for (double& x : v) x = bf16(x);
    return v;
  };
  in.q = bf(randomValues(T * kHq * kE, seed, -2, 2));
  in.k = bf(randomValues(T * kHk * kE, seed + 1, -2, 2));
  in.v = bf(randomValues(T * kHk * kE, seed + 2, -2, 2));
  if (b.fp8_cache) {
    in.kc = randomValues(cache, seed + 3, -40, 40);
    in.vc = randomValues(cache, seed + 4, -40, 40);
    for (double* c : {in.kc.data(), in.vc.data()})
      for (size_t i = 0; i < cache; ++i) c[i] = roundTo(c[i], DType::F8E4M3FN);
  } else {
    in.kc = bf(randomValues(cache, seed + 3, -2, 2));
    in.vc = bf(randomValues(cache, seed + 4, -2, 2));
  }
  return in;
}

std::vector<RValue> runPaged(const Batch& b, const Inputs& in) {
  DType cd = b.fp8_cache ? DType::F8E4M3FN : DType::BF16;
  Shape cs = {b.num_blocks, kBs, kHk, kE};
  std::vector<double> bt(b.block_table.begin(), b.block_table.end()), sl(b.seq_lens.begin(), b.seq_lens.end()),
      qsl(b.query_start.begin(), b.query_start.end()), slots(b.slots.begin(), b.slots.end());
  std::vector<Tensor> t = {
      T({b.tokens(), kHq, kE}, DType::BF16, in.q), T({b.tokens(), kHk, kE}, DType::BF16, in.k),
      T({b.tokens(), kHk, kE}, DType::BF16, in.v), T(cs, cd, in.kc), T(cs, cd, in.vc),
      T({b.tokens()}, DType::I64, slots), T({b.seqs(), b.max_blocks}, DType::I32, bt),
      T({b.seqs()}, DType::I32, sl), T({b.seqs() + 1}, DType::I32, qsl),
      T({1}, DType::F32, {b.k_scale}), T({1}, DType::F32, {b.v_scale}),
      T({1}, DType::F32, {b.output_scale.value_or(1.0)}),
  };
  return run(graphText(b), t);
}

// The straightforward reference: caches after the writes, and the attention output.
struct Reference {
  std::vector<double> kc, vc, out;
};

double fp8Quant(double x, double s) {
  double y = f32(f32(x) / s);
  y = std::min(std::max(y, -448.0), 448.0);
  return roundTo(y, DType::F8E4M3FN);
}

Reference reference(const Batch& b, const Inputs& in) {
  Reference r{in.kc, in.vc, {}};
  const int64_t row = kHk * kE;
  for (int64_t t = 0; t < b.tokens(); ++t) {
    if (b.slots[t] < 0) continue;
    for (int64_t i = 0; i < row; ++i) {
      double k = in.k[t * row + i], v = in.v[t * row + i];
      r.kc[b.slots[t] * row + i] = b.fp8_cache ? fp8Quant(k, f32(b.k_scale)) : k;
      r.vc[b.slots[t] * row + i] = b.fp8_cache ? fp8Quant(v, f32(b.v_scale)) : v;
    }
  }
  auto cached = [&](const std::vector<double>& c, double s, int64_t seq, int64_t j, int64_t h, int64_t e) {
    int64_t slot = b.block_table[seq * b.max_blocks + j / kBs] * kBs + j % kBs;
    double x = c[(slot * kHk + h) * kE + e];
    return b.fp8_cache ? f32(x * f32(s)) : x;
  };
  r.out.assign(static_cast<size_t>(b.tokens() * kHq * kE), 0.0);
  for (int64_t seq = 0; seq < b.seqs(); ++seq) {
    int64_t q0 = b.query_start[seq], ql = b.query_start[seq + 1] - q0, ctx = b.seq_lens[seq];
    for (int64_t i = 0; i < ql; ++i)
      for (int64_t h = 0; h < kHq; ++h) {
        int64_t kvh = h / (kHq / kHk), last = ctx - ql + i;
        std::vector<double> p(static_cast<size_t>(last + 1));
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= last; ++j) {
          double s = 0;
          for (int64_t e = 0; e < kE; ++e) s += in.q[((q0 + i) * kHq + h) * kE + e] * cached(r.kc, b.k_scale, seq, j, kvh, e);
          p[j] = s / std::sqrt(static_cast<double>(kE));
          mx = std::max(mx, p[j]);
        }
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (int64_t e = 0; e < kE; ++e) {
          double o = 0;
          for (int64_t j = 0; j <= last; ++j) o += p[j] / sum * cached(r.vc, b.v_scale, seq, j, kvh, e);
          double rounded = bf16(o);
          r.out[((q0 + i) * kHq + h) * kE + e] =
              b.output_scale ? roundTo(std::min(std::max(f32(rounded * f32(1 / f32(*b.output_scale))), -448.0), 448.0),
                                       DType::F8E4M3FN)
                             : rounded;
        }
      }
  }
  return r;
}

void checkAgainstReference(const Batch& b, uint64_t seed = 1) {
  Inputs in = makeInputs(b, seed);
  std::vector<RValue> got = runPaged(b, in);
  Reference ref = reference(b, in);
  REQUIRE(got.size() == 3);
  CHECK(got[1].t.values() == ref.kc);
  CHECK(got[2].t.values() == ref.vc);
  std::vector<double> out = got[0].t.values();
  REQUIRE(out.size() == ref.out.size());
  DType od = b.output_scale ? DType::F8E4M3FN : DType::BF16;
  int64_t differing = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    INFO("element " << i << ": " << out[i] << " vs " << ref.out[i]);
    REQUIRE(stepDistance(out[i], ref.out[i], od) <= 1);  // summation order only
    differing += out[i] != ref.out[i];
  }
  CHECK(differing * 50 <= static_cast<int64_t>(out.size()));
}

// Sequences with the given query and context lengths, blocks assigned back to front
// (so logical block j of a sequence is never physical block j), slots where vLLM puts them.
Batch batchOf(const std::vector<int64_t>& query_lens, const std::vector<int64_t>& contexts, int64_t padding = 0) {
  Batch b;
  b.query_start = {0};
  int64_t next_block = b.num_blocks - 1;
  b.block_table.assign(query_lens.size() * b.max_blocks, 0);
  for (size_t s = 0; s < query_lens.size(); ++s) {
    for (int64_t j = 0; j * kBs < contexts[s]; ++j) b.block_table[s * b.max_blocks + j] = next_block--;
    for (int64_t i = 0; i < query_lens[s]; ++i) {
      int64_t pos = contexts[s] - query_lens[s] + i;
      b.slots.push_back(b.block_table[s * b.max_blocks + pos / kBs] * kBs + pos % kBs);
    }
    b.seq_lens.push_back(contexts[s]);
    b.query_start.push_back(b.query_start.back() + query_lens[s]);
  }
  for (int64_t i = 0; i < padding; ++i) b.slots.push_back(-1);
  return b;
}

}  // namespace

TEST_CASE("paged_attention: decode batch, contexts around block boundaries", "[paged_attention]") {
  checkAgainstReference(batchOf({1, 1, 1, 1}, {1, kBs, kBs + 1, 2 * kBs + 3}));
}

TEST_CASE("paged_attention: prefill only (context == query length)", "[paged_attention]") {
  checkAgainstReference(batchOf({3, 6}, {3, 6}));
}

TEST_CASE("paged_attention: mixed batch with a chunked prefill and padding tokens", "[paged_attention]") {
  Batch b = batchOf({1, 3, 1}, {6, 7, 2}, /*padding=*/2);
  checkAgainstReference(b);
  Inputs in = makeInputs(b, 3);
  std::vector<RValue> got = runPaged(b, in);
  std::vector<double> out = got[0].t.values();
  for (int64_t i = 5 * kHq * kE; i < 7 * kHq * kE; ++i) REQUIRE(out[i] == 0.0);  // padding rows are zero
}

TEST_CASE("paged_attention: a padding token (slot -1) writes nothing", "[paged_attention]") {
  Batch b = batchOf({2}, {5});
  b.slots[0] = -1;  // the first query token is padding: its slot keeps the old cache entry
  Inputs in = makeInputs(b, 5);
  std::vector<RValue> got = runPaged(b, in);
  int64_t slot = b.block_table[0] * kBs + 3;  // position 3 of the sequence
  std::vector<double> kc = got[1].t.values();
  for (int64_t i = 0; i < kHk * kE; ++i) REQUIRE(kc[slot * kHk * kE + i] == in.kc[slot * kHk * kE + i]);
  checkAgainstReference(b, 5);
}

TEST_CASE("paged_attention: FP8 cache round trip and FP8 output", "[paged_attention]") {
  Batch b = batchOf({1, 4, 1}, {9, 4, 3});
  b.fp8_cache = true;
  checkAgainstReference(b);
  Inputs in = makeInputs(b, 1);
  std::vector<RValue> got = runPaged(b, in);
  std::vector<double> kc = got[1].t.values();
  for (int64_t t = 0; t < b.tokens(); ++t)
    for (int64_t i = 0; i < kHk * kE; ++i) {
      double back = f32(kc[b.slots[t] * kHk * kE + i] * f32(b.k_scale)), orig = in.k[t * kHk * kE + i];
      REQUIRE(std::abs(back - orig) <= std::abs(orig) / 16 + 0.05 * 0x1.0p-6);  // 3 mantissa bits
    }
  b.output_scale = 0.02;
  checkAgainstReference(b);
}

TEST_CASE("paged_attention: bad metadata is one FxError", "[paged_attention]") {
  auto refuse = [](Batch b, const char* what) {
    INFO(what);
    Inputs in = makeInputs(b, 1);
    REQUIRE_THROWS_WITH(runPaged(b, in), Catch::Contains(what));
  };
  Batch ok = batchOf({1, 2}, {5, 6});
  Batch slot = ok;
  slot.slots[1] = ok.num_blocks * kBs;
  refuse(slot, "slot_mapping[1] = 32 is outside [-1, 32)");
  Batch dup = ok;
  dup.slots[2] = dup.slots[1];
  refuse(dup, "is written by tokens 1 and 2");
  Batch block = ok;
  block.block_table[1] = ok.num_blocks;
  refuse(block, "block_table[0, 1] = 8 is outside [0, 8)");
  Batch decreasing = ok;
  decreasing.query_start = {0, 2, 1};
  refuse(decreasing, "query_start_loc decreases at sequence 1");
  Batch past = ok;
  past.query_start = {0, 1, 4};
  refuse(past, "query_start_loc[2] = 4 is past the 3 tokens");
  Batch too_many = ok;
  too_many.seq_lens[1] = 1;
  refuse(too_many, "sequence 1 has 2 queries but a context of 1");
  Batch long_ctx = ok;
  long_ctx.seq_lens[0] = ok.max_blocks * kBs + 1;
  refuse(long_ctx, "seq_lens[0] = 17 is outside [0, 16]");
}
