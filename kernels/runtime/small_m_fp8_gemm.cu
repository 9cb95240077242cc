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
// Weights are never written by a plan step, so a warp fills its ring before it waits for the
// previous step (programmatic dependent launch); the activations are read after the wait.
// The block lets the next kernel launch only after its K loop, not at its start: an early
// trigger lets the kernel after next launch too and take slots of this one's wave.
//
// The epilogue rounds as fxfuse's interpreter does (small_m_fp8_epilogue.cuh). With a prologue
// (at most 8 rows) the activations are not read but computed by the GEMM from its producer's
// operands (small_m_fp8_prologue.cuh): the norm's rows into shared memory before the K loop,
// the SiLU's per step in registers.
#include <cstdint>

#include "kernels/device/cp_async.cuh"
#include "kernels/device/mbarrier.cuh"
#include "kernels/device/pdl.cuh"
#include "kernels/runtime/small_m_fp8_epilogue.cuh"
#include "kernels/runtime/small_m_fp8_gemm.h"
#include "kernels/runtime/small_m_fp8_prologue.cuh"

namespace fxfuse::runtime {
namespace {

namespace dev = kernels::device;

constexpr int kWarps = 8;          // warps per block
// Ring stages per warp. Four (more of the weight loaded before the previous step ends) made
// the decode step slower at every point measured (docs/runtime.md).
constexpr int kStages = 2;
constexpr int kRowsPerTile = 16;   // the mma's M: weight rows
constexpr int kTokensPerTile = 8;  // the mma's N: tokens
constexpr int kStepBytes = 128;    // K bytes of a row per step
constexpr int kStageBytes = kRowsPerTile * kStepBytes;
// Shared memory of a block: the warps' rings, then their partial sums [warp][acc][lane].
constexpr int kRingBytes = kWarps * kStages * kStageBytes;
template <int kTiles>
constexpr int smemBytes() {
  return kRingBytes + kWarps * kTiles * 4 * 32 * static_cast<int>(sizeof(float));
}
// The norm prologue's activation rows follow the partial sums.
constexpr int kActivationsOffset = smemBytes<1>();
int64_t normActivationBytes(int64_t K) { return kTokensPerTile * small_m::normActivationStride(K); }
constexpr int64_t kMaxNormPrologueSmemBytes =
    kActivationsOffset + kTokensPerTile * small_m::normActivationStride(kSmallMFp8NormPrologueMaxK);

struct Launch {
  SmallMFp8GemmParams p;
  int splits;           // warps per tile: 1, 2, 4 or 8
  int steps_per_split;  // K steps of one warp (the last split may have fewer)
};

// c += A (16 x 32, rows of weights) * B (32 x 8, columns of tokens), e4m3 in, f32 accumulate.
__device__ __forceinline__ void mmaE4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
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
__device__ __forceinline__ void copyStep(const SmallMFp8GemmParams& p, uint32_t stage, int64_t tile, int64_t step,
                                         bool step_in_split) {
  const int lane = threadIdx.x & 31;
  const uint8_t* w = static_cast<const uint8_t*>(p.w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int chunk = lane + 32 * i, row = chunk / 8, col = chunk % 8;
    const int64_t n = tile * kRowsPerTile + row, k = step * kStepBytes + col * 16;
    const bool valid = step_in_split && n < p.N && k < p.K;
    kernels::cpAsync16(stage + static_cast<uint32_t>(stageOffset(row, col * 16)),
                       valid ? w + n * p.w_row_stride + k : w, valid);
  }
}

// A K step's FP8 activations for lane (g, t): token tile a's token g, the 16 bytes at K offsets
// t*16 (v[a][0]) and 64 + t*16 (v[a][1]).
template <int kTiles>
struct StepX {
  uint4 v[kTiles][2];
};

// Where the activations come from: read as FP8 (kNone: global memory, L1-cached, every tile
// reads the same ones; kRmsNormQuant: the prologue's rows in shared memory) or computed per
// step (kSiluAndMulQuant). load() issues the reads of a step, toFp8() gives its activations
// (the loop loads the next step before it computes this one).
template <int kTiles, SmallMFp8Prologue kPro, typename T>
struct StepActivations {
  using InFlight = StepX<kTiles>;
  const uint8_t* base;
  int64_t row_stride;
  __device__ StepActivations(const SmallMFp8GemmParams& p, const uint8_t* shared_rows)
      : base(kPro == SmallMFp8Prologue::kNone ? static_cast<const uint8_t*>(p.x) : shared_rows),
        row_stride(kPro == SmallMFp8Prologue::kNone ? p.x_row_stride : small_m::normActivationStride(p.K)) {}
  __device__ __forceinline__ void load(const SmallMFp8GemmParams& p, int64_t step, InFlight& x) const {
    const int lane = threadIdx.x & 31, g = lane / 4, t = lane % 4;
    const int64_t k = step * kStepBytes + t * 16;
#pragma unroll
    for (int a = 0; a < kTiles; ++a) {
      const int64_t token = a * kTokensPerTile + g;
      const uint8_t* row = base + token * row_stride + k;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const bool valid = token < p.M && k + h * 64 < p.K;
        if (kPro == SmallMFp8Prologue::kNone)
          x.v[a][h] = loadActivations(row + h * 64, valid);
        else
          x.v[a][h] = valid ? *reinterpret_cast<const uint4*>(row + h * 64) : make_uint4(0, 0, 0, 0);
      }
    }
  }
  __device__ __forceinline__ void toFp8(const InFlight& in, StepX<kTiles>& x) const { x = in; }
};

template <typename T>
struct StepActivations<1, SmallMFp8Prologue::kSiluAndMulQuant, T> {
  using InFlight = small_m::SiluStepOperands;
  kernels::device::ScaleOp op;
  __device__ StepActivations(const SmallMFp8GemmParams& p, const uint8_t*)
      : op(kernels::device::ScaleOp::Make(*p.prologue.scale, p.prologue.divide)) {}
  __device__ __forceinline__ void load(const SmallMFp8GemmParams& p, int64_t step, InFlight& o) const {
    small_m::loadSiluStep<T>(p, step, kStepBytes, o);
  }
  __device__ __forceinline__ void toFp8(const InFlight& o, StepX<1>& x) const {
    small_m::siluStepToFp8<T>(o, op, x.v[0]);
  }
};

// One step: the weight fragments of rows g and g+8 from the stage, four mma per token tile.
template <int kTiles>
__device__ __forceinline__ void computeStep(const uint8_t* stage, const StepX<kTiles>& x, float (&acc)[kTiles][4]) {
  const int lane = threadIdx.x & 31, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint4 lo = *reinterpret_cast<const uint4*>(stage + stageOffset(g, h * 64 + t * 16));
    const uint4 hi = *reinterpret_cast<const uint4*>(stage + stageOffset(g + 8, h * 64 + t * 16));
#pragma unroll
    for (int a = 0; a < kTiles; ++a) {
      mmaE4m3(acc[a], lo.x, hi.x, lo.y, hi.y, x.v[a][h].x, x.v[a][h].y);
      mmaE4m3(acc[a], lo.z, hi.z, lo.w, hi.w, x.v[a][h].z, x.v[a][h].w);
    }
  }
}

