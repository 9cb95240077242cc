// Attention over a short context (attention.h, LaunchShortAttention): the few tokens of a dense
// step attending over each other, as a decoder layer run on T <= 16 tokens without a KV cache
// does. The whole visible context of a block's queries fits in shared memory, so one block
// loads it once and every query row is a warp's few hundred instructions: no tiles padded to
// 64 or 128 rows, no split of the keys, no merge (docs/attention.md "Short contexts").
//
//   q [B, Hq, Sq, E] ─(rotate: optional)─► a warp's query row ─┐
//   k [B, Hk, Sk, E] ─(rotate: optional)─► K rows, shared ────┼─► s = q.K * scale ─► softmax (fp32)
//   v [B, Hk, Sk, E] ─────────────────────► V rows, shared ────┴─► P.V ─► out [B, Hq, Sq, E]
//
// Work: one block of kWarps warps per (batch, KV head, chunk of consecutive queries); the
// block's rows are the chunk's queries times the KV head's group of query heads, one row per
// warp at a time. Scores: lanes over keys, each a dot product over the K row in shared memory
// (rows padded to an odd number of words: no bank conflicts) with the query row broadcast from
// shared memory. P.V: lanes over pairs of output elements, the weights passed round the warp.
// Everything in fp32; the output is rounded by the reference kernel's own code
// (attention_output.cuh), so only the order of the sums differs from it.
//
// With `rotary` the block rotates q and k as it reads them, with the rotary step's rounding
// (rotary.cuh): the dense layer's rotary step is then not run (compiler/runtime/attention_prologue.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "kernels/device/numeric.cuh"
#include "kernels/device/pdl.cuh"
#include "kernels/device/reduce.cuh"
#include "kernels/runtime/attention.h"
#include "kernels/runtime/attention_output.cuh"
#include "kernels/runtime/rotary.cuh"

