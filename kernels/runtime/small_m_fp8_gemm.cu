// The small-M FP8 GEMM (small_m_fp8_gemm.h): a weight stream through mma.sync m16n8k32 e4m3.
//
// Persistent blocks, one per multiprocessor, each owning every gridDim.x-th tile of 16 weight
// rows (16 output columns n) for all M tokens. A producer warp streams the tile's rows through a
// ring of shared-memory stages (Ring: 1 KB of K per row and stage, 6 stages), with one-dimensional bulk
// copies (TMA) that complete on the stage's mbarrier: no registers and no load instructions
// hold the stream, so a block keeps ~100 KB of weights in flight, and the next tile's copies
// start while this one is computed. Four consumer warps split each stage's K; per step of 64 K
// bytes, lane (g, t) reads 16 bytes of weight rows g and g+8 from shared memory and 16 bytes of
// token g's activations (global, L1-cached: every tile reads the same activations), all at K
// offset t * 16, and issues two mma per 8-token tile. The mma reduces over K, so the order of K
// inside one instruction is free as long as both operands use the same one: A register j of
// lane (g, t) and B register j of the same lane hold the same four K positions. At the end of a
// tile the consumers add their partial sums in shared memory and round as the interpreter does.
//
// Weights are never written by a plan step, so the producer starts streaming before the kernel
// waits for the previous step (programmatic dependent launch); only the consumers wait.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/device/mbarrier.cuh"
#include "kernels/device/pdl.cuh"
#include "kernels/runtime/small_m_fp8_gemm.h"

namespace fxfuse::runtime {
namespace {

namespace dev = kernels::device;

constexpr int kConsumerWarps = 4;
constexpr int kThreads = (kConsumerWarps + 1) * 32;  // + the producer warp
constexpr int kRowsPerTile = 16;    // the mma's M: weight rows
constexpr int kTokensPerTile = 8;   // the mma's N: tokens
constexpr int kStepBytes = 64;      // K bytes a warp covers per step: 4 lanes x 16
constexpr int kStepsPerGroup = 4;   // steps whose activations a consumer loads at once

// The stage ring: kChunk bytes of K of each weight row per stage (one bulk copy per row and
// stage), kStages stages. Bigger chunks mean fewer, longer copies for the same bytes in flight.
template <int kChunkT, int kStagesT>
struct Ring {
  static constexpr int kChunk = kChunkT;
  static constexpr int kStages = kStagesT;
  static constexpr int kRowPitch = kChunk + 64;  // rows g and g+1 64 bytes apart in the banks: no conflicts
  static constexpr int kStageBytes = kRowsPerTile * kRowPitch;
  static constexpr int kSteps = kChunk / kStepBytes / kConsumerWarps;  // per consumer warp and stage
  static_assert(kSteps % kStepsPerGroup == 0, "whole step groups per warp and stage");
};
// 1 KB chunks, 6 stages. Bigger chunks (2 KB x 5 and 4 KB x 3 stages, a quarter of the copies)
// measured slower on the H200 (docs/runtime.md).
using DefaultRing = Ring<1024, 6>;

// c += A (16 x 32, rows of weights) * B (32 x 8, columns of tokens), e4m3 in, f32 accumulate.
__device__ __forceinline__ void mmaE4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float loadAsFloat(const void* p, int64_t i, DType t) {
  if (t == DType::BF16) return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(p)[i]);
  if (t == DType::F16) return __half2float(reinterpret_cast<const __half*>(p)[i]);
  return reinterpret_cast<const float*>(p)[i];
}

__device__ __forceinline__ void storeRounded(void* p, int64_t i, float v, DType t) {
  if (t == DType::BF16) reinterpret_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else if (t == DType::F16) reinterpret_cast<__half*>(p)[i] = __float2half_rn(v);
  else reinterpret_cast<float*>(p)[i] = v;
}

// Barrier of the consumer warps only (named barrier 1; the producer never joins it).
__device__ __forceinline__ void consumerSync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32) : "memory");
}