// The block's tiles: the splits' partial sums added in split order, scaled, biased, rounded.
template <int kTiles>
__device__ void reduceAndStore(const Launch& l, const float (&acc)[kTiles][4], float* partial) {
  const SmallMFp8GemmParams& p = l.p;
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
#pragma unroll
  for (int a = 0; a < kTiles; ++a)
#pragma unroll
    for (int j = 0; j < 4; ++j) partial[(warp * kTiles * 4 + a * 4 + j) * 32 + lane] = acc[a][j];
  __syncthreads();
  const float scale = small_m::scaleProduct(p);
  const int tiles_per_block = kWarps / l.splits;
  for (int e = threadIdx.x; e < tiles_per_block * kTiles * 4 * 32; e += kWarps * 32) {
    const int tile_in_block = e / (kTiles * 4 * 32), elem = e / 32 % (kTiles * 4), el = e % 32;
    float sum = 0.f;
    for (int s = 0; s < l.splits; ++s) sum += partial[((tile_in_block * l.splits + s) * kTiles * 4 + elem) * 32 + el];
    // Accumulator j of lane el: token (el % 4) * 2 + j % 2 of the token tile, row el / 4 (+ 8 for j >= 2).
    const int a = elem / 4, j = elem % 4;
    const int64_t token = a * kTokensPerTile + (el % 4) * 2 + (j & 1);
    const int64_t n = (static_cast<int64_t>(blockIdx.x) * tiles_per_block + tile_in_block) * kRowsPerTile + el / 4 +
                      (j >= 2 ? 8 : 0);
    if (token >= p.M || n >= p.N) continue;
    small_m::storeOutput(p, token, n, sum, scale);
  }
}

// Blocks per SM the registers must allow: the prologues hold more in flight per step.
template <int kTiles, SmallMFp8Prologue kPro>
constexpr int kMinBlocks = kTiles == 1 && kPro == SmallMFp8Prologue::kNone ? 3 : 2;

