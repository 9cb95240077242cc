// The small-M FP8 GEMM (small_m_fp8_gemm.h): a weight stream through mma.sync m16n8k32 e4m3.
//
// Work unit: one warp, one tile of 16 weight rows (16 output columns n), one contiguous slice
// of K (a "split"). A block of kWarps warps holds kWarps / splits tiles, each with all its
// splits, so the splits' partial sums meet in shared memory and no block waits for another.
// The host picks the split count that fills the GPU in one wave of blocks (SmallMFp8GemmSplits).
//
// Each warp streams its slice through its own ring of kStages shared-memory stages with
// cp.async (one stage = one K step: 16 rows x 128 bytes); copies of the next stages are in
// flight while one is computed, and no registers hold them. Per step, lane (g, t) reads
// 16 bytes of weight rows g and g+8 at K offsets t*16 and 64 + t*16 and the same 32 bytes of
// token g's activations (global, L1-cached: every tile reads the same ones), and issues four
// mma per 8-token tile. The mma reduces over K, so the order of K inside one instruction is
// free as long as both operands use the same one: A register j of lane (g, t) and B register j
// of the same lane hold the same four K positions.
//
//   weight rows [16, K] ──cp.async──► ring (per warp) ──lds──► mma ◄── x [M, K] (ld.global.nc)
//                                                               │
//                           partial sums of the splits in smem ─┴─► acc * scale (+ bias) ─► out
//
// Each copy asks L2 to fetch the 256 bytes around it (cp.async's L2 prefetch size): a warp's next
// K step reads the following 128 bytes of the same rows, which a miss then brings in with this
// one, so DRAM serves half as many requests, each twice as long (docs/runtime.md).
//
// Where no running kernel can write the weight (p.w_read_only: a plan input it never updates),
// a warp fills its ring before it waits for the previous step (programmatic dependent launch),
// so the weight stream starts while that step drains; the activations are read after the wait.
// The block lets the next kernel launch only after its K loop, not at its start: an early
// trigger lets the kernel after next launch too and take slots of this one's wave.
//
// The epilogue rounds as fxfuse's interpreter does (small_m_fp8_epilogue.cuh). With the
// gated-SiLU epilogue a block's tiles are pairs: its first half are gate tiles (weight rows
// < N/2), its second half the matching up tiles, so each gate/up pair of outputs meets in the
// block's shared memory and becomes one FP8 value of silu_and_mul_quant. With the rotary +
// KV-cache epilogue a tile's 16 rows are 8 rows of a head and their rotary partners half a head
// on (weightRow), so accumulators j and j + 2 of a lane are the two elements of a rotary pair.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/device/cp_async.cuh"
#include "kernels/device/mbarrier.cuh"
#include "kernels/device/mma_fp8.cuh"
#include "kernels/device/pdl.cuh"
#include "kernels/runtime/small_m_fp8_epilogue.cuh"
#include "kernels/runtime/small_m_fp8_gemm.h"

