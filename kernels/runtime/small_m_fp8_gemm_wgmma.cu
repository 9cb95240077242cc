// The small-M FP8 GEMM for 17..64 tokens (small_m_fp8_gemm.h): a weight stream through Hopper's
// TMA and warpgroup MMA on e4m3 operands.
//
// Roles are swapped as in the mma.sync kernel: the weight rows (output columns n) are the
// wgmma's M (64 per warpgroup), the tokens its N (kTokens = 32 or 64, rows past M read as zero),
// K its K (32 bytes per instruction). Both operands are K-major in shared memory, as FP8 wgmma
// needs, in the 128-byte swizzled layout TMA writes.
//
// Work unit: one CTA = one tile of 64 or 128 weight rows (one or two warpgroups, 64 rows each,
// SmallMFp8GemmWgmmaTileRows) x one contiguous slice of K. The warpgroups of a CTA read the same
// token box, so a 128-row tile reads the activations from L2 half as often per weight byte (at
// 64 tokens a 64-row tile reads as many activation bytes as weight bytes). The `splits` CTAs of
// a tile form one thread-block cluster; after their K loops they add their partial sums through
// distributed shared memory, each CTA finishing rows / splits of the rows (slices added in rank
// order: the result does not depend on timing). The host picks the split count that fills the
// GPU (SmallMFp8GemmWgmmaSplits); the runtime times every tile height and split.
//
//   weight rows [R, K] ──TMA──► stage: A, R x 128 B ───┐      (full barrier per stage)
//   x [M, K] ───────────TMA──► stage: B, T x 128 B ────┴─► per warpgroup 4 x wgmma m64nTk32
//   partial sums ─(fp32 adds)─► acc ─► shared memory ─► (cluster) sum of the K slices
//                ─► acc * scale (+ bias) ─► out [M, N]
//
// Thread 0 issues the TMA copies of a ring of kStages K steps (128 bytes of K each); every
// thread waits on the stage's mbarrier, and a CTA barrier per step frees the stage just used.
// Where no running kernel can write the weight (p.w_read_only), the weight halves of the first
// stages are requested before the wait for the previous step (programmatic dependent launch);
// the activations after it. The next kernel may launch once the K loop is done. (A cp.async ring
// measured within 15 % of this one either way, but needs every thread's copies, zero-fill
// bookkeeping and a generic-to-async proxy fence before each wgmma; docs/runtime.md.)
//
// With the gated-SiLU epilogue (p.gated_silu, small_m_fp8_gemm.h) a tile's R rows are R / 2 gate
// rows and the R / 2 up rows N/2 on (two TMA boxes per stage), so each gate/up pair of sums meets
// in the CTA's partial sums and becomes one FP8 value of silu_and_mul_quant:
//
//   x ─► GEMM [M, N] ─► silu_and_mul + quant ─► out [M, N/2] e4m3
//   becomes  x ─► GEMM (gate rows | up rows per tile) ─► out [M, N/2] e4m3
//
// Accumulation: Hopper's FP8 MMA adds into its accumulator with about 14 bits, not fp32's 24
// (chaining a step's four MMA measured errors past 2^-12 of the sum of |products| at K = 128).
// Each MMA here starts from zero and its 32-term sum is added to the accumulator in fp32, in K
// order (a 128-row tile at 64 tokens holds two of the four sums at a time, to fit two CTAs' 256
// threads in a multiprocessor's registers; the adds, and so the result, are the same).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kernels/device/mbarrier.cuh"
#include "kernels/device/pdl.cuh"
#include "kernels/device/sm90.cuh"
#include "kernels/runtime/small_m_fp8_epilogue.cuh"
#include "kernels/runtime/small_m_fp8_gemm.h"

