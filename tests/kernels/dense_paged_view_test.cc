// The paged view of a dense decode attention (kernels/runtime/dense_paged_view.h), on the CPU:
// every key the dense attention reads is the key the paged kernel reads through the view's
// block table (addresses recomputed both ways), the metadata is the identity batch, the block
// size divides the rows between sequences, and every attention the paged kernel would compute
// differently (masks, several queries, top-left causal, FP8 rounding, other layouts) is refused.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "kernels/runtime/dense_paged_view.h"

namespace fxfuse::runtime {
namespace {

// One query token per sequence over K/V [B, Hk, Sk, E] in memory [B, rows, Hk, E]; q/out
// [B, Hq, 1, E] contiguous.
AttentionParams denseDecode(int64_t B, int64_t Sk, int64_t rows, int64_t Hq = 32, int64_t Hk = 8, int64_t E = 128) {
  AttentionParams a;
  a.dtype = a.out_dtype = a.round_dtype = DType::BF16;
  static char q, k, v, out;
  a.q = &q;
  a.k = &k;
  a.v = &v;
  a.out = &out;
  a.B = B, a.Hq = Hq, a.Hk = Hk, a.Sq = 1, a.Sk = Sk, a.E = a.Ev = E;
  const int64_t qs[4] = {Hq * E, E, E, 1}, ks[4] = {rows * Hk * E, E, Hk * E, 1};
  for (int d = 0; d < 4; ++d) {
    a.q_stride[d] = a.o_stride[d] = qs[d];
    a.k_stride[d] = a.v_stride[d] = ks[d];
  }
  a.scale = 0.088f;
  return a;
}

// Element offset of key j, KV head h, element e of sequence b: as the dense attention reads it,
// and through the view (block_table[b][j / bs] * bs + j % bs rows of Hk * E).
int64_t denseOffset(const AttentionParams& a, int64_t b, int64_t j, int64_t h, int64_t e) {
  return b * a.k_stride[0] + h * a.k_stride[1] + j * a.k_stride[2] + e;
}
// The same for the value of key j (the view reads it at the key's offset from value_cache).
int64_t denseValueOffset(const AttentionParams& a, int64_t b, int64_t j, int64_t h, int64_t e) {
  return b * a.v_stride[0] + h * a.v_stride[1] + j * a.v_stride[2] + e;
}
int64_t pagedOffset(const DensePagedView& v, int64_t b, int64_t j, int64_t h, int64_t e) {
  const PagedAttentionParams& p = v.params;
  const int32_t block = v.block_table[static_cast<size_t>(b * p.block_table_stride + j / p.block_size)];
  REQUIRE(block >= 0);
  REQUIRE(block < p.num_blocks);
  return ((block * p.block_size + j % p.block_size) * p.heads_kv + h) * p.head_size + e;
}

void checkSameKeys(const AttentionParams& a, const DensePagedView& v) {
  const PagedAttentionParams& p = v.params;
  CHECK(p.num_tokens == a.B);
  CHECK(p.num_seqs == a.B);
  CHECK(p.max_blocks * p.block_size >= a.Sk);
  CHECK((p.max_blocks - 1) * p.block_size < a.Sk);
  CHECK(p.block_table_stride == p.max_blocks);
  REQUIRE(v.block_table.size() == static_cast<size_t>(a.B * p.max_blocks));
  REQUIRE(v.seq_lens.size() == static_cast<size_t>(a.B));
  REQUIRE(v.query_start_loc.size() == static_cast<size_t>(a.B + 1));
  for (int64_t b = 0; b < a.B; ++b) {
    CHECK(v.seq_lens[static_cast<size_t>(b)] == a.Sk);
    CHECK(v.query_start_loc[static_cast<size_t>(b)] == b);
    for (int64_t j : {int64_t{0}, a.Sk / 2, a.Sk - 1})
      for (int64_t h : {int64_t{0}, a.Hk - 1})
        for (int64_t e : {int64_t{0}, a.E - 1}) {
          INFO("b " << b << " key " << j << " head " << h << " e " << e);
          CHECK(pagedOffset(v, b, j, h, e) == denseOffset(a, b, j, h, e));
          CHECK(pagedOffset(v, b, j, h, e) == denseValueOffset(a, b, j, h, e));
        }
  }
  CHECK(v.query_start_loc.back() == a.B);
  CHECK(p.key_cache == a.k);
  CHECK(p.value_cache == a.v);
  CHECK(p.q_stride[0] == a.q_stride[0]);
  CHECK(p.o_stride[1] == a.o_stride[1]);
  CHECK(p.scale == a.scale);
}

TEST_CASE("dense decode: the view reads the same keys, blocks of 16 where the rows allow") {
  struct Shape {
    int64_t B, Sk, rows, expected_block;
  };
  for (const Shape& s : {Shape{64, 4096, 4096, 16}, Shape{1, 1000, 0, 16}, Shape{5, 1000, 1000, 8},
                         Shape{3, 37, 40, 8}, Shape{4, 33, 33, 1}, Shape{2, 100, 132, 4}, Shape{16, 32768, 32768, 16}}) {
    INFO("B " << s.B << " Sk " << s.Sk << " rows " << s.rows);
    const AttentionParams a = denseDecode(s.B, s.Sk, s.rows);
    DensePagedView v;
    REQUIRE(PagedViewOfDenseAttention(a, &v) == "");
    CHECK(v.params.block_size == s.expected_block);
    checkSameKeys(a, v);
  }
}

TEST_CASE("dense decode: batch-broadcast caches, one KV head, one key, FP8 output rounded first") {
  AttentionParams broadcast = denseDecode(6, 300, 0);  // every sequence reads the same cache
  DensePagedView v;
  REQUIRE(PagedViewOfDenseAttention(broadcast, &v) == "");
  checkSameKeys(broadcast, v);
  CHECK(v.params.num_blocks == (300 + 15) / 16);

  AttentionParams mqa = denseDecode(3, 50, 64, 8, 1, 64);
  mqa.k_stride[1] = mqa.v_stride[1] = 12345;  // a single KV head: its stride is never stepped over
  REQUIRE(PagedViewOfDenseAttention(mqa, &v) == "");
  checkSameKeys(mqa, v);

  AttentionParams one_key = denseDecode(4, 1, 1);
  one_key.causal = true;  // one query over one key: top-left and bottom-right agree
  REQUIRE(PagedViewOfDenseAttention(one_key, &v) == "");
  checkSameKeys(one_key, v);

  // A dense layer's first token (T = 1): one sequence, one key; K the rotated copy in [T, 5120]
  // rows (q and k rotated into one buffer), V a column range of the [T, 6144] qkv rows.
  AttentionParams first_token = denseDecode(1, 1, 0);
  first_token.causal = true;
  first_token.k_stride[0] = first_token.v_stride[0] = 0;
  first_token.k_stride[2] = 5120;
  first_token.v_stride[2] = 6144;
  REQUIRE(PagedViewOfDenseAttention(first_token, &v) == "");
  checkSameKeys(first_token, v);
  AttentionParams one_key_each = first_token;  // three sequences of one key, rows 6144 apart
  one_key_each.B = 3;
  one_key_each.k_stride[0] = one_key_each.v_stride[0] = 6144;
  REQUIRE(PagedViewOfDenseAttention(one_key_each, &v) == "");
  checkSameKeys(one_key_each, v);

  AttentionParams fp8 = denseDecode(2, 64, 64);
  static const float scale = 0.5f;
  fp8.out_dtype = DType::F8E4M3FN;
  fp8.out_scale = &scale;
  REQUIRE(PagedViewOfDenseAttention(fp8, &v) == "");
  CHECK(v.params.out_dtype == DType::F8E4M3FN);
  CHECK(v.params.out_scale == &scale);
}

TEST_CASE("dense decode: attentions the paged kernel computes differently are refused") {
  auto refused = [](const AttentionParams& a, const std::string& reason) {
    DensePagedView v;
    const std::string why = PagedViewOfDenseAttention(a, &v);
    INFO(why);
    CHECK(why.find(reason) != std::string::npos);
  };
  AttentionParams a = denseDecode(4, 100, 100);
  a.causal = true;
  refused(a, "top-left causal");
  a = denseDecode(4, 100, 100);
  a.Sq = 2;
  refused(a, "more than one query");
  a = denseDecode(4, 100, 100);
  a.mask_dtype = DType::BOOL;
  refused(a, "mask");
  a = denseDecode(4, 100, 100);
  static const float scale = 0.5f;
  a.out_dtype = DType::F8E4M3FN;
  a.out_scale = &scale;
  a.round_dtype = DType::F32;  // rounded to f32 first: the paged kernel rounds to bf16
  refused(a, "rounding");
  a = denseDecode(4, 100, 100);
  a.dtype = a.out_dtype = a.round_dtype = DType::F32;
  refused(a, "bf16 or f16");
  a = denseDecode(4, 100, 100);
  a.v_stride[0] = 200 * 8 * 128;
  refused(a, "K and V laid out differently");
  a = denseDecode(4, 100, 100);
  a.v_stride[2] = 6144;  // V a column range of [tokens, 6144] qkv rows: another key stride
  refused(a, "K and V laid out differently");
  a = denseDecode(4, 100, 100);
  a.k_stride[1] = a.v_stride[1] = 100 * 128;  // [B, Hk, S, E] memory (heads outermost)
  a.k_stride[2] = a.v_stride[2] = 128;
  refused(a, "[tokens, Hk, E]");
  a = denseDecode(4, 100, 100);
  a.k_stride[0] = a.v_stride[0] = 100 * 8 * 128 + 64;  // half a key row between sequences
  refused(a, "whole number of key rows");
  a = denseDecode(4, 100, 100, 32, 8, 512);
  refused(a, "head size");
  a = denseDecode(4, 100, 100, 30, 8);
  refused(a, "ungrouped");
  a = denseDecode(1 << 16, int64_t{1} << 20, int64_t{1} << 20, 8, 1, 64);  // a 2^36-entry block table
  refused(a, "int32 metadata");
}

}  // namespace
}  // namespace fxfuse::runtime