namespace fxfuse::runtime {
namespace {

namespace dev = kernels::device;

constexpr int kWarps = 8;  // warps per block
// Ring stages per warp: kSmallMFp8RingStages, or kSmallMFp8DeepRingStages where the params or
// $FXFUSE_SMALLM_STAGES ask for it (one token tile only). At most kPreWaitStages of them are
// filled before the grid wait: four filled there (more of the weight loaded while the previous
// step drains) made the decode step slower at every point measured (docs/runtime.md), so a
// deeper ring adds bytes in flight only once this kernel runs alone.
constexpr int kPreWaitStages = kSmallMFp8RingStages;
constexpr int kRowsPerTile = 16;   // the mma's M: weight rows
constexpr int kTokensPerTile = 8;  // the mma's N: tokens
constexpr int kStepBytes = 128;    // K bytes of a row per step
constexpr int kStageBytes = kRowsPerTile * kStepBytes;
// Shared memory of a block: the warps' rings, then their partial sums [warp][acc][lane].
template <int kStages>
constexpr int kRingBytes = kWarps * kStages * kStageBytes;
// What the kernel does with its sums (SmallMFp8GemmParams: plain output, gated_silu, rotary).
enum class Epilogue { kPlain, kGatedSilu, kRotaryCache };

// The gated-SiLU epilogue's sums of a block's tiles follow: [tile][acc][lane]; the rotary
// epilogue's RotaryTokens follow the partial sums.
struct RotaryTokens {
  int64_t position[kSmallMFp8MmaSyncMaxRows];
  int64_t slot[kSmallMFp8MmaSyncMaxRows];
};
template <int kTiles>
constexpr int kPartialBytes = kWarps * kTiles * 4 * 32 * static_cast<int>(sizeof(float));
template <int kTiles, Epilogue kEpi, int kStages>
constexpr int smemBytes() {
  constexpr int kRing = kRingBytes<kStages>;
  if constexpr (kEpi == Epilogue::kGatedSilu) return kRing + 2 * kPartialBytes<kTiles>;
  if constexpr (kEpi == Epilogue::kRotaryCache) return kRing + kPartialBytes<kTiles> + int{sizeof(RotaryTokens)};
  return kRing + kPartialBytes<kTiles>;
}

struct Launch {
  SmallMFp8GemmParams p;
  int splits;           // warps per tile: 1, 2, 4 or 8 (gated: at most 4)
  int steps_per_split;  // K steps of one warp (the last split may have fewer)
  int64_t gate_tiles;   // gated: tiles of N / 2 rows (the up tiles follow)
};

// The weight tile of the block's tile `tile_in_block`: consecutive tiles, or (gated) gate tile
// pair and its up tile gate_tiles + pair, pair = blockIdx.x * (tiles per block / 2) + i.
template <Epilogue kEpi>
__device__ __forceinline__ int64_t tileOf(const Launch& l, int tile_in_block) {
  constexpr bool kGated = kEpi == Epilogue::kGatedSilu;
  const int per_block = kWarps / l.splits;
  if (!kGated) return static_cast<int64_t>(blockIdx.x) * per_block + tile_in_block;
  const int half = per_block / 2;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * half + tile_in_block % half;
  return tile_in_block < half ? pair : l.gate_tiles + pair;
}

// The weight row (output column) of row `row` of tile `tile`: tile * 16 + row, or with the
// rotary epilogue SmallMFp8RotaryWeightRow (a tile's rows r and r + 8 are a rotary pair).
template <Epilogue kEpi>
__device__ __forceinline__ int64_t weightRow(const SmallMFp8GemmParams& p, int64_t tile, int row) {
  if constexpr (kEpi != Epilogue::kRotaryCache) {
    return tile * kRowsPerTile + row;
  } else {
    return SmallMFp8RotaryWeightRow(p.rotary.cache.head_size, tile, row);
  }
}

// 16 bytes through L1 (activations), zero when !valid.
__device__ __forceinline__ uint4 loadActivations(const uint8_t* p, bool valid) {
  return valid ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0, 0, 0, 0);
}

// A stage's 16 rows x 128 bytes, row r at r * 128 with its two 64-byte halves swapped on odd
// rows: the lanes reading rows g and g+1 of one quarter-warp then hit different banks.
__device__ __forceinline__ int stageOffset(int row, int byte_in_step) {
  return row * kStepBytes + (byte_in_step ^ ((row & 1) << 6));
}

// K step `step` of `tile` into the ring stage at shared address `stage`: lane l copies the
// 16-byte chunks l, l + 32, l + 64, l + 96 (row c / 8, column c % 8: eight lanes per row, so
// one warp instruction reads four whole 128-byte lines). Chunks past N, K or the split are zero.
template <int kL2Prefetch, Epilogue kEpi>
__device__ __forceinline__ void copyStep(const SmallMFp8GemmParams& p, uint32_t stage, int64_t tile, int64_t step,
                                         bool step_in_split) {
  const int lane = threadIdx.x & 31;
  const uint8_t* w = static_cast<const uint8_t*>(p.w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int chunk = lane + 32 * i, row = chunk / 8, col = chunk % 8;
    const int64_t n = weightRow<kEpi>(p, tile, row), k = step * kStepBytes + col * 16;
    const bool valid = step_in_split && n < p.N && k < p.K;
    kernels::cpAsync16Prefetch<kL2Prefetch>(stage + static_cast<uint32_t>(stageOffset(row, col * 16)),
                                            valid ? w + n * p.w_row_stride + k : w, valid);
  }
}

// The activations of K step `step` for lane (g, t): token tile a's token g at K offsets t*16
// and 64 + t*16.
template <int kTiles>
__device__ __forceinline__ void loadStepActivations(const SmallMFp8GemmParams& p, int64_t step, uint4 (&x)[kTiles][2]) {
  const int lane = threadIdx.x & 31, g = lane / 4, t = lane % 4;
  const uint8_t* base = static_cast<const uint8_t*>(p.x);
  const int64_t k = step * kStepBytes + t * 16;
#pragma unroll
  for (int a = 0; a < kTiles; ++a) {
    const int64_t token = a * kTokensPerTile + g;
    const uint8_t* row = base + token * p.x_row_stride + k;
    x[a][0] = loadActivations(row, token < p.M && k < p.K);
    x[a][1] = loadActivations(row + 64, token < p.M && k + 64 < p.K);
  }
}

// One step: the weight fragments of rows g and g+8 from the stage, four mma per token tile.
template <int kTiles>
__device__ __forceinline__ void computeStep(const uint8_t* stage, const uint4 (&x)[kTiles][2],
                                            float (&acc)[kTiles][4]) {
  const int lane = threadIdx.x & 31, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint4 lo = *reinterpret_cast<const uint4*>(stage + stageOffset(g, h * 64 + t * 16));
    const uint4 hi = *reinterpret_cast<const uint4*>(stage + stageOffset(g + 8, h * 64 + t * 16));
#pragma unroll
    for (int a = 0; a < kTiles; ++a) {
      dev::mmaE4m3(acc[a], lo.x, hi.x, lo.y, hi.y, x[a][h].x, x[a][h].y);
      dev::mmaE4m3(acc[a], lo.z, hi.z, lo.w, hi.w, x[a][h].z, x[a][h].w);
    }
  }
}