namespace fxfuse::runtime {
namespace {

namespace dev = kernels::device;

constexpr int kWarpgroupThreads = 128;
constexpr int kWarpgroupRows = 64;  // weight rows per warpgroup: the wgmma's M
constexpr int kStepBytes = 128;  // K bytes per ring stage: one swizzle row
constexpr int kMmaK = 32;        // K bytes per wgmma
constexpr int kMmasPerStep = kStepBytes / kMmaK;
constexpr int kMaxSplits = kSmallMFp8WgmmaMaxSplits;
constexpr int kAlign = 1024;     // the swizzle pattern repeats every 8 rows of 128 bytes
constexpr int kRingStages = 4;   // the launcher's ring; the kernel template takes others for sweeps

// One CTA's shape and shared memory: kWarpgroups x 64 weight rows, and a ring of kStages stages,
// each the tile's weight rows then the tokens.
template <int kTokenCount, int kStageCount, int kWarpgroupCount>
struct Layout {
  static constexpr int kTokens = kTokenCount;
  static constexpr int kStages = kStageCount;
  static constexpr int kWarpgroups = kWarpgroupCount;
  static constexpr int kThreads = kWarpgroups * kWarpgroupThreads;
  static constexpr int kRows = kWarpgroups * kWarpgroupRows;
  static constexpr int kHalfRows = kRows / 2;  // gated: the tile's gate rows, as many up rows
  // MMA sums a warpgroup holds at once (of a stage's four): two where four would not let two
  // CTAs of two warpgroups fit a multiprocessor's registers (128 per thread).
  static constexpr int kSumsAtOnce = kWarpgroups == 2 && kTokens == 64 ? 2 : kMmasPerStep;
  static constexpr int kWeightBytes = kRows * kStepBytes;
  static constexpr int kStageBytes = kWeightBytes + kTokens * kStepBytes;
  static constexpr int kRingBytes = kStages * kStageBytes;
  // Partial sums after the loop, in the ring's space: [token][row], rows padded by 4 floats so
  // the accumulator stores of one warp hit 32 different banks (and rows stay 16-byte aligned).
  static constexpr int kRowPitch = kRows + 4;
  static constexpr int kPartialBytes = kTokens * kRowPitch * static_cast<int>(sizeof(float));
  static_assert(kPartialBytes <= kRingBytes, "the partial sums reuse the ring");
  static constexpr int kSmemBytes = kRingBytes + kAlign;  // + room to align the ring
};

struct Launch {
  CUtensorMap weight_map;  // [N, K] bytes, boxes of the tile's rows x 128 bytes (gated: half of them)
  CUtensorMap token_map;   // [M, K] bytes, boxes of kTokens rows x 128 bytes (rows past M: zero)
  SmallMFp8GemmParams p;
  int splits;           // CTAs per tile (the cluster size): 1, 2 or 4
  int steps_per_split;  // K steps of one CTA (the last slice may have fewer)
  bool gated;           // p.gated_silu: tile t is gate rows Ht.. and up rows N/2 + Ht.. (H: half its rows)
};

// The wgmma descriptor of a K-major operand at shared address `addr` (1024-byte aligned, 128-byte
// swizzle): 8-row groups 1024 bytes apart; the leading offset is unused.
__device__ __forceinline__ uint64_t operandDescriptor(uint32_t addr) { return dev::smemDesc(addr, 16, kAlign); }

// d (64 weight rows x 32 tokens, fp32) = A (64 x 32 K, descriptor a) * B (32 tokens x 32 K,
// descriptor b) + (accumulate ? d : 0).
__device__ __forceinline__ void wgmmaE4m3(float (&d)[16], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred acc;\nsetp.ne.b32 acc, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, acc, 1, 1;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b), "r"(accumulate ? 1 : 0));
}

// d (64 weight rows x 64 tokens, fp32) = A (64 x 32 K, descriptor a) * B (64 tokens x 32 K,
// descriptor b) + (accumulate ? d : 0).
__device__ __forceinline__ void wgmmaE4m3(float (&d)[32], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n.reg .pred acc;\nsetp.ne.b32 acc, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
      "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, acc, 1, 1;\n}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(accumulate ? 1 : 0));
}