template <int kTiles, SmallMFp8Prologue kPro, typename T>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks<kTiles, kPro>) smallMFp8GemmKernel(const Launch l) {
  extern __shared__ __align__(128) uint8_t smem[];
  const SmallMFp8GemmParams& p = l.p;
  const int warp = threadIdx.x / 32;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * (kWarps / l.splits) + warp / l.splits;
  const int64_t first = static_cast<int64_t>(warp % l.splits) * l.steps_per_split;
  const int64_t k_steps = (p.K + kStepBytes - 1) / kStepBytes;
  const int64_t steps = first < k_steps ? (k_steps - first < l.steps_per_split ? k_steps - first : l.steps_per_split) : 0;
  const uint8_t* ring = smem + warp * kStages * kStageBytes;
  const uint32_t ring_addr = static_cast<uint32_t>(__cvta_generic_to_shared(ring));
#pragma unroll
  for (int s = 0; s < kStages; ++s) {  // weights only: no wait for the previous step
    copyStep(p, ring_addr + s * kStageBytes, tile, first + s, s < steps);
    kernels::cpAsyncCommit();
  }
  kernels::waitForPrecedingGrid();
  if constexpr (kPro == SmallMFp8Prologue::kRmsNormQuant) {
    __shared__ float partials[32];
    small_m::normalizeRowsIntoShared<T>(p.prologue, p.M, p.K, smem + kActivationsOffset,
                                        small_m::normActivationStride(p.K), partials);
    if (p.prologue.residual) small_m::arriveAndUpdateResidual<T>(p.prologue, p.M, p.K);
  }
  const StepActivations<kTiles, kPro, T> source(p, smem + kActivationsOffset);
  float acc[kTiles][4] = {};
  typename StepActivations<kTiles, kPro, T>::InFlight next;
  if (steps > 0) source.load(p, first, next);
  for (int64_t i = 0; i < steps; ++i) {
    StepX<kTiles> x;
    source.toFp8(next, x);
    if (i + 1 < steps) source.load(p, first + i + 1, next);
    kernels::cpAsyncWait<kStages - 1>();  // this step's stage has landed (one group per step)
    __syncwarp();
    const int s = static_cast<int>(i % kStages);
    computeStep<kTiles>(ring + s * kStageBytes, x, acc);
    __syncwarp();  // every lane has read the stage before it is refilled
    copyStep(p, ring_addr + s * kStageBytes, tile, first + i + kStages, i + kStages < steps);
    kernels::cpAsyncCommit();
  }
  kernels::cpAsyncWait<0>();
  kernels::allowDependentGrids();
  reduceAndStore<kTiles>(l, acc, reinterpret_cast<float*>(smem + kRingBytes));
}

template <int kTiles, SmallMFp8Prologue kPro = SmallMFp8Prologue::kNone, typename T = __nv_bfloat16>
cudaError_t launchTiles(const SmallMFp8GemmParams& p, cudaStream_t stream) {
  constexpr auto kernel = smallMFp8GemmKernel<kTiles, kPro, T>;
  const bool rows_in_smem = kPro == SmallMFp8Prologue::kRmsNormQuant;
  const int bytes = smemBytes<kTiles>() + (rows_in_smem ? static_cast<int>(normActivationBytes(p.K)) : 0);
  // One limit per kernel and device (set once): the largest this kernel is launched with.
  cudaError_t e = dev::ensureSmemLimit<kernel>(rows_in_smem ? static_cast<int>(kMaxNormPrologueSmemBytes) : bytes);
  int device = 0, sms = 0, per_sm = 0;
  if (e == cudaSuccess) e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kWarps * 32, bytes);
  if (e != cudaSuccess) return e;
  const int64_t tiles = (p.N + kRowsPerTile - 1) / kRowsPerTile;
  const int64_t k_steps = (p.K + kStepBytes - 1) / kStepBytes;
  Launch l{p, 1, 0};
  l.splits = SmallMFp8GemmSplits(p.N, p.K, static_cast<int64_t>(sms) * (per_sm > 0 ? per_sm : 1));
  l.steps_per_split = static_cast<int>((k_steps + l.splits - 1) / l.splits);
  const int64_t per = kWarps / l.splits;
  const dim3 grid(static_cast<unsigned>((tiles + per - 1) / per));
  return kernels::LaunchProgrammatic(kernel, grid, dim3(kWarps * 32), bytes, stream, l);
}