// Accumulator j of lane el of token tile a: token (el % 4) * 2 + j % 2, row el / 4 (+ 8 for j >= 2).
__device__ __forceinline__ int64_t tokenOf(int a, int j, int el) { return a * kTokensPerTile + (el % 4) * 2 + (j & 1); }
__device__ __forceinline__ int rowOf(int j, int el) { return el / 4 + (j >= 2 ? 8 : 0); }

// The sum of one accumulator over a tile's splits, in split order: element `elem` (token tile
// a's accumulator j, elem = 4a + j) of lane `el` of the block's tile `tile_in_block`.
template <int kTiles>
__device__ __forceinline__ float splitSum(const float* partial, int splits, int tile_in_block, int elem, int el) {
  float sum = 0.f;
  for (int s = 0; s < splits; ++s) sum += partial[((tile_in_block * splits + s) * kTiles * 4 + elem) * 32 + el];
  return sum;
}

// The rotary epilogue's token metadata, loaded at the K loop's start so that the epilogue does
// not wait on two dependent round trips (position, then its table row) after the K loop: each
// token's position and slot into shared memory, and its cos | sin row asked of L2. The epilogue
// reads them after its barrier.
__device__ __forceinline__ void loadRotaryTokens(const SmallMFp8GemmParams& p, RotaryTokens* tokens) {
  const ReshapeAndCacheParams& c = p.rotary.cache;
  const int t = static_cast<int>(threadIdx.x);
  if (t >= p.M) return;
  const int64_t position = c.positions[t];
  tokens->position[t] = position;
  tokens->slot[t] = c.slot_mapping[t];
  rotary::prefetchTableRow(c.cos_sin_cache, c.cos_sin_dtype, c.cos_sin_rows, c.cos_sin_stride, c.rotary_dim, position);
}

// The rotary epilogue's half of the block's outputs: each thread takes pairs of accumulators
// j, j + 2 (rows r and r + 8 of a tile: a rotary pair, weightRow) of one token.
template <int kTiles>
__device__ void storeRotaryPairs(const Launch& l, const float* partial, const RotaryTokens& tokens, float scale) {
  const SmallMFp8GemmParams& p = l.p;
  constexpr int kTilePairs = kTiles * 2 * 32;  // (token tile, j < 2, lane) per tile
  const int tiles_per_block = kWarps / l.splits;
  for (int e = threadIdx.x; e < tiles_per_block * kTilePairs; e += kWarps * 32) {
    const int tile_in_block = e / kTilePairs, a = e / 64 % kTiles, j = e / 32 % 2, el = e % 32;
    const int64_t token = tokenOf(a, j, el);
    const int64_t n = weightRow<Epilogue::kRotaryCache>(p, tileOf<Epilogue::kRotaryCache>(l, tile_in_block), el / 4);
    if (token >= p.M || n >= p.N) continue;
    const float first = splitSum<kTiles>(partial, l.splits, tile_in_block, 4 * a + j, el);
    const float second = splitSum<kTiles>(partial, l.splits, tile_in_block, 4 * a + j + 2, el);
    small_m::storeRotaryPair(p, token, tokens.position[token], tokens.slot[token], n, first, second, scale);
  }
}

