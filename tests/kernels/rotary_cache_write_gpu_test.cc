// GPU tests of the cache write with the rotary folded in (kernels/runtime/cache_write.cu,
// ReshapeAndCacheParams with `positions`) against a CPU reference with the generated rotary's
// rounding (cos and sin rounded to the dtype, each product and the fp32 sum rounded): the
// query rotated in place and both caches must be bit exact, the key tensor untouched. q, k and
// v are views of one fused qkv row as in a decode layer. Cases: neox and GPT-J pairs, full and
// partial rotary, bf16/f16 and f32 tables, 16-bit and FP8 caches, a padding token (slot -1), a
// position off the table (left unrotated), the rotation-only form (no cache), in place and out
// of place (a dense plan's rotary: the query only read, every element of query_out written),
// more tokens than one grid row. Each case states which query width (RotaryQueryWidth: 8 pairs
// per thread or 1) it covers, so both forms stay tested.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/reference/numerics.h"
#include "kernels/reference/reference_kernels.h"
#include "kernels/runtime/paged_attention.h"
#include "tests/kernels/gpu_test_util.h"

namespace fxfuse::runtime {
namespace {

using kernels::testing::DeviceBuffer;
using kernels::testing::NextSeed;
namespace ref = kernels::reference;

struct RotaryCase {
  const char* name;
  DType dtype = DType::BF16;
  DType table_dtype = DType::BF16;
  bool fp8_cache = false, neox = true, with_cache = true;
  int64_t tokens = 5, heads_q = 8, heads_kv = 2, head_size = 128, rotary_dim = 128;
  int64_t positions = 4096;  // table rows
  int expect_width = 1;      // RotaryQueryWidth of the case's params
  bool out_of_place = false;  // query_out set (rows of heads_q * E + 8 elements)
  int64_t row_pad = 8;       // qkv's row is Q + 2K + row_pad elements
};

float d16(uint16_t bits, DType dt) { return ref::D16BitsToFloat(bits, dt); }
float round16(float x, DType dt) { return ref::Round16(x, dt); }

// Rotates head `h` of token `t` of the host row-major [T, W] buffer in place: the reference.
void rotateHead(const RotaryCase& c, std::vector<uint16_t>& qkv, int64_t W, int64_t t, int64_t col,
                const std::vector<float>& table, int64_t pos) {
  const int64_t half = c.rotary_dim / 2;
  if (pos < 0 || pos >= c.positions) return;
  for (int64_t k = 0; k < half; ++k) {
    const float cs = round16(table[static_cast<size_t>(pos * c.rotary_dim + k)], c.dtype);
    const float sn = round16(table[static_cast<size_t>(pos * c.rotary_dim + half + k)], c.dtype);
    const int64_t e1 = c.neox ? k : 2 * k, e2 = c.neox ? k + half : 2 * k + 1;
    uint16_t& b1 = qkv[static_cast<size_t>(t * W + col + e1)];
    uint16_t& b2 = qkv[static_cast<size_t>(t * W + col + e2)];
    const float x1 = d16(b1, c.dtype), x2 = d16(b2, c.dtype);
    const float o1 = round16(round16(x1 * cs, c.dtype) - round16(x2 * sn, c.dtype), c.dtype);
    const float o2 = round16(round16(x2 * cs, c.dtype) + round16(x1 * sn, c.dtype), c.dtype);
    b1 = ref::FloatToD16Bits(o1, c.dtype);
    b2 = ref::FloatToD16Bits(o2, c.dtype);
  }
}

// Cache row elements of token t from the (rotated) host qkv at column `col`.
void writeCacheRow(const RotaryCase& c, const std::vector<uint16_t>& qkv, int64_t W, int64_t t, int64_t col,
                   int64_t slot, float scale, std::vector<uint16_t>& c16, std::vector<uint8_t>& c8) {
  const int64_t row = c.heads_kv * c.head_size;
  for (int64_t i = 0; i < row; ++i) {
    const size_t dst = static_cast<size_t>(slot * row + i);
    const uint16_t x = qkv[static_cast<size_t>(t * W + col + i)];
    if (c.fp8_cache) c8[dst] = ref::QuantizeToE4m3(d16(x, c.dtype), scale, /*divide=*/true);
    else c16[dst] = x;
  }
}

// Each case runs with the metadata read after the kernel's grid wait and, as where no step of
// the plan writes it, before (ReshapeAndCacheParams::metadata_read_only): the same bytes.
void runRotaryCase(const RotaryCase& c) {
  const bool metadata_read_only = GENERATE(false, true);
  const uint64_t seed = NextSeed();
  INFO("case " << c.name << ", seed " << seed << ", metadata read before the wait: " << metadata_read_only);
  std::mt19937_64 rng(seed);
  const int64_t T = c.tokens, E = c.head_size, Q = c.heads_q * E, K = c.heads_kv * E, W = Q + 2 * K + c.row_pad;
  const int64_t out_row = Q + 8;  // query_out's row stride (out of place)
  const int64_t block_size = 16, num_blocks = (T + block_size - 1) / block_size + 2;
  const size_t cache_n = static_cast<size_t>(num_blocks * block_size * K);
  std::vector<uint16_t> qkv = kernels::testing::RandomD16(static_cast<size_t>(T * W), c.dtype, 2.0f, rng);
  std::vector<float> table(static_cast<size_t>(c.positions * c.rotary_dim));
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (float& x : table) x = c.table_dtype == DType::F32 ? unit(rng) : round16(unit(rng), c.table_dtype);
  std::vector<int64_t> pos(static_cast<size_t>(T)), slots(static_cast<size_t>(T));
  std::vector<int64_t> free_slots(static_cast<size_t>(num_blocks * block_size));
  for (size_t i = 0; i < free_slots.size(); ++i) free_slots[i] = static_cast<int64_t>(i);
  std::shuffle(free_slots.begin(), free_slots.end(), rng);
  for (int64_t t = 0; t < T; ++t) {
    pos[static_cast<size_t>(t)] = static_cast<int64_t>(rng() % static_cast<uint64_t>(c.positions));
    slots[static_cast<size_t>(t)] = free_slots[static_cast<size_t>(t)];
  }
  if (T > 2) pos[1] = c.positions + 3;  // off the table: unrotated
  if (T > 3) slots[2] = -1;             // padding: no cache write
  std::vector<uint16_t> k16 = kernels::testing::RandomD16(cache_n, c.dtype, 1.0f, rng), v16 = k16;
  std::vector<uint8_t> k8(cache_n, 0x11), v8(cache_n, 0x22);
  const float k_scale = 0.02f, v_scale = 0.03f;

  DeviceBuffer dqkv(qkv.size() * 2), dtable(table.size() * 4), dpos(pos.size() * 8), dslots(slots.size() * 8);
  DeviceBuffer dkc(cache_n * 2), dvc(cache_n * 2), dscales(2 * sizeof(float));
  const std::vector<uint16_t> out_init(static_cast<size_t>(T * out_row), 0x7fc1);  // NaN: unwritten shows
  DeviceBuffer dout(out_init.size() * 2);
  dout.Upload(out_init);
  dqkv.Upload(qkv);
  if (c.table_dtype == DType::F32) {
    dtable.Upload(table);
  } else {
    std::vector<uint16_t> bits(table.size());
    for (size_t i = 0; i < table.size(); ++i) bits[i] = ref::FloatToD16Bits(table[i], c.table_dtype);
    dtable.Upload(bits);
  }
  dpos.Upload(pos);
  dslots.Upload(slots);
  if (c.fp8_cache) dkc.Upload(k8), dvc.Upload(v8);
  else dkc.Upload(k16), dvc.Upload(v16);
  dscales.Upload(std::vector<float>{k_scale, v_scale});

  ReshapeAndCacheParams p;
  p.dtype = c.dtype;
  p.cache_dtype = c.fp8_cache ? DType::F8E4M3FN : c.dtype;
  p.num_tokens = T;
  p.head_size = E;
  p.block_size = block_size;
  uint16_t* base = static_cast<uint16_t*>(dqkv.get());
  if (c.with_cache) {
    p.key = base + Q;
    p.value = base + Q + K;
    p.key_stride[0] = p.value_stride[0] = W;
    p.key_stride[1] = p.value_stride[1] = E;
    p.key_cache = dkc.get();
    p.value_cache = dvc.get();
    p.slot_mapping = static_cast<const int64_t*>(dslots.get());
    p.heads_kv = c.heads_kv;
    p.num_blocks = num_blocks;
    p.k_scale = static_cast<const float*>(dscales.get());
    p.v_scale = p.k_scale + 1;
  }
  p.query = base;
  p.query_stride[0] = W;
  p.query_stride[1] = E;
  p.heads_q = c.heads_q;
  p.positions = static_cast<const int64_t*>(dpos.get());
  p.cos_sin_cache = dtable.get();
  p.cos_sin_dtype = c.table_dtype;
  p.cos_sin_rows = c.positions;
  p.cos_sin_stride = c.rotary_dim;
  p.rotary_dim = c.rotary_dim;
  p.neox = c.neox;
  if (c.out_of_place) {
    p.query_out = dout.get();
    p.query_out_stride[0] = out_row;
    p.query_out_stride[1] = E;
  }
  p.metadata_read_only = metadata_read_only;
  REQUIRE(RotaryQueryWidth(p) == c.expect_width);
  FXFUSE_CUDA_REQUIRE(LaunchReshapeAndCache(p, nullptr));
  FXFUSE_CUDA_REQUIRE(cudaDeviceSynchronize());

  // The reference: the query rotated in place; a rotated copy of the key into the cache.
  std::vector<uint16_t> want = qkv, rotated_keys = qkv;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < c.heads_q; ++h) rotateHead(c, want, W, t, h * E, table, pos[static_cast<size_t>(t)]);
    for (int64_t h = 0; h < c.heads_kv; ++h)
      rotateHead(c, rotated_keys, W, t, Q + h * E, table, pos[static_cast<size_t>(t)]);
    const int64_t slot = slots[static_cast<size_t>(t)];
    if (!c.with_cache || slot < 0) continue;
    writeCacheRow(c, rotated_keys, W, t, Q, slot, k_scale, k16, k8);
    writeCacheRow(c, qkv, W, t, Q + K, slot, v_scale, v16, v8);
  }
  if (c.out_of_place) {
    std::vector<uint16_t> want_out = out_init;  // the rotated query's rows; the row padding untouched
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < Q; ++i) want_out[static_cast<size_t>(t * out_row + i)] = want[static_cast<size_t>(t * W + i)];
    CHECK(dout.Download<uint16_t>(want_out.size()) == want_out);
    CHECK(dqkv.Download<uint16_t>(qkv.size()) == qkv);  // only read
  } else {
    CHECK(dqkv.Download<uint16_t>(qkv.size()) == want);  // q rotated, k, v and the tail untouched
  }
  if (c.fp8_cache) {
    CHECK(dkc.Download<uint8_t>(cache_n) == k8);
    CHECK(dvc.Download<uint8_t>(cache_n) == v8);
  } else {
    CHECK(dkc.Download<uint16_t>(cache_n) == k16);
    CHECK(dvc.Download<uint16_t>(cache_n) == v16);
  }
}