// The prologue kernels of `p` by the dtype of their operands.
template <SmallMFp8Prologue kPro>
cudaError_t launchPrologue(const SmallMFp8GemmParams& p, cudaStream_t stream) {
  return p.prologue.dtype == DType::BF16 ? launchTiles<1, kPro, __nv_bfloat16>(p, stream)
                                         : launchTiles<1, kPro, __half>(p, stream);
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }
bool floatOutput(DType t) { return t == DType::BF16 || t == DType::F16 || t == DType::F32; }

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

namespace {

// Why the prologue of `p` cannot run (small_m_fp8_gemm.h), or nullptr.
const char* prologueUnsupported(const SmallMFp8GemmParams& p) {
  const SmallMFp8PrologueParams& q = p.prologue;
  const bool norm = q.kind == SmallMFp8Prologue::kRmsNormQuant;
  if (p.M > kSmallMFp8PrologueMaxRows) return "a prologue takes at most 8 rows";
  if (q.dtype != DType::BF16 && q.dtype != DType::F16) return "the prologue's operands must be BF16 or F16";
  if (!q.input || !q.scale) return "the prologue needs its input and scale";
  // rows of 16-byte vectors (elements: 2 bytes)
  const auto rows16 = [](const void* ptr, int64_t stride) { return aligned16(ptr) && stride % 8 == 0; };
  if (!rows16(q.input, q.input_row_stride) || q.input_row_stride < (norm ? p.K : 2 * p.K))
    return "the prologue's input rows must be 16-byte aligned and cover its width";
  if (!norm) return nullptr;
  if (p.K > kSmallMFp8NormPrologueMaxK) return "a norm prologue takes K up to 16384";
  if (q.weight && !aligned16(q.weight)) return "the norm weight must be 16-byte aligned";
  if (q.residual && (!rows16(q.residual, q.residual_row_stride) || q.residual_row_stride < p.K || !q.arrivals))
    return "the residual rows must be 16-byte aligned and cover K, with an arrival counter";
  const int64_t threads = q.norm_threads, vecs = q.norm_vecs_per_thread;
  if (threads < 32 || threads > 1024 || threads % 32 != 0 || (vecs != 1 && vecs != 2 && vecs != 4 && vecs != 8) ||
      threads * vecs * 8 < p.K)
    return "the norm partition must be 32..1024 threads (a multiple of 32) of 1, 2, 4 or 8 vectors covering K";
  return nullptr;
}

}  // namespace

const char* SmallMFp8GemmUnsupported(const SmallMFp8GemmParams& p) {
  const bool computed_x = p.prologue.kind != SmallMFp8Prologue::kNone;
  if (p.M < 1 || p.M > kSmallMFp8MaxRows) return "M must be 1..64";
  if (p.N < 1 || p.K < 16 || p.K % 16 != 0) return "N must be positive and K a positive multiple of 16";
  if ((!computed_x && !p.x) || !p.w || !p.out || !p.scale_x || !p.scale_w)
    return "x (unless a prologue computes it), w, out and both scales are required";
  if (computed_x) {
    if (const char* why = prologueUnsupported(p)) return why;
  } else if (!aligned16(p.x) || p.x_row_stride < p.K || p.x_row_stride % 16 != 0) {
    return "the x rows must be 16-byte aligned and cover K";
  }
  if (!aligned16(p.w) || p.w_row_stride < p.K || p.w_row_stride % 16 != 0)
    return "the w rows must be 16-byte aligned and cover K";
  if (p.out_row_stride < p.N) return "the output row stride must cover N";
  if (!floatOutput(p.out_dtype) || (p.bias && !floatOutput(p.bias_dtype))) return "out and bias must be BF16, F16 or F32";
  if (p.N > 0x7fffffff || p.K > 0x7fffffff) return "N and K must be below 2^31 (tensor-map coordinates)";
  return nullptr;
}

cudaError_t LaunchSmallMFp8Gemm(const SmallMFp8GemmParams& p, cudaStream_t stream) {
  if (SmallMFp8GemmUnsupported(p)) return cudaErrorInvalidValue;
  if (p.prologue.kind == SmallMFp8Prologue::kRmsNormQuant) return launchPrologue<SmallMFp8Prologue::kRmsNormQuant>(p, stream);
  if (p.prologue.kind == SmallMFp8Prologue::kSiluAndMulQuant)
    return launchPrologue<SmallMFp8Prologue::kSiluAndMulQuant>(p, stream);
  if (p.M > kSmallMFp8MmaSyncMaxRows) return LaunchSmallMFp8GemmWgmma(p, stream);
  return p.M <= kTokensPerTile ? launchTiles<1>(p, stream) : launchTiles<2>(p, stream);
}

}  // namespace fxfuse::runtime
