// The host-side checks of the small-M FP8 GEMM (kernels/runtime/small_m_fp8_gemm.h), on the CPU:
// what the kernel takes and what it refuses (before any CUDA call, so no GPU is needed).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <vector>

#include "kernels/runtime/small_m_fp8_gemm.h"

namespace fxfuse::runtime {
namespace {

alignas(16) uint8_t storage[64];
const float scale = 1.0f;

SmallMFp8GemmParams decode(int64_t M, int64_t N, int64_t K) {
  SmallMFp8GemmParams p;
  p.M = M, p.N = N, p.K = K;
  p.x = storage, p.x_row_stride = K;
  p.w = storage, p.w_row_stride = K;
  p.scale_x = &scale, p.scale_w = &scale;
  p.out = storage, p.out_row_stride = N;
  return p;
}

TEST_CASE("small-M FP8 GEMM takes decode shapes", "[gemm]") {
  CHECK(SmallMFp8GemmUnsupported(decode(1, 6144, 4096)) == nullptr);
  CHECK(SmallMFp8GemmUnsupported(decode(16, 4096, 14336)) == nullptr);
  CHECK(SmallMFp8GemmUnsupported(decode(7, 1, 16)) == nullptr);
  CHECK(SmallMFp8GemmUnsupported(decode(17, 6144, 4096)) == nullptr);  // the wgmma kernel's rows
  CHECK(SmallMFp8GemmUnsupported(decode(64, 28672, 4096)) == nullptr);
}

TEST_CASE("small-M FP8 GEMM refuses what it cannot compute", "[gemm]") {
  CHECK(SmallMFp8GemmUnsupported(decode(0, 16, 64)) != nullptr);
  CHECK(SmallMFp8GemmUnsupported(decode(65, 16, 64)) != nullptr);  // past the wgmma kernel's 64 tokens
  CHECK(SmallMFp8GemmUnsupported(decode(8, 16, 40)) != nullptr);   // K not a multiple of 16
  CHECK(SmallMFp8GemmUnsupported(decode(8, 0, 64)) != nullptr);
  SmallMFp8GemmParams p = decode(8, 16, 64);
  p.x = storage + 8;  // misaligned activations
  CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
  p = decode(8, 16, 64);
  p.w_row_stride = 72;  // rows not 16-byte aligned
  CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
  p = decode(8, 16, 64);
  p.out_row_stride = 15;
  CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
  p = decode(8, 16, 64);
  p.out_dtype = DType::F8E4M3FN;
  CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
  CHECK(SmallMFp8GemmUnsupported(decode(8, int64_t{1} << 31, 64)) != nullptr);  // tensor-map coordinates are int32
  CHECK(SmallMFp8GemmUnsupported(decode(8, 16, int64_t{1} << 31)) != nullptr);
  CHECK(SmallMFp8GemmUnsupported(decode(8, (int64_t{1} << 31) - 1, 64)) == nullptr);
  for (const int bytes : {-1, 0, 64, 128, 256}) {
    p = decode(8, 16, 64);
    p.l2_prefetch_bytes = bytes;
    CHECK(SmallMFp8GemmUnsupported(p) == nullptr);
  }
  for (const int bytes : {-2, 32, 512}) {  // not an L2 prefetch size of cp.async
    p = decode(8, 16, 64);
    p.l2_prefetch_bytes = bytes;
    CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
  }
  p = decode(8, 16, 64);
  p.scale_w = nullptr;
  CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
  CHECK(LaunchSmallMFp8Gemm(p, nullptr) == cudaErrorInvalidValue);  // refused before any CUDA call
}

// The deep ring is one token tile's: 2 and 4 stages up to 8 rows, only the default above;
// the rule (no environment set in the test) keeps the default.
TEST_CASE("small-M FP8 GEMM: the ring stages it takes", "[gemm]") {
  for (const int64_t M : {1, 8}) {
    SmallMFp8GemmParams p = decode(M, 16, 64);
    CHECK(SmallMFp8GemmRingStages(p) == kSmallMFp8RingStages);
    for (const int stages : {kSmallMFp8RingStages, kSmallMFp8DeepRingStages}) {
      p.ring_stages = stages;
      CHECK(SmallMFp8GemmUnsupported(p) == nullptr);
      CHECK(SmallMFp8GemmRingStages(p) == stages);
    }
    for (const int stages : {-1, 1, 3, 8}) {
      p.ring_stages = stages;
      CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
    }
  }
  SmallMFp8GemmParams p = decode(9, 16, 64);  // two token tiles
  p.ring_stages = kSmallMFp8DeepRingStages;
  CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
  CHECK(SmallMFp8GemmRingStages(p) == kSmallMFp8RingStages);
  p.ring_stages = kSmallMFp8RingStages;
  CHECK(SmallMFp8GemmUnsupported(p) == nullptr);
}

SmallMFp8GemmParams gatedSilu(int64_t M, int64_t d, int64_t K) {
  SmallMFp8GemmParams p = decode(M, 2 * d, K);
  p.out = nullptr;  // the epilogue writes its own output only
  p.gated_silu.out = storage, p.gated_silu.out_row_stride = d, p.gated_silu.scale = &scale;
  return p;
}

TEST_CASE("small-M FP8 GEMM gated-SiLU epilogue: what it takes and refuses", "[gemm]") {
  CHECK(SmallMFp8GemmUnsupported(gatedSilu(1, 14336, 4096)) == nullptr);  // Llama-3.1-8B gate/up
  CHECK(SmallMFp8GemmUnsupported(gatedSilu(16, 28672, 8192)) == nullptr);
  CHECK(SmallMFp8GemmUnsupported(gatedSilu(17, 14336, 4096)) == nullptr);  // the wgmma kernel's rows
  CHECK(SmallMFp8GemmUnsupported(gatedSilu(64, 28672, 8192)) == nullptr);
  CHECK(SmallMFp8GemmUnsupported(gatedSilu(4, 24, 256)) != nullptr);       // d not whole 16-row tiles
  CHECK(SmallMFp8GemmUnsupported(gatedSilu(16, 48, 256)) == nullptr);      // the mma.sync kernel's 16-row tiles
  CHECK(SmallMFp8GemmUnsupported(gatedSilu(17, 48, 256)) != nullptr);      // the wgmma kernel's: d of 32-row tiles
  CHECK(SmallMFp8GemmUnsupported(gatedSilu(64, 64, 256)) == nullptr);
  SmallMFp8GemmParams p = gatedSilu(4, 64, 256);
  p.out_dtype = DType::F32;  // the chain's GEMM output is what SiLU reads: BF16 or F16
  CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
  p = gatedSilu(4, 64, 256);
  p.bias = storage;
  CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
  p = gatedSilu(4, 64, 256);
  p.gated_silu.scale = nullptr;
  CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
  p = gatedSilu(4, 64, 256);
  p.gated_silu.out_row_stride = 63;
  CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
  p = gatedSilu(4, 64, 256);
  p.gated_silu.out = nullptr;  // no epilogue, and no output either
  CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
}

TEST_CASE("small-M FP8 GEMM: the K splits the runtime may time", "[gemm]") {
  using V = std::vector<int>;
  // mma.sync kernel (M <= 16): 1, 2, 4, 8 warps per tile, at most one per 128-byte K step.
  CHECK(SmallMFp8GemmSplitChoices(decode(1, 6144, 4096)) == V{1, 2, 4, 8});
  CHECK(SmallMFp8GemmSplitChoices(decode(16, 6144, 384)) == V{1, 2});  // 3 steps
  CHECK(SmallMFp8GemmSplitChoices(decode(8, 16, 16)) == V{1});
  // The gated-SiLU epilogue: a block holds gate/up pairs, so at most 4.
  CHECK(SmallMFp8GemmSplitChoices(gatedSilu(4, 64, 4096)) == V{1, 2, 4});
  // wgmma kernel (M 17..64): clusters of 1, 2, 4 CTAs with two K steps each.
  CHECK(SmallMFp8GemmSplitChoices(decode(64, 28672, 4096)) == V{1, 2, 4});
  CHECK(SmallMFp8GemmSplitChoices(decode(17, 64, 512)) == V{1, 2});  // 4 steps
  CHECK(SmallMFp8GemmSplitChoices(decode(33, 64, 384)) == V{1});     // 3 steps
  CHECK(SmallMFp8GemmWgmmaSplitChoices(1024) == V{1, 2, 4});
  // Every choice is taken, anything else refused before any CUDA call.
  for (const SmallMFp8GemmParams& base : {decode(1, 6144, 4096), decode(64, 28672, 4096), gatedSilu(4, 64, 4096)})
    for (int s : SmallMFp8GemmSplitChoices(base)) {
      SmallMFp8GemmParams p = base;
      p.splits = s;
      CHECK(SmallMFp8GemmUnsupported(p) == nullptr);
    }
  SmallMFp8GemmParams p = decode(64, 28672, 4096);
  for (int s : {3, 8, -1}) {
    p.splits = s;
    CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
    CHECK(LaunchSmallMFp8Gemm(p, nullptr) == cudaErrorInvalidValue);
    CHECK(LaunchSmallMFp8GemmWgmma(p, nullptr) == cudaErrorInvalidValue);
  }
  p = gatedSilu(4, 64, 4096);
  p.splits = 8;  // the plain kernel takes 8, the gated one does not
  CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
  p = decode(8, 16, 256);
  p.splits = 4;  // 2 K steps: at most 2 slices
  CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
}

TEST_CASE("small-M FP8 GEMM (wgmma): the tile heights and configurations the runtime may time", "[gemm]") {
  using V = std::vector<int>;
  REQUIRE(std::getenv("FXFUSE_WGMMA_TILE_ROWS") == nullptr);  // the pin is read once per process
  CHECK(SmallMFp8GemmWgmmaTileChoices(decode(64, 28672, 4096)) == V{64, 128});
  CHECK(SmallMFp8GemmWgmmaTileChoices(gatedSilu(32, 14336, 4096)) == V{64, 128});  // d = 224 x 64
  CHECK(SmallMFp8GemmWgmmaTileChoices(gatedSilu(32, 96, 512)) == V{64});           // d = 3 x 32
  CHECK(SmallMFp8GemmWgmmaTileRows(decode(64, 28672, 4096)) == kSmallMFp8WgmmaTileRows);  // the rule
  SmallMFp8GemmParams p = decode(64, 28672, 4096);
  p.wgmma_tile_rows = 128;
  CHECK(SmallMFp8GemmWgmmaTileRows(p) == 128);
  CHECK(SmallMFp8GemmUnsupported(p) == nullptr);
  for (int rows : {32, 96, 256, -64}) {
    p.wgmma_tile_rows = rows;
    CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
    CHECK(LaunchSmallMFp8Gemm(p, nullptr) == cudaErrorInvalidValue);
    CHECK(LaunchSmallMFp8GemmWgmma(p, nullptr) == cudaErrorInvalidValue);
  }
  p = gatedSilu(32, 96, 512);
  p.wgmma_tile_rows = 128;  // 96 gate rows are not whole halves of 128-row tiles
  CHECK(SmallMFp8GemmUnsupported(p) != nullptr);
  CHECK(LaunchSmallMFp8GemmWgmma(p, nullptr) == cudaErrorInvalidValue);
  // Every (tile height, split) above 16 rows, the splits alone at 16 rows and below; each taken.
  const std::vector<SmallMFp8GemmParams> wide = SmallMFp8GemmConfigurations(decode(64, 28672, 4096));
  REQUIRE(wide.size() == 6);
  CHECK(wide[0].wgmma_tile_rows == 64);
  CHECK(wide[0].splits == 1);
  CHECK(wide[5].wgmma_tile_rows == 128);
  CHECK(wide[5].splits == 4);
  CHECK(SmallMFp8GemmConfigurationName(wide[5]) == "128-row tiles, 4 K slices");
  for (const SmallMFp8GemmParams& c : wide) CHECK(SmallMFp8GemmUnsupported(c) == nullptr);
  const std::vector<SmallMFp8GemmParams> narrow = SmallMFp8GemmConfigurations(decode(8, 4096, 4096));
  REQUIRE(narrow.size() == 4);
  CHECK(narrow[3].wgmma_tile_rows == 0);
  CHECK(SmallMFp8GemmConfigurationName(narrow[3]) == "8 K slices");
  CHECK(SmallMFp8GemmConfigurations(gatedSilu(32, 96, 512)).size() == 2);  // 64-row tiles, 1 or 2 slices
}

TEST_CASE("small-M FP8 GEMM splits K to fill one wave of blocks", "[gemm]") {
  const int64_t h200 = 132 * 3;  // multiprocessors x blocks of the kernel per multiprocessor
  // Llama-3.1-8B: qkv, o and down fit one wave with 8 slices; gate/up (1792 tiles) only with 1.
  CHECK(SmallMFp8GemmSplits(6144, 4096, h200) == 8);
  CHECK(SmallMFp8GemmSplits(4096, 4096, h200) == 8);
  CHECK(SmallMFp8GemmSplits(4096, 14336, h200) == 8);
  CHECK(SmallMFp8GemmSplits(28672, 4096, h200) == 1);
  // Llama-3.1-70B: qkv (640 tiles) and o fit one wave with 4; gate/up (3584 tiles) never does:
  // 8 slices in 10 waves fill them as well as 4 in 5 (90 %, against 57 % and 75 %); ties go to more.
  CHECK(SmallMFp8GemmSplits(10240, 8192, h200) == 4);
  CHECK(SmallMFp8GemmSplits(8192, 8192, h200) == 4);
  CHECK(SmallMFp8GemmSplits(57344, 8192, h200) == 8);
  // At most one slice per 128-byte step of K, and at least one slice.
  CHECK(SmallMFp8GemmSplits(16, 256, h200) == 2);
  CHECK(SmallMFp8GemmSplits(16, 16, h200) == 1);
  CHECK(SmallMFp8GemmSplits(16, 4096, 0) == 8);
}

TEST_CASE("small-M FP8 GEMM (wgmma) splits K across a cluster to fill one wave", "[gemm]") {
  const int64_t h200 = 132 * 3;  // multiprocessors x CTAs per multiprocessor (64-token CTAs)
  // Llama-3.1-8B, tiles of 64 weight rows: qkv (96 tiles), o and down (64) fit one wave with 4
  // slices; gate/up (448 tiles) does not fit with 1.
  CHECK(SmallMFp8GemmWgmmaSplits(6144, 4096, h200) == 4);
  CHECK(SmallMFp8GemmWgmmaSplits(4096, 4096, h200) == 4);
  CHECK(SmallMFp8GemmWgmmaSplits(4096, 14336, h200) == 4);
  CHECK(SmallMFp8GemmWgmmaSplits(28672, 4096, h200) == 1);
  // Llama-3.1-70B: qkv (160 tiles), o and down (128) with 2; gate/up (896 tiles) with 1.
  CHECK(SmallMFp8GemmWgmmaSplits(10240, 8192, h200) == 2);
  CHECK(SmallMFp8GemmWgmmaSplits(8192, 28672, h200) == 2);
  CHECK(SmallMFp8GemmWgmmaSplits(57344, 8192, h200) == 1);
  // Every slice keeps at least two 128-byte K steps; a cluster has at most 4 CTAs.
  CHECK(SmallMFp8GemmWgmmaSplits(64, 256, h200) == 1);
  CHECK(SmallMFp8GemmWgmmaSplits(64, 512, h200) == 2);
  CHECK(SmallMFp8GemmWgmmaSplits(64, 1 << 20, h200) == 4);
  CHECK(SmallMFp8GemmWgmmaSplits(64, 4096, 0) == 1);
  // Tiles of 128 rows, two CTAs per multiprocessor: 8B qkv (48 tiles), o and down (32) with 4,
  // gate/up (224) with 1; 70B o and down (64) with 4, qkv (80) with 2.
  const int64_t h200_wide = 132 * 2;
  CHECK(SmallMFp8GemmWgmmaSplits(6144, 4096, h200_wide, 128) == 4);
  CHECK(SmallMFp8GemmWgmmaSplits(4096, 14336, h200_wide, 128) == 4);
  CHECK(SmallMFp8GemmWgmmaSplits(28672, 4096, h200_wide, 128) == 1);
  CHECK(SmallMFp8GemmWgmmaSplits(8192, 28672, h200_wide, 128) == 4);
  CHECK(SmallMFp8GemmWgmmaSplits(10240, 8192, h200_wide, 128) == 2);
}

}  // namespace
}  // namespace fxfuse::runtime