// The shared memory of a block: the stage ring, its full/empty mbarriers and the consumers'
// partial sums of a tile ([warp][accumulator][lane], lane fastest: no bank conflicts).
template <int kTiles, class R>
struct Shared {
  uint8_t stages[R::kStages][R::kStageBytes];
  float partial[kConsumerWarps][kTiles * 4][32];
  uint64_t full[R::kStages], empty[R::kStages];
};

// The consumers' partial sums of one tile added up and stored; each sum is one output element.
template <int kTiles, class R>
__device__ void reduceAndStore(const SmallMFp8GemmParams& p, const float (&acc)[kTiles][4], int64_t n0,
                               Shared<kTiles, R>& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile)
#pragma unroll
    for (int j = 0; j < 4; ++j) sh.partial[warp][tile * 4 + j][lane] = acc[tile][j];
  consumerSync();
  const float scale = __fmul_rn(*p.scale_x, *p.scale_w);
  for (int e = threadIdx.x; e < kTiles * 4 * 32; e += kConsumerWarps * 32) {
    const int elem = e / 32, l = e % 32;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kConsumerWarps; ++w) sum += sh.partial[w][elem][l];
    // Accumulator j of lane l: token (l % 4) * 2 + j % 2 of the tile, weight row l / 4 (+ 8 for j >= 2).
    const int tile = elem / 4, j = elem % 4;
    const int64_t token = tile * kTokensPerTile + (l % 4) * 2 + (j & 1);
    const int64_t n = n0 + l / 4 + (j >= 2 ? 8 : 0);
    if (token >= p.M || n >= p.N) continue;
    float v = __fmul_rn(sum, scale);
    if (p.bias) v = __fadd_rn(v, loadAsFloat(p.bias, n, p.bias_dtype));
    storeRounded(p.out, token * p.out_row_stride + n, v, p.out_dtype);
  }
  consumerSync();  // the partial sums are read before the next tile writes them
}

// The producer warp: every chunk of every tile of this block into the ring, in the order the
// consumers take them. Lane 0 arms the stage's full barrier with the chunk's bytes, then lane r
// copies row r (rows past N are not copied: their sums are never stored).
template <class R>
__device__ void produce(const SmallMFp8GemmParams& p, uint8_t (*stages)[R::kStageBytes], uint64_t* full,
                        uint64_t* empty, int64_t tiles, int64_t chunks) {
  const int lane = threadIdx.x & 31;
  const uint8_t* w = static_cast<const uint8_t*>(p.w);
  int64_t it = 0;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t n0 = tile * kRowsPerTile;
    const int rows = static_cast<int>(p.N - n0 < kRowsPerTile ? p.N - n0 : kRowsPerTile);
    for (int64_t c = 0; c < chunks; ++c, ++it) {
      const int s = static_cast<int>(it % R::kStages);
      const uint32_t round = static_cast<uint32_t>(it / R::kStages);
      const int64_t k0 = c * R::kChunk;
      const uint32_t bytes = static_cast<uint32_t>(p.K - k0 < R::kChunk ? p.K - k0 : R::kChunk);
      const uint32_t full_bar = static_cast<uint32_t>(__cvta_generic_to_shared(&full[s]));
      if (lane == 0) {
        dev::mbarWait(static_cast<uint32_t>(__cvta_generic_to_shared(&empty[s])), (round & 1u) ^ 1u);
        dev::mbarArriveExpectTx(full_bar, bytes * static_cast<uint32_t>(rows));
      }
      __syncwarp();
      if (lane < rows)
        dev::bulkCopyToShared(static_cast<uint32_t>(__cvta_generic_to_shared(stages[s] + lane * R::kRowPitch)),
                              w + (n0 + lane) * p.w_row_stride + k0, bytes, full_bar);
    }
  }
}