__device__ __forceinline__ uint32_t clusterRank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void clusterSync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// Four floats at shared address `addr` (16-byte aligned) of cluster CTA `rank` (distributed
// shared memory). Not volatile: after the cluster barrier the loads of all ranks may be in
// flight together (the barrier's memory clobber keeps them after it).
__device__ __forceinline__ float4 loadFromClusterCta(uint32_t addr, uint32_t rank) {
  uint32_t remote;
  float4 v;
  asm("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  asm("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(remote));
  return v;
}

// The stage's 128 bytes of K for this warpgroup's 64 weight rows: four wgmma, each from zero into
// its own sum (the descriptors advance 32 bytes, 2 in units of 16), L::kSumsAtOnce at a time,
// and the sums go into acc in fp32, in K order.
template <typename L>
__device__ __forceinline__ void computeStage(uint32_t stage, float (&acc)[L::kTokens / 2],
                                             float (&mma_sum)[L::kSumsAtOnce][L::kTokens / 2]) {
  const uint32_t warpgroup = threadIdx.x / kWarpgroupThreads;
  const uint64_t a = operandDescriptor(stage + warpgroup * kWarpgroupRows * kStepBytes);
  const uint64_t b = operandDescriptor(stage + L::kWeightBytes);
#pragma unroll
  for (int k0 = 0; k0 < kMmasPerStep; k0 += L::kSumsAtOnce) {
    dev::wgmmaFence();
#pragma unroll
    for (int k = 0; k < L::kSumsAtOnce; ++k) wgmmaE4m3(mma_sum[k], a + 2 * (k0 + k), b + 2 * (k0 + k), false);
    dev::wgmmaCommit();
    dev::wgmmaWait<0>();
#pragma unroll
    for (int k = 0; k < L::kSumsAtOnce; ++k) dev::fenceRegs(mma_sum[k]);  // read only after the wait
#pragma unroll
    for (int k = 0; k < L::kSumsAtOnce; ++k)
#pragma unroll
      for (int i = 0; i < L::kTokens / 2; ++i) acc[i] += mma_sum[k][i];
  }
}

// The warpgroup's accumulators into the partial-sum array: register i of thread (warpgroup v,
// warp w of it, lane g * 4 + t) holds weight row 64 v + 16 w + g + 8 ((i / 2) % 2) and token
// 8 (i / 4) + 2 t + i % 2.
template <typename L>
__device__ __forceinline__ void storePartial(float* partial, const float (&acc)[L::kTokens / 2]) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int i = 0; i < L::kTokens / 2; ++i) {
    const int row = 16 * warp + g + 8 * ((i / 2) % 2), token = 8 * (i / 4) + 2 * t + i % 2;
    partial[token * L::kRowPitch + row] = acc[i];
  }
}

// Four consecutive rows of one token summed over the cluster's partial sums at shared address
// `addr` (in every rank's CTA), in rank order; every rank's load issued before the adds.
__device__ __forceinline__ void clusterSum(uint32_t addr, int splits, float (&sum)[4]) {
  float4 part[kMaxSplits];
#pragma unroll
  for (int s = 0; s < kMaxSplits; ++s)
    if (s < splits) part[s] = loadFromClusterCta(addr, static_cast<uint32_t>(s));
#pragma unroll
  for (int j = 0; j < 4; ++j) sum[j] = 0.f;
#pragma unroll
  for (int s = 0; s < kMaxSplits; ++s)
    if (s < splits) sum[0] += part[s].x, sum[1] += part[s].y, sum[2] += part[s].z, sum[3] += part[s].w;
}