namespace fxfuse::runtime {
namespace {

// The Llama-3.1-8B q/k/v GEMM at M tokens and the rotary cache write on views of its output.
struct QkvPair {
  std::vector<uint8_t> out = std::vector<uint8_t>(16 * 6144 * 2);
  alignas(16) int64_t positions[16] = {}, slots[16] = {};
  alignas(16) uint8_t table[64] = {}, cache[64] = {};
  SmallMFp8GemmParams gemm;
  ReshapeAndCacheParams write;
  explicit QkvPair(int64_t M) {
    gemm = decode(M, 6144, 4096);
    gemm.out = out.data();
    uint8_t* o = out.data();
    write.query = o, write.key = o + 32 * 128 * 2, write.value = o + 40 * 128 * 2;
    for (int64_t* s : {write.query_stride, write.key_stride, write.value_stride}) s[0] = 6144, s[1] = 128;
    write.key_cache = cache, write.value_cache = cache;
    write.slot_mapping = slots, write.positions = positions;
    write.num_tokens = M, write.heads_q = 32, write.heads_kv = 8, write.head_size = 128;
    write.num_blocks = 4, write.block_size = 16;
    write.cos_sin_cache = table, write.cos_sin_rows = 1, write.cos_sin_stride = 128, write.rotary_dim = 128;
  }
  bool fuses() const { return SmallMFp8GemmWithRotaryCache(gemm, write).has_value(); }
};

TEST_CASE("small-M FP8 GEMM: the rotary cache write on its q, k and v columns becomes its epilogue", "[gemm]") {
  for (int64_t M : {1, 8, 16}) CHECK(QkvPair(M).fuses());
  QkvPair f16(4);
  f16.gemm.out_dtype = f16.write.dtype = f16.write.cache_dtype = DType::F16;
  CHECK(f16.fuses());
  QkvPair fp8(4);
  fp8.write.cache_dtype = DType::F8E4M3FN;
  CHECK(!fp8.fuses());  // no scales
  fp8.write.k_scale = fp8.write.v_scale = &scale;
  CHECK(fp8.fuses());
  const QkvPair two(2);
  const std::optional<SmallMFp8GemmParams> fused = SmallMFp8GemmWithRotaryCache(two.gemm, two.write);
  REQUIRE(fused.has_value());
  CHECK(fused->rotary.cache.positions == two.positions);
  CHECK(fused->out == two.gemm.out);  // the GEMM still writes its rows
}

// The rotary epilogue's tile rows: every row of the heads exactly once, and rows r, r + 8 of a
// tile the two elements of one neox pair (same head, first half and E/2 on).
TEST_CASE("small-M FP8 GEMM: the rotary epilogue's tiles hold whole rotary pairs", "[gemm]") {
  for (const int64_t head_size : {16, 64, 128, 256}) {
    const int64_t heads = 5, rows = heads * head_size;
    std::vector<int> seen(static_cast<size_t>(rows), 0);
    for (int64_t tile = 0; tile < rows / 16; ++tile)
      for (int r = 0; r < 16; ++r) {
        const int64_t n = SmallMFp8RotaryWeightRow(head_size, tile, r);
        REQUIRE(n >= 0);
        REQUIRE(n < rows);
        ++seen[static_cast<size_t>(n)];
        if (r >= 8) continue;
        const int64_t partner = SmallMFp8RotaryWeightRow(head_size, tile, r + 8);
        CHECK(n % head_size < head_size / 2);
        CHECK(partner == n + head_size / 2);
      }
    CHECK(std::count(seen.begin(), seen.end(), 1) == rows);
  }
}

TEST_CASE("small-M FP8 GEMM: the rotary epilogue refuses other layouts and what the kernel cannot do", "[gemm]") {
  auto refuses = [](auto&& change) {
    QkvPair q(4);
    change(q);
    return !q.fuses();
  };
  CHECK(refuses([](QkvPair& q) { q.write.key = q.out.data() + 33 * 128 * 2; }));  // k not after the q heads
  CHECK(refuses([](QkvPair& q) { q.write.value = q.out.data() + 41 * 128 * 2; }));
  CHECK(refuses([](QkvPair& q) { q.write.query = q.out.data() + 2; }));
  CHECK(refuses([](QkvPair& q) { q.write.key_stride[0] = 6400; }));  // rows of another tensor
  CHECK(refuses([](QkvPair& q) { q.write.query_stride[1] = 64; }));
  CHECK(refuses([](QkvPair& q) { q.write.positions = nullptr; }));    // a plain cache write
  CHECK(refuses([](QkvPair& q) { q.write.heads_kv = 0; }));           // a rotation without a cache
  CHECK(refuses([](QkvPair& q) { q.write.neox = false; }));           // GPT-J pairs sit in other lanes
  CHECK(refuses([](QkvPair& q) { q.write.rotary_dim = 64; }));        // partial rotary
  CHECK(refuses([](QkvPair& q) { q.write.heads_q = 31; }));           // N is not the q, k and v heads
  CHECK(refuses([](QkvPair& q) { q.write.num_tokens = 3; }));
  CHECK(refuses([](QkvPair& q) { q.write.slot_mapping = nullptr; }));
  CHECK(refuses([](QkvPair& q) { q.write.cos_sin_stride = 64; }));
  CHECK(refuses([](QkvPair& q) { q.write.dtype = DType::F16; }));     // the cache's dtype is not the output's
  CHECK(refuses([](QkvPair& q) { q.gemm.out_dtype = q.write.dtype = DType::F32; }));
  CHECK(refuses([](QkvPair& q) { q.gemm.M = q.write.num_tokens = 17; }));  // the wgmma kernel's rows
  CHECK(refuses([](QkvPair& q) {
    q.gemm.gated_silu.out = storage, q.gemm.gated_silu.scale = &scale;
  }));
  // Heads of a size that is not a multiple of 16 (a tile would straddle a rotary pair).
  QkvPair odd(2);
  odd.gemm.N = (4 + 2 * 2) * 40;
  odd.gemm.out_row_stride = odd.gemm.N;
  odd.write.heads_q = 4, odd.write.heads_kv = 2, odd.write.head_size = 40, odd.write.rotary_dim = 40;
  odd.write.cos_sin_stride = 40;
  odd.write.key = odd.out.data() + 4 * 40 * 2, odd.write.value = odd.out.data() + 6 * 40 * 2;
  for (int64_t* s : {odd.write.query_stride, odd.write.key_stride, odd.write.value_stride}) s[0] = odd.gemm.N, s[1] = 40;
  CHECK(!odd.fuses());
}

}  // namespace
}  // namespace fxfuse::runtime