// One group of a consumer warp's steps in stage `stage`: the activations of the group's steps
// (global, L1-cached), then two mma per step and token tile. `k_chunk`: the chunk's first K.
template <int kTiles, class R>
__device__ __forceinline__ void consumeGroup(const SmallMFp8GemmParams& p, const uint8_t* stage, int64_t k_chunk,
                                             int first_step, const bool (&token_in)[kTiles], float (&acc)[kTiles][4]) {
  const int lane = threadIdx.x & 31;
  const int g = lane / 4, t = lane % 4;
  const uint8_t* x = static_cast<const uint8_t*>(p.x);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  uint4 xv[kStepsPerGroup][kTiles];
  bool in[kStepsPerGroup];
#pragma unroll
  for (int u = 0; u < kStepsPerGroup; ++u) {
    const int64_t k = k_chunk + (first_step + u) * kStepBytes + t * 16;
    in[u] = k < p.K;  // K % 16 == 0: a lane's 16 bytes are all in or all out
#pragma unroll
    for (int tile = 0; tile < kTiles; ++tile) {
      const int64_t token = tile * kTokensPerTile + g;
      xv[u][tile] = in[u] && token_in[tile] ? __ldg(reinterpret_cast<const uint4*>(x + token * p.x_row_stride + k)) : zero;
    }
  }
#pragma unroll
  for (int u = 0; u < kStepsPerGroup; ++u) {
    const int in_chunk = (first_step + u) * kStepBytes + t * 16;
    // Past K the stage holds stale bytes: the activations there are zero, but 0 x NaN is not.
    const uint4 a_lo = in[u] ? *reinterpret_cast<const uint4*>(stage + g * R::kRowPitch + in_chunk) : zero;
    const uint4 a_hi = in[u] ? *reinterpret_cast<const uint4*>(stage + (g + 8) * R::kRowPitch + in_chunk) : zero;
#pragma unroll
    for (int tile = 0; tile < kTiles; ++tile) {
      mmaE4m3(acc[tile], a_lo.x, a_hi.x, a_lo.y, a_hi.y, xv[u][tile].x, xv[u][tile].y);
      mmaE4m3(acc[tile], a_lo.z, a_hi.z, a_lo.w, a_hi.w, xv[u][tile].z, xv[u][tile].w);
    }
  }
}

// A consumer warp: its quarter of each chunk's K for every tile of this block, a group of
// steps at a time. Parts of a chunk past K (its last chunk) read zero activations.
template <int kTiles, class R>
__device__ void consume(const SmallMFp8GemmParams& p, Shared<kTiles, R>& sh, int64_t tiles, int64_t chunks) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  bool token_in[kTiles];
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile) token_in[tile] = tile * kTokensPerTile + lane / 4 < p.M;
  int64_t it = 0;
  for (int64_t tile_n = blockIdx.x; tile_n < tiles; tile_n += gridDim.x) {
    float acc[kTiles][4] = {};
    for (int64_t c = 0; c < chunks; ++c, ++it) {
      const int s = static_cast<int>(it % R::kStages);
      dev::mbarWait(static_cast<uint32_t>(__cvta_generic_to_shared(&sh.full[s])), static_cast<uint32_t>(it / R::kStages) & 1u);
#pragma unroll
      for (int group = 0; group < R::kSteps / kStepsPerGroup; ++group)
        consumeGroup<kTiles, R>(p, sh.stages[s], c * R::kChunk, warp * R::kSteps + group * kStepsPerGroup, token_in,
                                acc);
      __syncwarp();
      if (lane == 0) dev::mbarArrive(static_cast<uint32_t>(__cvta_generic_to_shared(&sh.empty[s])));
    }
    reduceAndStore<kTiles, R>(p, acc, tile_n * kRowsPerTile, sh);
  }
}