// This CTA's share of the tile's rows: the cluster's partial sums added in rank order, scaled,
// biased and rounded; gated, the share is of the H gate rows, each with its up row H on, and
// each pair becomes one FP8 output (gatedSiluOutput). A thread takes four consecutive rows of
// one token (clusterSum); consecutive threads take consecutive rows.
template <typename L>
__device__ void reduceAndStore(const Launch& l, uint32_t partial_addr, int64_t tile, uint32_t rank) {
  const SmallMFp8GemmParams& p = l.p;
  const float scale = small_m::scaleProduct(p);
  const int quads = (l.gated ? L::kHalfRows : L::kRows) / l.splits / 4;  // groups of four rows this rank finishes
  for (int e = static_cast<int>(threadIdx.x); e < quads * L::kTokens; e += L::kThreads) {
    const int row = (static_cast<int>(rank) * quads + e % quads) * 4, token = e / quads;
    if (token >= p.M) continue;
    const uint32_t addr = partial_addr + static_cast<uint32_t>((token * L::kRowPitch + row) * 4);
    float sum[4];
    clusterSum(addr, l.splits, sum);
    if (!l.gated) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t n = tile * L::kRows + row + j;
        if (n < p.N) small_m::storeOutput(p, token, n, sum[j], scale);
      }
      continue;
    }
    float up[4];
    clusterSum(addr + L::kHalfRows * 4, l.splits, up);
    uint8_t* out = static_cast<uint8_t*>(p.gated_silu.out) + token * p.gated_silu.out_row_stride;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t n = tile * L::kHalfRows + row + j;  // N / 2 is a multiple of H: no partial tile
      out[n] = small_m::gatedSiluOutput(p, n, sum[j], up[j], scale);
    }
  }
}

// The ring's copies, issued by one thread: a stage's weight box (which also arms the stage's
// barrier for the whole stage) and its token box.
template <typename L>
struct Ring {
  const Launch& l;
  uint32_t base, bars;
  int64_t tile, first;  // the tile and the CTA's first K step
  __device__ uint32_t stage(int i) const { return base + static_cast<uint32_t>(i % L::kStages) * L::kStageBytes; }
  __device__ uint32_t bar(int i) const { return bars + 8 * static_cast<uint32_t>(i % L::kStages); }
  __device__ int k(int i) const { return static_cast<int>((first + i) * kStepBytes); }
  __device__ void weights(int i) const {
    dev::mbarArriveExpectTx(bar(i), L::kStageBytes);
    if (!l.gated) {
      dev::tmaLoad2d(stage(i), &l.weight_map, k(i), static_cast<int>(tile * L::kRows), bar(i));
      return;
    }
    // Gate rows, then their up rows half the weight on: the box of H rows at a 1024-byte aligned
    // offset lands in the same swizzled layout as rows H..2H-1 of one box of 2H rows.
    dev::tmaLoad2d(stage(i), &l.weight_map, k(i), static_cast<int>(tile * L::kHalfRows), bar(i));
    dev::tmaLoad2d(stage(i) + L::kHalfRows * kStepBytes, &l.weight_map, k(i),
                   static_cast<int>(l.p.N / 2 + tile * L::kHalfRows), bar(i));
  }
  __device__ void tokens(int i) const { dev::tmaLoad2d(stage(i) + L::kWeightBytes, &l.token_map, k(i), 0, bar(i)); }
};