// The block's tiles: the splits' partial sums added in split order, scaled, biased, rounded;
// gated, each gate/up pair of sums becomes one FP8 output (gatedSiluOutput) instead; rotary,
// each rotary pair is rotated and goes to its cache slot as well (storeRotaryPairs).
template <int kTiles, Epilogue kEpi>
__device__ void reduceAndStore(const Launch& l, const float (&acc)[kTiles][4], float* partial) {
  constexpr bool kGated = kEpi == Epilogue::kGatedSilu;
  const SmallMFp8GemmParams& p = l.p;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
  constexpr int kTileElems = kTiles * 4 * 32;
#pragma unroll
  for (int a = 0; a < kTiles; ++a)
#pragma unroll
    for (int j = 0; j < 4; ++j) partial[(warp * kTiles * 4 + a * 4 + j) * 32 + lane] = acc[a][j];
  __syncthreads();
  const float scale = small_m::scaleProduct(p);
  if constexpr (kEpi == Epilogue::kRotaryCache) {
    storeRotaryPairs<kTiles>(l, partial, *reinterpret_cast<const RotaryTokens*>(partial + kWarps * kTileElems), scale);
    return;
  }
  const int tiles_per_block = kWarps / l.splits;
  float* sums = partial + kWarps * kTileElems;  // gated: [tile_in_block][elem][lane]
  for (int e = threadIdx.x; e < tiles_per_block * kTileElems; e += kWarps * 32) {
    const int tile_in_block = e / kTileElems, elem = e / 32 % (kTiles * 4), el = e % 32;
    const float sum = splitSum<kTiles>(partial, l.splits, tile_in_block, elem, el);
    if (kGated) {
      sums[e] = sum;
      continue;
    }
    const int64_t token = tokenOf(elem / 4, elem % 4, el);
    const int64_t n = tileOf<kEpi>(l, tile_in_block) * kRowsPerTile + rowOf(elem % 4, el);
    if (token >= p.M || n >= p.N) continue;
    small_m::storeOutput(p, token, n, sum, scale);
  }
  if (!kGated) return;
  __syncthreads();
  const int half = tiles_per_block / 2;
  uint8_t* out = static_cast<uint8_t*>(p.gated_silu.out);
  for (int e = threadIdx.x; e < half * kTileElems; e += kWarps * 32) {
    const int tile_in_block = e / kTileElems, elem = e / 32 % (kTiles * 4), el = e % 32;
    const int64_t token = tokenOf(elem / 4, elem % 4, el);
    const int64_t n = tileOf<kEpi>(l, tile_in_block) * kRowsPerTile + rowOf(elem % 4, el);
    if (token >= p.M || n >= p.N / 2) continue;
    out[token * p.gated_silu.out_row_stride + n] =
        small_m::gatedSiluOutput(p, n, sums[e], sums[e + half * kTileElems], scale);
  }
}