TEST_CASE("rotary cache write: Llama decode heads, neox, full rotary", "[gpu][paged_attention]") {
  runRotaryCase({"llama", DType::BF16, DType::BF16, false, true, true, 7, 32, 8, 128, 128, 4096, 8});
}

TEST_CASE("rotary cache write: GPT-J pairs, partial rotary, f32 table, fp16", "[gpu][paged_attention]") {
  runRotaryCase({"gptj-partial", DType::F16, DType::F32, false, false, true, 6, 4, 2, 64, 32, 4096, 1});
}

TEST_CASE("rotary cache write: FP8 cache, neox partial rotary", "[gpu][paged_attention]") {
  runRotaryCase({"fp8", DType::BF16, DType::F32, true, true, true, 9, 8, 1, 128, 64, 4096, 1});
}

TEST_CASE("rotary cache write: rotation only (no cache operands)", "[gpu][paged_attention]") {
  runRotaryCase({"rotate-only", DType::BF16, DType::BF16, false, true, false, 5, 12, 0, 64, 64, 4096, 8});
}

TEST_CASE("rotary cache write: rows not 16-byte aligned take the one-pair form", "[gpu][paged_attention]") {
  runRotaryCase({"rotate-only-odd-rows", DType::BF16, DType::BF16, false, true, false, 5, 12, 0, 64, 64, 4096, 1,
                 false, 3});
}