// Registers for the CTAs the ring's shared memory lets a multiprocessor hold: three of one
// warpgroup (at most 168 per thread), two of two warpgroups (at most 128).
template <int kTokens, int kStages, int kWarpgroups>
__global__ void __launch_bounds__(kWarpgroups* kWarpgroupThreads, kWarpgroups == 2 ? 2 : 3)
    smallMFp8GemmWgmmaKernel(const __grid_constant__ Launch l) {
  using L = Layout<kTokens, kStages, kWarpgroups>;
  extern __shared__ uint8_t smem_raw[];
  __shared__ alignas(8) uint64_t full[kStages];  // stage s's bytes have landed
  const SmallMFp8GemmParams& p = l.p;
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t rank = clusterRank();
  const int64_t first = static_cast<int64_t>(rank) * l.steps_per_split;
  const int64_t k_steps = (p.K + kStepBytes - 1) / kStepBytes;
  const int steps = first < k_steps ? static_cast<int>(k_steps - first < l.steps_per_split ? k_steps - first
                                                                                           : l.steps_per_split)
                                    : 0;
  const Ring<L> ring{l, (raw + kAlign - 1) & ~static_cast<uint32_t>(kAlign - 1),
                     static_cast<uint32_t>(__cvta_generic_to_shared(full)), blockIdx.x / l.splits, first};
  const bool producer = threadIdx.x == 0;
  if (producer) {
    for (int s = 0; s < kStages; ++s) dev::mbarInit(ring.bar(s), 1);
    dev::fenceBarrierInit();
  }
  __syncthreads();
  // Prologue: the weights of the first kStages - 1 stages, the wait, their activations (the
  // wait first where a step still running may write the weight: !p.w_read_only).
  if (!p.w_read_only) kernels::waitForPrecedingGrid();
  if (producer)
    for (int s = 0; s < kStages - 1 && s < steps; ++s) ring.weights(s);
  if (p.w_read_only) kernels::waitForPrecedingGrid();
  if (producer)
    for (int s = 0; s < kStages - 1 && s < steps; ++s) ring.tokens(s);

  float acc[kTokens / 2] = {}, mma_sum[L::kSumsAtOnce][kTokens / 2];
  for (int i = 0; i < steps; ++i) {
    dev::mbarWait(ring.bar(i), static_cast<uint32_t>(i / kStages) & 1);
    __syncthreads();  // every warp is done with step i - 1's stage, which the next copy refills
    const int next = i + kStages - 1;
    if (producer && next < steps) {
      ring.weights(next);
      ring.tokens(next);
    }
    computeStage<L>(ring.stage(i), acc, mma_sum);
  }
  __syncthreads();  // every warp's MMA has read its last stage: the ring becomes the partial sums
  kernels::allowDependentGrids();
  storePartial<L>(reinterpret_cast<float*>(smem_raw + (ring.base - raw)), acc);
  clusterSync();  // every slice's partial sums are in place
  reduceAndStore<L>(l, ring.base, ring.tile, rank);
  clusterSync();  // no CTA leaves while another still reads its shared memory
}

// A 2-D tensor map over `rows` rows of K bytes (`row_stride` bytes apart) with boxes of
// box_rows x 128 bytes in the 128-byte swizzled layout; boxes past the rows or K read zeros.
bool makeOperandMap(CUtensorMap* map, const void* base, int64_t rows, int64_t K, int64_t row_stride, int box_rows) {
  const dev::EncodeTiledFn encode = dev::encodeTiled();
  if (!encode) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(K), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_stride)};
  const cuuint32_t box[2] = {kStepBytes, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int kTokens, int kWarpgroups, int kStages = kRingStages>
cudaError_t launchWgmma(const SmallMFp8GemmParams& p, cudaStream_t stream) {
  using L = Layout<kTokens, kStages, kWarpgroups>;
  constexpr auto kernel = smallMFp8GemmWgmmaKernel<kTokens, kStages, kWarpgroups>;
  cudaError_t e = dev::ensureSmemLimit<kernel>(L::kSmemBytes);
  int device = 0, sms = 0, per_sm = 0;
  if (e == cudaSuccess) e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess)
    e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, L::kThreads, L::kSmemBytes);
  if (e != cudaSuccess) return e;
  Launch l{};
  l.p = p;
  l.gated = p.gated_silu.out != nullptr;
  if (!makeOperandMap(&l.weight_map, p.w, p.N, p.K, p.w_row_stride, l.gated ? L::kHalfRows : L::kRows) ||
      !makeOperandMap(&l.token_map, p.x, p.M, p.K, p.x_row_stride, kTokens))
    return cudaErrorNotSupported;
  // Gated: N / 2 gate rows in tiles of H (SmallMFp8GemmUnsupported: a multiple of H).
  const int64_t tiles = l.gated ? p.N / 2 / L::kHalfRows : (p.N + L::kRows - 1) / L::kRows;
  const int64_t k_steps = (p.K + kStepBytes - 1) / kStepBytes;
  l.splits = p.splits > 0 ? p.splits
                          : SmallMFp8GemmWgmmaSplits(p.N, p.K, static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1),
                                                     L::kRows);
  l.steps_per_split = static_cast<int>((k_steps + l.splits - 1) / l.splits);
  const dim3 grid(static_cast<unsigned>(tiles * l.splits));
  return kernels::LaunchProgrammaticInClusters(kernel, grid, dim3(L::kThreads), L::kSmemBytes, l.splits, stream, l);
}