namespace fxfuse::runtime {
namespace {

using kernels::device::D16;

constexpr int kWarps = 8;
constexpr int kMaxKeys = static_cast<int>(kShortAttentionMaxKeys);
constexpr int kMaxHeadSize = 128;
constexpr int kMaxWords = kMaxHeadSize / 2;  // 32-bit words (element pairs) of a row
constexpr int kKeyRowWords = kMaxWords + 1;  // odd: lane j's row j starts in bank j
constexpr int kTargetBlocks = 128;           // chunks of queries until about this many blocks
static_assert(kMaxKeys <= 32, "a lane per key");

// One block's shared memory: the visible K rows (padded), V rows and each warp's query row.
struct Shared {
  uint32_t k[kMaxKeys][kKeyRowWords];
  uint32_t v[kMaxKeys][kMaxWords];
  uint32_t q[kWarps][kMaxWords];
};

// A word of shared memory as the pair of T it holds, in fp32.
template <typename T>
__device__ __forceinline__ float2 unpack(uint32_t w) {
  return D16<T>::PairToFloat2(*reinterpret_cast<const typename D16<T>::Pair*>(&w));
}

// Row `src` (E elements of T, contiguous) into `dst` (T elements), its first rot elements
// rotated at `pos` as the rotary step rotates them; threads `first`, first + `step`, ... share it.
template <typename T>
__device__ __forceinline__ void loadRow(T* dst, const T* src, int E, int rot, const AttentionRotary& r, int64_t pos,
                                        int first, int step) {
  const int half = rot / 2;
  for (int t = first; t < half + (E - rot); t += step) {
    if (t < half) {
      const int2 e = rotary::pairElements(r.neox, rot, t);
      const float2 cs =
          rotary::cosSin<T>(r.cos_sin_cache, r.cos_sin_dtype, r.cos_sin_rows, r.cos_sin_stride, rot, pos, t);
      const float2 x = rotary::rotatePair<T>(D16<T>::ToFloat(src[e.x]), D16<T>::ToFloat(src[e.y]), cs);
      dst[e.x] = D16<T>::FromFloat(x.x);
      dst[e.y] = D16<T>::FromFloat(x.y);
    } else {
      const int e = rot + (t - half);
      dst[e] = src[e];
    }
  }
}

// The block's visible K rows (rotated with `rot`) and V rows into shared memory, by all
// threads, kBatch items a thread with every load of a batch issued before its stores.
template <typename T>
__device__ __forceinline__ void fillKeysAndValues(Shared& sh, const T* kg, const T* vg, const AttentionParams& p,
                                                  const AttentionRotary& r, int rot, int keys) {
  constexpr int kThreads = kWarps * 32, kBatch = 4;
  const int E = static_cast<int>(p.E), words = E / 2, half = rot / 2, per_key = half + (E - rot);
  for (int base = threadIdx.x; base < keys * words; base += kBatch * kThreads) {
    uint32_t w[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int x = base + u * kThreads;
      if (x < keys * words)
        w[u] = *reinterpret_cast<const uint32_t*>(vg + (x / words) * p.v_stride[2] + 2 * (x % words));
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int x = base + u * kThreads;
      if (x < keys * words) sh.v[x / words][x % words] = w[u];
    }
  }
  for (int base = threadIdx.x; base < keys * per_key; base += kBatch * kThreads) {
    float2 x[kBatch], cs[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {  // item t < half: pair t rotated; else element rot + t - half copied
      const int i = base + u * kThreads, j = i / per_key, t = i % per_key;
      if (i >= keys * per_key) continue;
      const T* src = kg + j * p.k_stride[2];
      if (t < half) {
        const int2 e = rotary::pairElements(r.neox, rot, t);
        x[u] = make_float2(D16<T>::ToFloat(src[e.x]), D16<T>::ToFloat(src[e.y]));
        cs[u] = rotary::cosSin<T>(r.cos_sin_cache, r.cos_sin_dtype, r.cos_sin_rows, r.cos_sin_stride, rot,
                                  r.positions[j], t);
      } else {
        x[u].x = D16<T>::ToFloat(src[rot + t - half]);
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int i = base + u * kThreads, j = i / per_key, t = i % per_key;
      if (i >= keys * per_key) continue;
      T* dst = reinterpret_cast<T*>(sh.k[j]);
      if (t < half) {
        const int2 e = rotary::pairElements(r.neox, rot, t);
        const float2 y = rotary::rotatePair<T>(x[u].x, x[u].y, cs[u]);
        dst[e.x] = D16<T>::FromFloat(y.x);
        dst[e.y] = D16<T>::FromFloat(y.y);
      } else {
        dst[rot + t - half] = D16<T>::FromFloat(x[u].x);
      }
    }
  }
}

// Score of key j = lane (below `keys`) against the warp's query row, times the softmax scale;
// -inf past `keys`.
template <typename T>
__device__ __forceinline__ float score(const Shared& sh, int warp, int lane, int keys, int words, float scale) {
  if (lane >= keys) return -INFINITY;
  float a0 = 0.0f, a1 = 0.0f;
  for (int w = 0; w < words; ++w) {
    const float2 q = unpack<T>(sh.q[warp][w]);
    const float2 k = unpack<T>(sh.k[lane][w]);
    a0 = fmaf(q.x, k.x, a0);
    a1 = fmaf(q.y, k.y, a1);
  }
  return (a0 + a1) * scale;
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32)
    shortAttentionKernel(const AttentionParams p, const AttentionRotary r, int rot, int queries_per_block,
                         bool early_dependents) {
  __shared__ Shared sh;
  // One small wave: the next kernel takes no slot this one needs. Its weight stream then runs
  // beside this kernel's loads, or (late) only once the rows are in shared memory.
  if (early_dependents) kernels::allowDependentGrids();
  kernels::waitForPrecedingGrid();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t b = blockIdx.z, hk = blockIdx.y;
  const int i0 = static_cast<int>(blockIdx.x) * queries_per_block;
  const int i1 = static_cast<int>(min(p.Sq, static_cast<int64_t>(i0 + queries_per_block)));
  const int keys = static_cast<int>(p.causal ? min(p.Sk, static_cast<int64_t>(i1)) : p.Sk);
  const int E = static_cast<int>(p.E), words = E / 2;
  const T* kg = static_cast<const T*>(p.k) + b * p.k_stride[0] + hk * p.k_stride[1];
  const T* vg = static_cast<const T*>(p.v) + b * p.v_stride[0] + hk * p.v_stride[1];
  fillKeysAndValues(sh, kg, vg, p, r, rot, keys);
  __syncthreads();
  if (!early_dependents) kernels::allowDependentGrids();
  const int group = static_cast<int>(p.Hq / p.Hk), rows = group * (i1 - i0);
  const float inv_scale = p.out_dtype == DType::F8E4M3FN ? 1.0f / *p.out_scale : 1.0f;
  for (int row = warp; row < rows; row += kWarps) {
    const int i = i0 + row / group;
    const int64_t h = hk * group + row % group;
    const T* qg = static_cast<const T*>(p.q) + b * p.q_stride[0] + h * p.q_stride[1] + i * p.q_stride[2];
    loadRow(reinterpret_cast<T*>(sh.q[warp]), qg, E, rot, r, rot ? r.positions[i] : 0, lane, 32);
    __syncwarp();
    const int kend = p.causal ? min(keys, i + 1) : keys;
    const float s = score<T>(sh, warp, lane, kend, words, p.scale);
    const float m = kernels::device::WarpAllReduce(s, kernels::device::MaxOp{});
    const float pl = lane < kend ? expf(s - m) : 0.0f;  // key lane's weight
    const float l = kernels::device::WarpAllReduce(pl, kernels::device::SumOp{});
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // elements 2 lane, 2 lane + 1, 2 lane + 64, 2 lane + 65
    for (int j = 0; j < kend; ++j) {
      const float pj = __shfl_sync(0xffffffffu, pl, j);
      const float2 v0 = unpack<T>(sh.v[j][lane]);
      acc[0] = fmaf(pj, v0.x, acc[0]);
      acc[1] = fmaf(pj, v0.y, acc[1]);
      if (lane + 32 < words) {
        const float2 v1 = unpack<T>(sh.v[j][lane + 32]);
        acc[2] = fmaf(pj, v1.x, acc[2]);
        acc[3] = fmaf(pj, v1.y, acc[3]);
      }
    }
    const float inv = l > 0.0f ? 1.0f / l : __int_as_float(0x7fc00000);
    const int64_t obase = b * p.o_stride[0] + h * p.o_stride[1] + i * p.o_stride[2];
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int e = 2 * lane + 64 * (t / 2) + (t & 1);
      if (e < E) attention_io::storeOutput(p, obase + e, acc[t] * inv, inv_scale);
    }
    __syncwarp();  // the query row is read by every lane before the next row overwrites it
  }
}

bool aligned4(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 4 == 0; }
bool evenStrides(const int64_t (&s)[4]) { return s[0] % 2 == 0 && s[1] % 2 == 0 && s[2] % 2 == 0; }

// Where the kernel lets the next one launch: at its start (default) or once its rows are in
// shared memory ($FXFUSE_SHORT_EARLY_TRIGGER=0, for A/B runs). Read per call.
bool earlyDependents() {
  const char* v = std::getenv("FXFUSE_SHORT_EARLY_TRIGGER");
  return !(v && v[0] == '0');
}

}  // namespace

const char* ShortAttentionUnsupported(const AttentionParams& p, const AttentionRotary* rotary) {
  if (p.Sk < 1 || p.Sk > kShortAttentionMaxKeys) return "no key or more keys than the short attention holds";
  if (p.mask_dtype != DType::DTYPE_UNSPECIFIED) return "a mask";
  if (p.dtype != DType::BF16 && p.dtype != DType::F16) return "q/k/v not bf16 or f16";
  if (p.out_dtype != p.dtype && p.out_dtype != DType::F8E4M3FN) return "an output dtype other than q's or FP8";
  if (p.out_dtype == DType::F8E4M3FN && !p.out_scale) return "an FP8 output without its scale";
  if (p.E != p.Ev || p.E <= 0 || p.E > kMaxHeadSize || p.E % 2 != 0) return "E and Ev not one even size up to 128";
  if (p.Hk <= 0 || p.Hq % p.Hk != 0 || p.Hk > 65535 || p.B > 65535 || p.Sq < 0) return "head or batch counts";
  if (!p.q || !p.k || !p.v || !p.out) return "a null operand";
  if (p.q_stride[3] != 1 || p.k_stride[3] != 1 || p.v_stride[3] != 1 || p.o_stride[3] != 1)
    return "head elements not contiguous";
  if (!aligned4(p.v) || !evenStrides(p.v_stride)) return "V rows not 4-byte aligned";
  if (!rotary) return nullptr;
  if (p.B != 1 || p.Sq != p.Sk) return "rotary with more than one sequence or other keys than queries";
  if (!rotary->positions || !rotary->cos_sin_cache) return "rotary without positions or table";
  if (rotary->rotary_dim <= 0 || rotary->rotary_dim % 2 || rotary->rotary_dim > p.E)
    return "rotary_dim not even and in 1..E";
  if (rotary->cos_sin_dtype != DType::BF16 && rotary->cos_sin_dtype != DType::F16 &&
      rotary->cos_sin_dtype != DType::F32)
    return "a cos | sin table not bf16, f16 or f32";
  return nullptr;
}

cudaError_t LaunchShortAttention(const AttentionParams& p, const AttentionRotary* rotary, cudaStream_t stream) {
  if (ShortAttentionUnsupported(p, rotary)) return cudaErrorInvalidValue;
  if (p.B == 0 || p.Sq == 0 || p.Hq == 0) return cudaSuccess;
  const int64_t blocks_per_chunk = p.B * p.Hk;
  const int64_t chunks = std::min<int64_t>(p.Sq, (kTargetBlocks + blocks_per_chunk - 1) / blocks_per_chunk);
  const int queries_per_block = static_cast<int>((p.Sq + chunks - 1) / chunks);
  const dim3 grid(static_cast<unsigned>((p.Sq + queries_per_block - 1) / queries_per_block),
                  static_cast<unsigned>(p.Hk), static_cast<unsigned>(p.B));
  const AttentionRotary r = rotary ? *rotary : AttentionRotary{};
  const int rot = rotary ? static_cast<int>(rotary->rotary_dim) : 0;
  if (p.dtype == DType::BF16)
    return kernels::LaunchProgrammatic(shortAttentionKernel<__nv_bfloat16>, grid, dim3(kWarps * 32), 0, stream, p, r,
                                       rot, queries_per_block, earlyDependents());
  return kernels::LaunchProgrammatic(shortAttentionKernel<__half>, grid, dim3(kWarps * 32), 0, stream, p, r, rot,
                                     queries_per_block, earlyDependents());
}

}  // namespace fxfuse::runtime