template <int kTiles, Epilogue kEpi, int kL2Prefetch, int kStages>
__global__ void __launch_bounds__(kWarps * 32, kTiles == 1 ? 3 : 2) smallMFp8GemmKernel(const Launch l) {
  extern __shared__ __align__(128) uint8_t smem[];
  const SmallMFp8GemmParams& p = l.p;
  const int warp = threadIdx.x / 32;
  const int64_t tile = tileOf<kEpi>(l, warp / l.splits);
  const int64_t first = static_cast<int64_t>(warp % l.splits) * l.steps_per_split;
  const int64_t k_steps = (p.K + kStepBytes - 1) / kStepBytes;
  const int64_t steps =
      first < k_steps ? (k_steps - first < l.steps_per_split ? k_steps - first : l.steps_per_split) : 0;
  const uint8_t* ring = smem + warp * kStages * kStageBytes;
  const uint32_t ring_addr = static_cast<uint32_t>(__cvta_generic_to_shared(ring));
  if (!p.w_read_only) kernels::waitForPrecedingGrid();  // w may come from a step still running
  auto fillStages = [&](int from, int to) {  // weights only, one commit group per stage
#pragma unroll
    for (int s = from; s < to; ++s) {
      copyStep<kL2Prefetch, kEpi>(p, ring_addr + s * kStageBytes, tile, first + s, s < steps);
      kernels::cpAsyncCommit();
    }
  };
  constexpr int kEarly = kStages < kPreWaitStages ? kStages : kPreWaitStages;
  fillStages(0, kEarly);
  if (p.w_read_only) kernels::waitForPrecedingGrid();
  fillStages(kEarly, kStages);
  if constexpr (kEpi == Epilogue::kRotaryCache)
    loadRotaryTokens(p, reinterpret_cast<RotaryTokens*>(smem + kRingBytes<kStages> + kPartialBytes<kTiles>));
  float acc[kTiles][4] = {};
  uint4 next[kTiles][2];
  if (steps > 0) loadStepActivations<kTiles>(p, first, next);
  for (int64_t i = 0; i < steps; ++i) {
    uint4 x[kTiles][2];
#pragma unroll
    for (int a = 0; a < kTiles; ++a) x[a][0] = next[a][0], x[a][1] = next[a][1];
    if (i + 1 < steps) loadStepActivations<kTiles>(p, first + i + 1, next);
    kernels::cpAsyncWait<kStages - 1>();  // this step's stage has landed (one group per step)
    __syncwarp();
    const int s = static_cast<int>(i % kStages);
    computeStep<kTiles>(ring + s * kStageBytes, x, acc);
    __syncwarp();  // every lane has read the stage before it is refilled
    copyStep<kL2Prefetch, kEpi>(p, ring_addr + s * kStageBytes, tile, first + i + kStages, i + kStages < steps);
    kernels::cpAsyncCommit();
  }
  kernels::cpAsyncWait<0>();
  kernels::allowDependentGrids();
  reduceAndStore<kTiles, kEpi>(l, acc, reinterpret_cast<float*>(smem + kRingBytes<kStages>));
}

template <int kTiles, Epilogue kEpi, int kL2Prefetch, int kStages>
cudaError_t launchTiles(const SmallMFp8GemmParams& p, cudaStream_t stream) {
  constexpr bool kGated = kEpi == Epilogue::kGatedSilu;
  constexpr int kBytes = smemBytes<kTiles, kEpi, kStages>();
  constexpr auto kernel = smallMFp8GemmKernel<kTiles, kEpi, kL2Prefetch, kStages>;
  cudaError_t e = dev::ensureSmemLimit<kernel>(kBytes);
  int device = 0, sms = 0, per_sm = 0;
  if (e == cudaSuccess) e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, kBytes);
  if (e != cudaSuccess) return e;
  const int64_t tiles = (p.N + kRowsPerTile - 1) / kRowsPerTile;
  const int64_t k_steps = (p.K + kStepBytes - 1) / kStepBytes;
  Launch l{p, 1, 0, tiles / 2};
  l.splits =
      p.splits > 0 ? p.splits : SmallMFp8GemmSplits(p.N, p.K, static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1));
  if (kGated && l.splits > kWarps / 2) l.splits = kWarps / 2;  // at least one gate/up pair per block
  l.steps_per_split = static_cast<int>((k_steps + l.splits - 1) / l.splits);
  const int64_t per = kWarps / l.splits;
  const dim3 grid(static_cast<unsigned>(kGated ? (l.gate_tiles + per / 2 - 1) / (per / 2) : (tiles + per - 1) / per));
  return kernels::LaunchProgrammatic(kernel, grid, dim3(kWarps * 32), kBytes, stream, l);
}

// The ring depth: the deep ring only with one token tile (batch 1-8, the shapes it is an A/B
// for; two token tiles keep the default ring and one kernel instance fewer per epilogue).
template <int kTiles, Epilogue kEpi, int kL2Prefetch>
cudaError_t launchTiles(const SmallMFp8GemmParams& p, cudaStream_t stream) {
  if constexpr (kTiles == 1) {
    if (SmallMFp8GemmRingStages(p) == kSmallMFp8DeepRingStages)
      return launchTiles<kTiles, kEpi, kL2Prefetch, kSmallMFp8DeepRingStages>(p, stream);
  }
  return launchTiles<kTiles, kEpi, kL2Prefetch, kSmallMFp8RingStages>(p, stream);
}

