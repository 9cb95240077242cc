// RotaryQueryWidth (kernels/runtime/paged_attention.h) on the CPU: the rotary kernel takes its
// eight-pairs-per-thread form only where every 16-byte access of that form is aligned (neox
// pairs, 8 | rotary_dim / 2, a table of the model dtype, 16-byte aligned rows of the query, the
// table and, out of place, of query_out with 8 | E - rotary_dim), else one pair per thread. The
// GPU test (rotary_cache_write_gpu_test) runs both forms; this pins the choice in CI.
#include <catch2/catch.hpp>

#include <cstdint>

#include "kernels/runtime/paged_attention.h"

namespace fxfuse::runtime {
namespace {

alignas(16) uint16_t g_query[4096];
alignas(16) uint16_t g_out[4096];
alignas(16) uint16_t g_table[4096];

// A dense Llama-shaped rotary (E = rot = 128, neox, bf16 table), in place.
ReshapeAndCacheParams llamaRotary() {
  ReshapeAndCacheParams p;
  p.dtype = DType::BF16;
  p.head_size = 128;
  p.rotary_dim = 128;
  p.neox = true;
  p.query = g_query;
  p.query_stride[0] = 6144;
  p.query_stride[1] = 128;
  p.heads_q = 32;
  p.cos_sin_cache = g_table;
  p.cos_sin_dtype = DType::BF16;
  p.cos_sin_stride = 128;
  return p;
}

TEST_CASE("rotary query width: eight pairs where every 16-byte access is aligned") {
  ReshapeAndCacheParams p = llamaRotary();
  CHECK(RotaryQueryWidth(p) == 8);
  p.query_out = g_out;  // out of place, rows of 4096
  p.query_out_stride[0] = 4096;
  p.query_out_stride[1] = 128;
  CHECK(RotaryQueryWidth(p) == 8);
  p.rotary_dim = p.cos_sin_stride = 64;  // partial rotary: the unrotated 64 copied in 16-byte words
  CHECK(RotaryQueryWidth(p) == 8);
}

TEST_CASE("rotary query width: one pair otherwise") {
  ReshapeAndCacheParams p = llamaRotary();
  p.neox = false;  // GPT-J pairs are adjacent elements
  CHECK(RotaryQueryWidth(p) == 1);
  p = llamaRotary();
  p.cos_sin_dtype = DType::F32;  // the table's 8 values are 32 bytes
  CHECK(RotaryQueryWidth(p) == 1);
  p = llamaRotary();
  p.rotary_dim = p.cos_sin_stride = 48;  // half = 24 is a multiple of 8: still eight wide
  CHECK(RotaryQueryWidth(p) == 8);
  p.rotary_dim = p.cos_sin_stride = 40;  // half = 20 is not
  CHECK(RotaryQueryWidth(p) == 1);
  p = llamaRotary();
  p.query = reinterpret_cast<char*>(g_query) + 2;  // rows off 16-byte alignment
  CHECK(RotaryQueryWidth(p) == 1);
  p = llamaRotary();
  p.query_stride[0] = 6148;  // every other row off
  CHECK(RotaryQueryWidth(p) == 1);
  p = llamaRotary();
  p.cos_sin_stride = 132;
  CHECK(RotaryQueryWidth(p) == 1);
  p = llamaRotary();
  p.cos_sin_cache = reinterpret_cast<char*>(g_table) + 8;
  CHECK(RotaryQueryWidth(p) == 1);
}

TEST_CASE("rotary query width: out of place needs query_out aligned and whole unrotated words") {
  ReshapeAndCacheParams p = llamaRotary();
  p.query_out = reinterpret_cast<char*>(g_out) + 4;
  p.query_out_stride[0] = 4096;
  p.query_out_stride[1] = 128;
  CHECK(RotaryQueryWidth(p) == 1);
  p.query_out = g_out;
  p.query_out_stride[0] = 4100;
  CHECK(RotaryQueryWidth(p) == 1);
  p.query_out_stride[0] = 4096;
  p.head_size = 132;  // E - rot = 4: the copy of the unrotated elements is not whole words
  p.query_stride[1] = p.query_out_stride[1] = 136;
  CHECK(RotaryQueryWidth(p) == 1);
  p.query_out = nullptr;  // in place nothing past rot is touched: eight wide again
  CHECK(RotaryQueryWidth(p) == 8);
}

}  // namespace
}  // namespace fxfuse::runtime
