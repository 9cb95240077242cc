// GPU test of the small-M FP8 GEMM's rotary + KV-cache epilogue (kernels/runtime/small_m_fp8_gemm.h):
// the q/k/v GEMM that rotates its own q and k rows and writes k and v into their cache slots
// must leave every byte the unfused chain leaves (the plain GEMM writing [M, (Hq + 2 Hk) E],
// then LaunchReshapeAndCache with rotary on views of it): the GEMM's output (q rotated in place,
// or raw with the rotated q in query_out; k and v raw), both caches (untouched slots included),
// for BF16 and F16, 16-bit and FP8 caches, F32 and 16-bit cos | sin tables, a bias, every K
// slice count, head sizes 16 to 256, a token without a slot (-1), one whose slot lies outside
// the cache and one whose position lies off the table. Both GEMMs split K the same way, so the
// sums agree bit for bit; a wrong tile-to-row mapping, a swapped pair, a lost rounding step or
// a misplaced cache row changes most bytes.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "kernels/reference/numerics.h"
#include "kernels/runtime/paged_attention.h"
#include "kernels/runtime/small_m_fp8_gemm.h"
#include "tests/kernels/gpu_test_util.h"

namespace fxfuse::runtime {
namespace {

using kernels::testing::DeviceBuffer;
using kernels::testing::NextSeed;
using kernels::testing::RandomFp8Bytes;
namespace ref = ::fxfuse::kernels::reference;

struct Case {
  int64_t M, heads_q, heads_kv, head_size, K;
  DType dtype = DType::BF16;
  DType cache_dtype = DType::BF16;  // or F8E4M3FN
  DType table_dtype = DType::BF16;  // or F32
  bool query_out = false;
  bool bias = false;
  int splits = 0;  // 0: the kernel's rule
};

// n values uniform in [-1, 1] as `dtype` (F32, BF16 or F16) bytes.
std::vector<uint8_t> randomValues(size_t n, DType dtype, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint8_t> bytes(n * (dtype == DType::F32 ? 4 : 2));
  for (size_t i = 0; i < n; ++i) {
    const float x = u(rng);
    if (dtype == DType::F32) {
      std::memcpy(bytes.data() + 4 * i, &x, 4);
    } else {
      const uint16_t b = ref::FloatToD16Bits(x, dtype);
      std::memcpy(bytes.data() + 2 * i, &b, 2);
    }
  }
  return bytes;
}

// The operands both forms share, on the device.
struct Operands {
  int64_t N, slots;
  DeviceBuffer x, w, scale_x, scale_w, k_scale, v_scale, bias, table, positions, slot_mapping;
  Operands(const Case& c, int64_t table_rows, int64_t num_blocks, int64_t block_size)
      : N((c.heads_q + 2 * c.heads_kv) * c.head_size),
        slots(num_blocks * block_size),
        x(static_cast<size_t>(c.M * c.K)),
        w(static_cast<size_t>(N * c.K)),
        scale_x(4),
        scale_w(4),
        k_scale(4),
        v_scale(4),
        bias(static_cast<size_t>(N * 2)),
        table(static_cast<size_t>(table_rows * c.head_size * (c.table_dtype == DType::F32 ? 4 : 2))),
        positions(static_cast<size_t>(c.M * 8)),
        slot_mapping(static_cast<size_t>(c.M * 8)) {}
};

// The chain's (or the fused GEMM's) results: the GEMM output, query_out and both caches.
struct Results {
  DeviceBuffer out, query_out, key_cache, value_cache;
  Results(const Case& c, int64_t N, int64_t slots)
      : out(static_cast<size_t>(c.M * N * 2)),
        query_out(static_cast<size_t>(c.M * c.heads_q * c.head_size * 2)),
        key_cache(static_cast<size_t>(slots * c.heads_kv * c.head_size * (c.cache_dtype == DType::F8E4M3FN ? 1 : 2))),
        value_cache(key_cache.bytes()) {
    out.Poison(), query_out.Poison(), key_cache.Poison(), value_cache.Poison();
  }
};

SmallMFp8GemmParams gemmParams(const Case& c, Operands& o, Results& r) {
  SmallMFp8GemmParams p;
  p.M = c.M, p.N = o.N, p.K = c.K;
  p.x = o.x.get(), p.x_row_stride = c.K;
  p.w = o.w.get(), p.w_row_stride = c.K;
  p.scale_x = static_cast<const float*>(o.scale_x.get()), p.scale_w = static_cast<const float*>(o.scale_w.get());
  if (c.bias) p.bias = o.bias.get(), p.bias_dtype = c.dtype;
  p.out = r.out.get(), p.out_row_stride = o.N, p.out_dtype = c.dtype;
  p.splits = c.splits;
  return p;
}

// rt.reshape_and_cache with rotary over the q, k and v column blocks of r.out.
ReshapeAndCacheParams cacheWrite(const Case& c, Operands& o, Results& r, int64_t table_rows, int64_t num_blocks,
                                 int64_t block_size) {
  ReshapeAndCacheParams w;
  const int64_t E = c.head_size;
  uint8_t* out = static_cast<uint8_t*>(r.out.get());
  w.dtype = c.dtype, w.cache_dtype = c.cache_dtype;
  w.query = out, w.key = out + c.heads_q * E * 2, w.value = out + (c.heads_q + c.heads_kv) * E * 2;
  for (int64_t* s : {w.query_stride, w.key_stride, w.value_stride}) s[0] = o.N, s[1] = E;
  if (c.query_out) {
    w.query_out = r.query_out.get();
    w.query_out_stride[0] = c.heads_q * E, w.query_out_stride[1] = E;
  }
  w.key_cache = r.key_cache.get(), w.value_cache = r.value_cache.get();
  w.slot_mapping = static_cast<const int64_t*>(o.slot_mapping.get());
  w.num_tokens = c.M, w.heads_q = c.heads_q, w.heads_kv = c.heads_kv, w.head_size = E;
  w.num_blocks = num_blocks, w.block_size = block_size;
  if (c.cache_dtype == DType::F8E4M3FN)
    w.k_scale = static_cast<const float*>(o.k_scale.get()), w.v_scale = static_cast<const float*>(o.v_scale.get());
  w.positions = static_cast<const int64_t*>(o.positions.get());
  w.cos_sin_cache = o.table.get(), w.cos_sin_dtype = c.table_dtype;
  w.cos_sin_rows = table_rows, w.cos_sin_stride = E, w.rotary_dim = E, w.neox = true;
  return w;
}

// Bytes of a and b that differ.
int64_t differing(const DeviceBuffer& a, const DeviceBuffer& b) {
  const std::vector<uint8_t> x = a.Download<uint8_t>(a.bytes()), y = b.Download<uint8_t>(b.bytes());
  int64_t n = 0;
  for (size_t i = 0; i < x.size(); ++i) n += x[i] != y[i];
  return n;
}

// Bytes of a buffer still 0xFF (the poison): what the step left unwritten (a written byte may
// be 0xFF too: never in an FP8 cache, one in 256 or so in a 16-bit one).
int64_t untouched(const DeviceBuffer& a) {
  int64_t n = 0;
  for (uint8_t b : a.Download<uint8_t>(a.bytes())) n += b == 0xFF;
  return n;
}

// 16-bit elements of a buffer still 0xFFFF (a NaN no finite GEMM output rounds to).
int64_t untouched16(const DeviceBuffer& a) {
  int64_t n = 0;
  for (uint16_t b : a.Download<uint16_t>(a.bytes() / 2)) n += b == 0xFFFF;
  return n;
}

void runCase(const Case& c) {
  const uint64_t seed = NextSeed();
  std::mt19937_64 rng(seed);
  const int64_t table_rows = 64, block_size = 16, num_blocks = 3;
  INFO("M " << c.M << " heads " << c.heads_q << "/" << c.heads_kv << " E " << c.head_size << " K " << c.K << " "
            << kernels::DTypeName(c.dtype) << " cache " << kernels::DTypeName(c.cache_dtype) << " table "
            << kernels::DTypeName(c.table_dtype) << " query_out " << c.query_out << " bias " << c.bias << " splits "
            << c.splits << " seed " << seed);
  Operands o(c, table_rows, num_blocks, block_size);
  o.x.Upload(RandomFp8Bytes(static_cast<size_t>(c.M * c.K), rng, 9));
  o.w.Upload(RandomFp8Bytes(static_cast<size_t>(o.N * c.K), rng, 7));
  o.scale_x.Upload(std::vector<float>{2.0f / std::sqrt(static_cast<float>(c.K))});
  o.scale_w.Upload(std::vector<float>{1.0f});
  o.k_scale.Upload(std::vector<float>{0.02f});
  o.v_scale.Upload(std::vector<float>{0.03f});
  o.bias.Upload(randomValues(static_cast<size_t>(o.N), c.dtype, rng));
  o.table.Upload(randomValues(static_cast<size_t>(table_rows * c.head_size), c.table_dtype, rng));
  // Distinct slots; token 0 has none (-1), token 1 (if any) one outside the cache; the last
  // token's position is off the table (left unrotated).
  std::vector<int64_t> slots(static_cast<size_t>(o.slots)), positions(static_cast<size_t>(c.M)), mapping;
  for (int64_t i = 0; i < o.slots; ++i) slots[static_cast<size_t>(i)] = i;
  std::shuffle(slots.begin(), slots.end(), rng);
  std::uniform_int_distribution<int64_t> position(0, table_rows - 1);
  for (int64_t t = 0; t < c.M; ++t) {
    mapping.push_back(t == 0 && c.M > 2 ? -1 : t == 1 && c.M > 3 ? o.slots : slots[static_cast<size_t>(t)]);
    positions[static_cast<size_t>(t)] = t + 1 == c.M && c.M > 4 ? table_rows : position(rng);
  }
  o.positions.Upload(positions);
  o.slot_mapping.Upload(mapping);

  Results chain(c, o.N, o.slots), fused(c, o.N, o.slots);
  const SmallMFp8GemmParams plain = gemmParams(c, o, chain);
  REQUIRE(SmallMFp8GemmUnsupported(plain) == nullptr);
  FXFUSE_CUDA_REQUIRE(LaunchSmallMFp8Gemm(plain, nullptr));
  FXFUSE_CUDA_REQUIRE(LaunchReshapeAndCache(cacheWrite(c, o, chain, table_rows, num_blocks, block_size), nullptr));

  const std::optional<SmallMFp8GemmParams> with_epilogue = SmallMFp8GemmWithRotaryCache(
      gemmParams(c, o, fused), cacheWrite(c, o, fused, table_rows, num_blocks, block_size));
  REQUIRE(with_epilogue.has_value());
  FXFUSE_CUDA_REQUIRE(LaunchSmallMFp8Gemm(*with_epilogue, nullptr));
  FXFUSE_CUDA_REQUIRE(cudaDeviceSynchronize());

  CHECK(differing(chain.out, fused.out) == 0);
  CHECK(differing(chain.query_out, fused.query_out) == 0);
  CHECK(differing(chain.key_cache, fused.key_cache) == 0);
  CHECK(differing(chain.value_cache, fused.value_cache) == 0);
  // The chain wrote what the test expects it to: every output element, and the cache rows of the
  // tokens with a slot inside the cache (others untouched).
  const int64_t cached = c.M - (c.M > 2) - (c.M > 3);
  const int64_t row_bytes = c.heads_kv * c.head_size * (c.cache_dtype == DType::F8E4M3FN ? 1 : 2);
  CHECK(untouched16(chain.out) == 0);
  if (c.query_out) CHECK(untouched16(chain.query_out) == 0);
  CHECK(untouched(chain.key_cache) >= (o.slots - cached) * row_bytes);
  CHECK(untouched(chain.key_cache) < (o.slots - cached) * row_bytes + cached * row_bytes / 16);
}

TEST_CASE("rotary epilogue: the chain's bytes, Llama-3.1-8B q/k/v", "[gpu][gemm]") {
  for (int64_t M : {1, 8, 16}) runCase({M, 32, 8, 128, 4096});
  runCase({5, 32, 8, 128, 4096, DType::BF16, DType::F8E4M3FN});
  runCase({8, 32, 8, 128, 4096, DType::BF16, DType::BF16, DType::BF16, true});
}

TEST_CASE("rotary epilogue: head sizes, dtypes, tables, bias, K slices", "[gpu][gemm]") {
  for (int64_t M : {1, 3, 9, 16}) runCase({M, 4, 2, 64, 256, DType::F16, DType::F8E4M3FN, DType::F32, true});
  runCase({6, 2, 1, 16, 128});                                      // one tile per head
  runCase({7, 8, 1, 256, 512, DType::BF16, DType::BF16, DType::F32});
  runCase({12, 4, 2, 64, 256, DType::BF16, DType::BF16, DType::BF16, false, true});  // Qwen2's q/k/v bias
  for (int splits : {1, 2, 4, 8}) runCase({9, 4, 2, 64, 1024, DType::BF16, DType::BF16, DType::BF16, false, false, splits});
}

}  // namespace
}  // namespace fxfuse::runtime