template <int kTiles, Epilogue kEpi>
cudaError_t launchTiles(const SmallMFp8GemmParams& p, cudaStream_t stream) {
  switch (p.l2_prefetch_bytes >= 0 ? p.l2_prefetch_bytes : SmallMFp8DefaultL2PrefetchBytes()) {
    case 256:
      return launchTiles<kTiles, kEpi, 256>(p, stream);
    case 128:
      return launchTiles<kTiles, kEpi, 128>(p, stream);
    case 64:
      return launchTiles<kTiles, kEpi, 64>(p, stream);
    default:
      return launchTiles<kTiles, kEpi, 0>(p, stream);
  }
}

template <int kTiles>
cudaError_t launchTiles(const SmallMFp8GemmParams& p, cudaStream_t stream) {
  if (p.gated_silu.out) return launchTiles<kTiles, Epilogue::kGatedSilu>(p, stream);
  if (p.rotary.cache.positions) return launchTiles<kTiles, Epilogue::kRotaryCache>(p, stream);
  return launchTiles<kTiles, Epilogue::kPlain>(p, stream);
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }
bool floatOutput(DType t) { return t == DType::BF16 || t == DType::F16 || t == DType::F32; }

// Why the rotary + KV-cache epilogue cannot take `p` (small_m_fp8_gemm.h), or nullptr.
const char* rotaryUnsupported(const SmallMFp8GemmParams& p) {
  const ReshapeAndCacheParams& c = p.rotary.cache;
  if (p.gated_silu.out) return "the rotary epilogue does not go with the gated-SiLU one";
  if (p.M > kSmallMFp8MmaSyncMaxRows) return "the rotary epilogue takes at most 16 rows";
  if (p.out_dtype != DType::BF16 && p.out_dtype != DType::F16) return "the rotary epilogue rounds to BF16 or F16";
  if (c.dtype != p.out_dtype || (c.cache_dtype != c.dtype && c.cache_dtype != DType::F8E4M3FN))
    return "the rotary epilogue's cache must be the output dtype or F8E4M3FN";
  if (c.cache_dtype == DType::F8E4M3FN && (!c.k_scale || !c.v_scale)) return "an FP8 cache needs k_scale and v_scale";
  if (c.heads_q < 1 || c.heads_kv < 1 || c.head_size < kRowsPerTile || c.head_size % kRowsPerTile != 0)
    return "the rotary epilogue needs query and KV heads of a multiple of 16 elements";
  if (!c.neox || c.rotary_dim != c.head_size) return "the rotary epilogue takes neox pairs over the whole head";
  if (p.N != (c.heads_q + 2 * c.heads_kv) * c.head_size) return "N must be the q, k and v heads";
  if (c.num_tokens != p.M) return "the cache write's tokens must be the GEMM's rows";
  if (!c.slot_mapping || !c.key_cache || !c.value_cache || !c.cos_sin_cache || c.num_blocks < 0 || c.block_size < 1)
    return "the rotary epilogue needs slot_mapping, both caches and the cos | sin table";
  if (c.cos_sin_dtype != DType::F32 && c.cos_sin_dtype != DType::BF16 && c.cos_sin_dtype != DType::F16)
    return "the cos | sin table must be F32, BF16 or F16";
  if (c.cos_sin_rows < 0 || c.cos_sin_stride < c.rotary_dim) return "the cos | sin table rows must hold rotary_dim";
  if (c.query_out && (c.query_out_stride[1] < c.head_size || c.query_out_stride[0] < c.heads_q * c.query_out_stride[1]))
    return "query_out's rows must hold the query heads";
  return nullptr;
}

}  // namespace

int SmallMFp8GemmSplits(int64_t N, int64_t K, int64_t block_slots) {
  const int64_t tiles = (N + kRowsPerTile - 1) / kRowsPerTile, k_steps = (K + kStepBytes - 1) / kStepBytes;
  const int64_t slots = block_slots > 0 ? block_slots : 1;
  int best = 1;
  double best_fill = -1;
  for (int s = 1; s <= kWarps; s *= 2) {
    if (s > 1 && k_steps < s) break;
    const int64_t per = kWarps / s, blocks = (tiles + per - 1) / per;
    const int64_t waves = (blocks + slots - 1) / slots;
    if (waves == 1) {
      best = s;
      best_fill = 2;  // any one-wave choice beats every multi-wave one; more splits win among them
      continue;
    }
    const double fill = static_cast<double>(blocks) / static_cast<double>(waves * slots);
    if (best_fill <= 1 && fill >= best_fill) best = s, best_fill = fill;
  }
  return best;
}

