// The small-M FP8 GEMM (small_m_fp8_gemm.h): a weight stream through mma.sync m16n8k32 e4m3.
//
// One block owns 16 weight rows (16 outputs columns n) and all M tokens; its eight warps split
// K into contiguous ranges. Per step of 64 K bytes, lane (g, t) of a warp loads 16 bytes of
// weight rows g and g+8 and 16 bytes of token g's activations, all at K offset t * 16, and
// issues two mma per 8-token tile. The mma reduces over K, so the order of K inside one
// instruction is free as long as both operands use the same one: A register j of lane (g, t)
// and B register j of the same lane hold the same four K positions. The loads of several steps
// (weights and activations) are in flight together before the mma that consume them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/device/pdl.cuh"
#include "kernels/runtime/small_m_fp8_gemm.h"

namespace fxfuse::runtime {
namespace {

constexpr int kWarps = 8;
constexpr int kRowsPerBlock = 16;  // the mma's M: weight rows
constexpr int kTokensPerTile = 8;  // the mma's N: tokens
constexpr int kStepBytes = 64;     // K bytes a warp covers per step: 4 lanes x 16

// 16 bytes of weights: read once, so not kept in L1.
__device__ __forceinline__ uint4 loadStreaming(const uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// c += A (16 x 32, rows of weights) * B (32 x 8, columns of tokens), e4m3 in, f32 accumulate.
__device__ __forceinline__ void mmaE4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
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

// The block's partial sums of every warp, [warp][accumulator][lane] (lane fastest: no bank
// conflicts), added up by the whole block; each sum is one output element.
template <int kTiles>
__device__ void reduceAndStore(const SmallMFp8GemmParams& p, const float (&acc)[kTiles][4], int64_t n0) {
  __shared__ float partial[kWarps][kTiles * 4][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile)
#pragma unroll
    for (int j = 0; j < 4; ++j) partial[warp][tile * 4 + j][lane] = acc[tile][j];
  __syncthreads();
  const float scale = __fmul_rn(*p.scale_x, *p.scale_w);
  for (int e = threadIdx.x; e < kTiles * 4 * 32; e += kWarps * 32) {
    const int elem = e / 32, l = e % 32;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += partial[w][elem][l];
    // Accumulator j of lane l: token (l % 4) * 2 + j % 2 of the tile, weight row l / 4 (+ 8 for j >= 2).
    const int tile = elem / 4, j = elem % 4;
    const int64_t token = tile * kTokensPerTile + (l % 4) * 2 + (j & 1);
    const int64_t n = n0 + l / 4 + (j >= 2 ? 8 : 0);
    if (token >= p.M || n >= p.N) continue;
    float v = __fmul_rn(sum, scale);
    if (p.bias) v = __fadd_rn(v, loadAsFloat(p.bias, n, p.bias_dtype));
    storeRounded(p.out, token * p.out_row_stride + n, v, p.out_dtype);
  }
}

// The block's weight rows into L2 (128-byte lines), issued before the kernel waits for the
// previous step: no step writes weights, and a prefetch only warms the cache, so the weight
// stream starts while the previous kernel drains.
__device__ __forceinline__ void prefetchWeightRows(const SmallMFp8GemmParams& p, int64_t n0) {
  const int64_t rows = p.N - n0 < kRowsPerBlock ? p.N - n0 : kRowsPerBlock;
  const int64_t lines_per_row = (p.K + 127) / 128;
  const uint8_t* w = static_cast<const uint8_t*>(p.w);
  for (int64_t i = threadIdx.x; i < rows * lines_per_row; i += blockDim.x) {
    const uint8_t* line = w + (n0 + i / lines_per_row) * p.w_row_stride + (i % lines_per_row) * 128;
    asm volatile("prefetch.global.L2 [%0];" ::"l"(line));
  }
}

template <int kTiles>
__global__ void __launch_bounds__(kWarps * 32) smallMFp8GemmKernel(const SmallMFp8GemmParams p) {
  kernels::allowDependentGrids();
  prefetchWeightRows(p, static_cast<int64_t>(blockIdx.x) * kRowsPerBlock);
  kernels::waitForPrecedingGrid();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane / 4, t = lane % 4;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock;
  const bool has_lo = n0 + g < p.N, has_hi = n0 + g + 8 < p.N;
  // Rows past N read row 0 (in bounds) and are zeroed before use.
  const uint8_t* w_lo = static_cast<const uint8_t*>(p.w) + (has_lo ? (n0 + g) * p.w_row_stride : 0);
  const uint8_t* w_hi = static_cast<const uint8_t*>(p.w) + (has_hi ? (n0 + g + 8) * p.w_row_stride : 0);
  const uint8_t* x = static_cast<const uint8_t*>(p.x);
  const int64_t steps = (p.K + kStepBytes - 1) / kStepBytes;
  const int64_t per_warp = (steps + kWarps - 1) / kWarps;
  const int64_t first = warp * per_warp, last = min(steps, first + per_warp);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float acc[kTiles][4] = {};
  constexpr int kUnroll = kTiles <= 1 ? 8 : kTiles == 2 ? 4 : 2;  // steps in flight: registers bound it
  for (int64_t s0 = first; s0 < last; s0 += kUnroll) {
    // Every load of kUnroll steps (weights and activations) is issued before any mma uses one:
    // unconditionally, from a clamped address, and zeroed where it is out of range only when the
    // mma consumes it (a select right after a load would wait for it).
    uint4 lo[kUnroll], hi[kUnroll], xv[kUnroll][kTiles];
    bool in[kUnroll], token_in[kTiles];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t k = (s0 + u) * kStepBytes + t * 16;
      in[u] = s0 + u < last && k < p.K;  // K % 16 == 0: a lane's 16 bytes are all in or all out
      const int64_t kc = in[u] ? k : 0;
      lo[u] = loadStreaming(w_lo + kc);
      hi[u] = loadStreaming(w_hi + kc);
#pragma unroll
      for (int tile = 0; tile < kTiles; ++tile) {
        const int64_t token = tile * kTokensPerTile + g;
        token_in[tile] = token < p.M;
        xv[u][tile] = __ldg(reinterpret_cast<const uint4*>(x + (token_in[tile] ? token : 0) * p.x_row_stride + kc));
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint4 a_lo = in[u] && has_lo ? lo[u] : zero, a_hi = in[u] && has_hi ? hi[u] : zero;
#pragma unroll
      for (int tile = 0; tile < kTiles; ++tile) {
        const uint4 b = in[u] && token_in[tile] ? xv[u][tile] : zero;
        mmaE4m3(acc[tile], a_lo.x, a_hi.x, a_lo.y, a_hi.y, b.x, b.y);
        mmaE4m3(acc[tile], a_lo.z, a_hi.z, a_lo.w, a_hi.w, b.z, b.w);
      }
    }
  }
  reduceAndStore<kTiles>(p, acc, n0);
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
  if ((p.N + kRowsPerBlock - 1) / kRowsPerBlock > 0x7fffffff) return "N is too large";
  return nullptr;
}

cudaError_t LaunchSmallMFp8Gemm(const SmallMFp8GemmParams& p, cudaStream_t stream) {
  if (SmallMFp8GemmUnsupported(p)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((p.N + kRowsPerBlock - 1) / kRowsPerBlock));
  const dim3 block(kWarps * 32);
  const int64_t tiles = (p.M + kTokensPerTile - 1) / kTokensPerTile;
  const auto kernel = tiles <= 1   ? smallMFp8GemmKernel<1>
                      : tiles <= 2 ? smallMFp8GemmKernel<2>
                      : tiles <= 4 ? smallMFp8GemmKernel<4>
                                   : smallMFp8GemmKernel<8>;
  return kernels::LaunchProgrammatic(kernel, grid, block, 0, stream, p);
}

}  // namespace fxfuse::runtime