TEST_CASE("rotary out of place: a dense plan's Llama query", "[gpu][paged_attention]") {
  runRotaryCase({"dense", DType::BF16, DType::BF16, false, true, false, 9, 32, 0, 128, 128, 4096, 8, true});
}

TEST_CASE("rotary out of place: partial rotary copies the rest, fp16, eight wide", "[gpu][paged_attention]") {
  runRotaryCase({"dense-partial-f16", DType::F16, DType::F16, false, true, false, 6, 8, 0, 128, 64, 4096, 8, true});
}

TEST_CASE("rotary out of place: an f32 table takes the one-pair form", "[gpu][paged_attention]") {
  runRotaryCase({"dense-f32-table", DType::BF16, DType::F32, false, true, false, 6, 8, 0, 128, 64, 4096, 1, true});
}

TEST_CASE("rotary cache write: more tokens than one grid row of blocks", "[gpu][paged_attention]") {
  runRotaryCase({"prefill", DType::BF16, DType::BF16, false, true, true, 70000, 2, 1, 64, 64, 4096, 8});
}

TEST_CASE("rotary cache write: bad rotary params are refused", "[gpu][paged_attention]") {
  ReshapeAndCacheParams p;
  p.heads_kv = 0;
  p.head_size = 64;
  p.block_size = 1;
  p.num_tokens = 1;
  p.heads_q = 1;
  int64_t dummy = 0;
  p.positions = &dummy;
  p.query = &dummy;
  p.cos_sin_cache = &dummy;
  p.cos_sin_stride = p.rotary_dim = 65;  // odd
  CHECK(LaunchReshapeAndCache(p, nullptr) == cudaErrorInvalidValue);
  p.cos_sin_stride = p.rotary_dim = 128;  // past the head
  CHECK(LaunchReshapeAndCache(p, nullptr) == cudaErrorInvalidValue);
  p.cos_sin_stride = p.rotary_dim = 64;
  p.query = nullptr;
  CHECK(LaunchReshapeAndCache(p, nullptr) == cudaErrorInvalidValue);
  cudaGetLastError();
}

}  // namespace
}  // namespace fxfuse::runtime