std::vector<int> SmallMFp8GemmSplitChoices(const SmallMFp8GemmParams& p) {
  if (p.M > kSmallMFp8MmaSyncMaxRows) return SmallMFp8GemmWgmmaSplitChoices(p.K);
  const int64_t k_steps = (p.K + kStepBytes - 1) / kStepBytes;
  const int most = p.gated_silu.out ? kWarps / 2 : kWarps;  // a gated block holds a gate/up pair
  std::vector<int> choices{1};
  for (int s = 2; s <= most && s <= k_steps; s *= 2) choices.push_back(s);
  return choices;
}

std::vector<SmallMFp8GemmParams> SmallMFp8GemmConfigurations(const SmallMFp8GemmParams& p) {
  const std::vector<int> rows =
      p.M > kSmallMFp8MmaSyncMaxRows ? SmallMFp8GemmWgmmaTileChoices(p) : std::vector<int>{0};
  std::vector<SmallMFp8GemmParams> configurations;
  for (int r : rows)
    for (int split : SmallMFp8GemmSplitChoices(p)) {
      SmallMFp8GemmParams q = p;
      q.wgmma_tile_rows = r;
      q.splits = split;
      configurations.push_back(q);
    }
  return configurations;
}

std::string SmallMFp8GemmConfigurationName(const SmallMFp8GemmParams& p) {
  std::string name = p.M > kSmallMFp8MmaSyncMaxRows && p.wgmma_tile_rows != 0
                         ? std::to_string(p.wgmma_tile_rows) + "-row tiles, "
                         : std::string();
  if (p.splits == 0) return name + "the kernel's K split";
  return name + std::to_string(p.splits) + (p.splits > 1 ? " K slices" : " K slice");
}

const char* SmallMFp8GemmUnsupported(const SmallMFp8GemmParams& p) {
  if (p.M < 1 || p.M > kSmallMFp8MaxRows) return "M must be 1..64";
  if (p.N < 1 || p.K < 16 || p.K % 16 != 0) return "N must be positive and K a positive multiple of 16";
  if (!p.x || !p.w || (!p.out && !p.gated_silu.out) || !p.scale_x || !p.scale_w)
    return "x, w, out (or the gated-SiLU output) and both scales are required";
  if (!aligned16(p.x) || !aligned16(p.w)) return "x and w must be 16-byte aligned";
  if (p.x_row_stride < p.K || p.x_row_stride % 16 != 0 || p.w_row_stride < p.K || p.w_row_stride % 16 != 0)
    return "the x and w row strides must cover K and be multiples of 16 bytes";
  if (p.out_row_stride < p.N) return "the output row stride must cover N";
  if (!floatOutput(p.out_dtype) || (p.bias && !floatOutput(p.bias_dtype)))
    return "out and bias must be BF16, F16 or F32";
  if (p.N > 0x7fffffff || p.K > 0x7fffffff) return "N and K must be below 2^31 (tensor-map coordinates)";
  const SmallMFp8GatedSilu& g = p.gated_silu;
  if (g.out) {
    if (p.N % (2 * kRowsPerTile) != 0) return "the gated-SiLU epilogue needs N = 2d with d a multiple of 16";
    if (p.M > kSmallMFp8MmaSyncMaxRows && p.N % kSmallMFp8WgmmaTileRows != 0)
      return "the gated-SiLU epilogue above 16 rows needs N = 2d with d a multiple of 32";
    if (p.wgmma_tile_rows == kSmallMFp8WgmmaWideTileRows && p.N % kSmallMFp8WgmmaWideTileRows != 0)
      return "the gated-SiLU epilogue in 128-row wgmma tiles needs N = 2d with d a multiple of 64";
    if (p.out_dtype == DType::F32 || p.bias) return "the gated-SiLU epilogue rounds to BF16 or F16, without bias";
    if (!g.scale || g.out_row_stride < p.N / 2) return "the gated-SiLU epilogue needs its scale and rows covering N/2";
  }
  if (p.rotary.cache.positions)
    if (const char* why = rotaryUnsupported(p)) return why;
  if (p.l2_prefetch_bytes != -1 && p.l2_prefetch_bytes != 0 && p.l2_prefetch_bytes != 64 &&
      p.l2_prefetch_bytes != 128 && p.l2_prefetch_bytes != 256)
    return "l2_prefetch_bytes must be -1 (default), 0, 64, 128 or 256";
  if (p.ring_stages != 0 && p.ring_stages != kSmallMFp8RingStages &&
      (p.ring_stages != kSmallMFp8DeepRingStages || p.M > kTokensPerTile))
    return "ring_stages must be 0 (the kernel's), 2, or 4 with at most 8 rows";
  if (p.wgmma_tile_rows != 0 && p.wgmma_tile_rows != kSmallMFp8WgmmaTileRows &&
      p.wgmma_tile_rows != kSmallMFp8WgmmaWideTileRows)
    return "wgmma_tile_rows must be 0 (the kernel's rule), 64 or 128";
  if (p.splits != 0) {
    const std::vector<int> choices = SmallMFp8GemmSplitChoices(p);
    if (std::find(choices.begin(), choices.end(), p.splits) == choices.end())
      return "splits must be 0 (the kernel's rule) or one of SmallMFp8GemmSplitChoices";
  }
  return nullptr;
}