bool gatedTakesTileRows(const SmallMFp8GemmParams& p, int rows) { return !p.gated_silu.out || p.N % rows == 0; }

}  // namespace

int SmallMFp8GemmWgmmaSplits(int64_t N, int64_t K, int64_t cta_slots, int tile_rows) {
  const int64_t rows = tile_rows > 0 ? tile_rows : kSmallMFp8WgmmaTileRows;
  const int64_t tiles = (N + rows - 1) / rows, k_steps = (K + kStepBytes - 1) / kStepBytes;
  const int64_t slots = cta_slots > 0 ? cta_slots : 1;
  // The most slices whose CTAs fit in one wave; with more tiles than slots, one slice per tile
  // (a CTA's slice then streams the whole of K, and later CTAs take the slots as they free).
  int best = 1;
  for (int s = 2; s <= kMaxSplits; s *= 2)
    if (k_steps >= 2 * s && tiles * s <= slots) best = s;
  return best;
}

std::vector<int> SmallMFp8GemmWgmmaSplitChoices(int64_t K) {
  const int64_t k_steps = (K + kStepBytes - 1) / kStepBytes;
  std::vector<int> choices{1};  // each rank finishes rows / s rows in groups of 4: s divides 16
  for (int s = 2; s <= kMaxSplits; s *= 2)
    if (k_steps >= 2 * s) choices.push_back(s);
  return choices;
}

std::vector<int> SmallMFp8GemmWgmmaTileChoices(const SmallMFp8GemmParams& p) {
  static const int pinned = [] {
    const char* v = std::getenv("FXFUSE_WGMMA_TILE_ROWS");
    return v ? std::atoi(v) : 0;
  }();
  std::vector<int> choices;
  for (int rows : {kSmallMFp8WgmmaTileRows, kSmallMFp8WgmmaWideTileRows})
    if (gatedTakesTileRows(p, rows) && (pinned == rows || pinned == 0)) choices.push_back(rows);
  if (choices.empty()) choices.push_back(kSmallMFp8WgmmaTileRows);  // a pin p cannot take
  return choices;
}

int SmallMFp8GemmWgmmaTileRows(const SmallMFp8GemmParams& p) {
  if (p.wgmma_tile_rows != 0) return p.wgmma_tile_rows;
  const std::vector<int> choices = SmallMFp8GemmWgmmaTileChoices(p);
  return choices.size() == 1 ? choices.front() : kSmallMFp8WgmmaTileRows;
}

cudaError_t LaunchSmallMFp8GemmWgmma(const SmallMFp8GemmParams& p, cudaStream_t stream) {
  if (p.splits != 0) {
    const std::vector<int> choices = SmallMFp8GemmWgmmaSplitChoices(p.K);
    if (std::find(choices.begin(), choices.end(), p.splits) == choices.end()) return cudaErrorInvalidValue;
  }
  const int rows = SmallMFp8GemmWgmmaTileRows(p);
  if (rows != kSmallMFp8WgmmaTileRows && rows != kSmallMFp8WgmmaWideTileRows) return cudaErrorInvalidValue;
  if (!gatedTakesTileRows(p, rows)) return cudaErrorInvalidValue;
  if (rows == kSmallMFp8WgmmaWideTileRows)
    return p.M <= 32 ? launchWgmma<32, 2>(p, stream) : launchWgmma<64, 2>(p, stream);
  return p.M <= 32 ? launchWgmma<32, 1>(p, stream) : launchWgmma<64, 1>(p, stream);
}

}  // namespace fxfuse::runtime