template <int kTiles, class R>
__global__ void __launch_bounds__(kThreads) smallMFp8GemmKernel(const SmallMFp8GemmParams p) {
  kernels::allowDependentGrids();
  extern __shared__ __align__(128) uint8_t smem[];
  Shared<kTiles, R>& sh = *reinterpret_cast<Shared<kTiles, R>*>(smem);
  if (threadIdx.x < R::kStages) {
    dev::mbarInit(static_cast<uint32_t>(__cvta_generic_to_shared(&sh.full[threadIdx.x])), 1);
    dev::mbarInit(static_cast<uint32_t>(__cvta_generic_to_shared(&sh.empty[threadIdx.x])), kConsumerWarps);
  }
  dev::fenceBarrierInit();
  __syncthreads();
  const int64_t tiles = (p.N + kRowsPerTile - 1) / kRowsPerTile;
  const int64_t chunks = (p.K + R::kChunk - 1) / R::kChunk;
  if (threadIdx.x / 32 == kConsumerWarps) {
    produce<R>(p, sh.stages, sh.full, sh.empty, tiles, chunks);  // weights only: no wait for the previous step
    return;
  }
  kernels::waitForPrecedingGrid();
  consume<kTiles, R>(p, sh, tiles, chunks);
}

template <int kTiles, class R = DefaultRing>
cudaError_t launchTiles(const SmallMFp8GemmParams& p, cudaStream_t stream) {
  constexpr int kBytes = static_cast<int>(sizeof(Shared<kTiles, R>));
  const cudaError_t raised = dev::ensureSmemLimit<smallMFp8GemmKernel<kTiles, R>>(kBytes);
  if (raised != cudaSuccess) return raised;
  int device = 0, sms = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (e != cudaSuccess) return e;
  const int64_t tiles = (p.N + kRowsPerTile - 1) / kRowsPerTile;
  const dim3 grid(static_cast<unsigned>(tiles < sms ? tiles : sms));
  return kernels::LaunchProgrammatic(smallMFp8GemmKernel<kTiles, R>, grid, dim3(kThreads), kBytes, stream, p);
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }
bool floatOutput(DType t) { return t == DType::BF16 || t == DType::F16 || t == DType::F32; }

}  // namespace

const char* SmallMFp8GemmUnsupported(const SmallMFp8GemmParams& p) {
  if (p.M < 1 || p.M > kSmallMFp8MaxRows) return "M must be 1..64";
  if (p.N < 1 || p.K < 16 || p.K % 16 != 0) return "N must be positive and K a positive multiple of 16";
  if (!p.x || !p.w || !p.out || !p.scale_x || !p.scale_w) return "x, w, out and both scales are required";
  if (!aligned16(p.x) || !aligned16(p.w)) return "x and w must be 16-byte aligned";
  if (p.x_row_stride < p.K || p.x_row_stride % 16 != 0 || p.w_row_stride < p.K || p.w_row_stride % 16 != 0)
    return "the x and w row strides must cover K and be multiples of 16 bytes";
  if (p.out_row_stride < p.N) return "the output row stride must cover N";
  if (!floatOutput(p.out_dtype) || (p.bias && !floatOutput(p.bias_dtype))) return "out and bias must be BF16, F16 or F32";
  if ((p.N + kRowsPerTile - 1) / kRowsPerTile > 0x7fffffff) return "N is too large";
  return nullptr;
}

cudaError_t LaunchSmallMFp8Gemm(const SmallMFp8GemmParams& p, cudaStream_t stream) {
  if (SmallMFp8GemmUnsupported(p)) return cudaErrorInvalidValue;
  const int64_t tiles = (p.M + kTokensPerTile - 1) / kTokensPerTile;
  return tiles <= 1   ? launchTiles<1>(p, stream)
         : tiles <= 2 ? launchTiles<2>(p, stream)
         : tiles <= 4 ? launchTiles<4>(p, stream)
                      : launchTiles<8>(p, stream);
}

}  // namespace fxfuse::runtime