std::optional<SmallMFp8GemmParams> SmallMFp8GemmWithRotaryCache(const SmallMFp8GemmParams& p,
                                                                const ReshapeAndCacheParams& write) {
  if (!write.positions || write.heads_kv < 1 || !p.out || (p.out_dtype != DType::BF16 && p.out_dtype != DType::F16))
    return std::nullopt;
  const uint8_t* out = static_cast<const uint8_t*>(p.out);
  const int64_t head_size = write.head_size, elem_bytes = 2;
  auto columnsOf = [&](const void* view, int64_t first_head, const int64_t (&stride)[2]) {
    return view == out + first_head * head_size * elem_bytes && stride[0] == p.out_row_stride && stride[1] == head_size;
  };
  if (!columnsOf(write.query, 0, write.query_stride) || !columnsOf(write.key, write.heads_q, write.key_stride) ||
      !columnsOf(write.value, write.heads_q + write.heads_kv, write.value_stride))
    return std::nullopt;
  SmallMFp8GemmParams fused = p;
  fused.rotary.cache = write;
  if (SmallMFp8GemmUnsupported(fused)) return std::nullopt;
  return fused;
}

cudaError_t LaunchSmallMFp8Gemm(const SmallMFp8GemmParams& p, cudaStream_t stream) {
  if (SmallMFp8GemmUnsupported(p)) return cudaErrorInvalidValue;
  if (p.M > kSmallMFp8MmaSyncMaxRows) return LaunchSmallMFp8GemmWgmma(p, stream);
  return p.M <= kTokensPerTile ? launchTiles<1>(p, stream) : launchTiles<2>(p, stream);
}

int SmallMFp8GemmRingStages(const SmallMFp8GemmParams& p) {
  if (p.M > kTokensPerTile) return kSmallMFp8RingStages;
  if (p.ring_stages != 0) return p.ring_stages;
  static const int stages = [] {
    const char* v = std::getenv("FXFUSE_SMALLM_STAGES");
    return v && std::atoi(v) == kSmallMFp8DeepRingStages ? kSmallMFp8DeepRingStages : kSmallMFp8RingStages;
  }();
  static const double min_bytes = [] {
    const char* v = std::getenv("FXFUSE_SMALLM_STAGES_MIN_MB");
    return v ? std::atof(v) * 1024 * 1024 : 0.0;
  }();
  return static_cast<double>(p.N) * static_cast<double>(p.K) >= min_bytes ? stages : kSmallMFp8RingStages;
}

int SmallMFp8DefaultL2PrefetchBytes() {
  static const int bytes = [] {
    const char* v = std::getenv("FXFUSE_SMALLM_L2_PREFETCH");
    if (!v) return kSmallMFp8L2PrefetchBytes;
    const int n = std::atoi(v);
    return n == 64 || n == 128 || n == 256 ? n : 0;
  }();
  return bytes;
}

}  // namespace fxfuse::runtime
