// A persistent decode kernel for Llama-3.1-8B-shaped FP8 layers: does one kernel whose weight
// stream never stops beat the plan's chain of kernels at batch 1-8?
//
// docs/benchmarks/decode_step.md ("Where batch 1 loses a third of the floor"): at 1 x 1k the
// plan's layer takes ~78 us against a pure read of its weights of ~57 us; the ~15 us between
// the GEMMs (norms, rotary + cache write, attention, kernel boundaries) is time in which HBM
// idles. This prototype runs all layers of the step in one cooperative kernel, one CTA per SM:
//
//   producer warp:  qkv tiles | o tiles | gate/up tiles | down tiles | next layer's qkv ...
//                   (cp.async.bulk into a ring of shared-memory slots; it waits only for a
//                    free slot, never for activations, so it runs ahead through every phase)
//   8 consumer warps, phases separated by grid barriers (a counter in global memory):
//     norm1 (every CTA, redundantly) + qkv GEMM | rotary, cache write, attention, merge |
//     o GEMM | norm2 (every CTA) + gate/up GEMM + SiLU-mul quant | down GEMM | ...
//
// While the consumers wait for a barrier or attend, the ring keeps filling with the next GEMM's
// weights (~20 MB over the GPU, ~5 us of the stream), so the weight stream pauses only where a
// stretch without GEMM work outlasts the ring. Each CTA owns fixed 16-row weight tiles of every
// GEMM (gate and up tiles in pairs, so the SiLU-mul meets in the CTA), the 8 consumer warps
// split each 1024-byte K slot and sum in shared memory.
//
// Numerics follow vLLM's ops as the plan's kernels do (docs/vllm semantics: round16 after the
// add, the normalization and the weight; FP8 activations clamp(x * (1/scale)), an FP8 cache
// x / scale; GEMM out = round16(acc * (sx * sw)); silu_and_mul_quant; neox rotary rounded to
// bf16; attention in fp32 with the output rounded to bf16 then quantized). `--check` runs one and two layers over batches of 1, 3 and
// 8 sequences and compares the output, the residual, the last layer's intermediates and the
// caches with persistent_layer_reference.cc, the same math on kernels/reference's numerics
// (check() says how; exit 1 on a difference). This is a measurement of the design, not a plan
// step: the runtime does not launch it.
//
//   bazel build //examples/decode_step:persistent_layer_bench   (bundled by stage_device.sh)
//   ./persistent_layer_bench --check
//   ./persistent_layer_bench [--batch 1] [--context 1024] [--layers 32] [--reps 30] [--kv fp8]
//   ./persistent_layer_bench --batch 1 --context 1024 --skip attention   (what a phase costs)
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "examples/decode_step/cuda_check.h"
#include "examples/decode_step/persistent_layer_reference.h"
#include "kernels/device/mbarrier.cuh"
#include "kernels/device/mma_fp8.cuh"
#include "kernels/types.h"

namespace {

namespace dev = fxfuse::kernels::device;
using bf16 = __nv_bfloat16;
// The model's shape (kHidden, kQkv, ...), the GEMMs, the scales and the CPU reference.
using namespace fxfuse::examples::persistent;  // NOLINT: this file is that model's benchmark

// ---- the kernel's shape
constexpr int kMaxBatch = 8;  // one mma token tile
constexpr float kFp8Max = fxfuse::kernels::kFp8E4m3Max;

constexpr int kConsumerWarps = 8, kConsumers = kConsumerWarps * 32, kThreads = kConsumers + 32;
constexpr int kTileRows = 16, kSlotK = 1024;  // a slot: 16 weight rows x 1024 bytes of K
constexpr int kRowPitch = kSlotK + 64;        // rows 64 bytes off a bank period: no conflicts
constexpr int kSlotBytes = kTileRows * kRowPitch;
constexpr int kSlots = 10;
constexpr int kAhead = 4;  // activation K slices a warp loads before it needs them

// Shared memory: the ring, its barriers, the normalized FP8 activations (also the attention's
// warp states), the GEMM's per-warp partial sums and the gate values of a gate/up pair.
constexpr int kRingBytes = kSlots * kSlotBytes;
constexpr int kBarrierBytes = 2 * kSlots * 8;
constexpr int kXqBytes = kMaxBatch * kHidden;
constexpr int kPartialBytes = kConsumerWarps * 4 * 32 * 4;
constexpr int kGateBytes = kTileRows * kMaxBatch * 4;
constexpr int kSmemBytes = kRingBytes + kBarrierBytes + kXqBytes + kPartialBytes + kGateBytes + 16;
// An attention state of one head: o[kHeadDim] (unnormalized), m, l, padded to 16 bytes so every
// state's o starts 16-byte aligned (float4 accesses).
constexpr int kStatePitch = kHeadDim + 4;
static_assert(kConsumerWarps * kGroup * kStatePitch * 4 <= kXqBytes, "attention states fit");

struct LayerWeights {
  const uint8_t *qkv, *o, *gate_up, *down;  // FP8 rows [N, K] (vLLM's column-major [K, N])
  const bf16 *norm1, *norm2;                 // [kHidden]
  uint8_t *k_cache, *v_cache;                // [blocks, 16, kKvHeads, kHeadDim] of Params::cache
};

struct Params {
  const LayerWeights* layers;
  int num_layers, batch, max_blocks, attn_chunks;
  Scales s;
  CacheFormat cache;
  const int32_t* block_table;  // [batch, max_blocks]
  const int32_t* seq_lens;     // [batch]: context including this step's token
  const float* cos_sin;        // [positions, kHeadDim]: cos of the 64 frequencies, then sin
  bf16* hidden;                // [batch, kHidden]: layer 0's input, the last layer's output
  bf16* residual[2];           // ping-pong: norm i reads [i % 2], writes [(i + 1) % 2]
  bf16* qkv;                   // [batch, kQkv]
  uint8_t* attn;               // [batch, kHidden] FP8
  bf16* o;                     // [batch, kHidden]
  uint8_t* act;                // [batch, kInter] FP8
  float* attn_partials;        // [batch * kKvHeads * chunks][kGroup][kStatePitch]
  unsigned* attn_arrivals;     // [batch * kKvHeads], counting chunks modulo attn_chunks
  unsigned long long* barrier;
  unsigned long long barrier_base;  // the counter's value when this launch starts
  unsigned skip;                    // kSkip* bits: phases left out (timing only, outputs wrong)
};

// Phases a timing run may leave out (--skip), to see what each costs inside the persistent
// design: the attention phase, the two norms (the GEMMs read stale activations) or every grid
// barrier (CTAs drift apart; the step's time is then the slowest CTA's own work).
enum Skip : unsigned { kSkipAttention = 1, kSkipNorm = 2, kSkipBarrier = 4 };

// ---- the four GEMMs of a layer as units of work: a unit is a 16-row tile, or for gate/up a
// pair (gate tile p, up tile p + kInter / 16). CTA c owns units [c * U / G, (c + 1) * U / G).
__host__ __device__ constexpr int gemmUnits(int g) {
  return g == kGemmGateUp ? gemmN(g) / 2 / kTileRows : gemmN(g) / kTileRows;
}
__device__ const uint8_t* gemmWeight(const LayerWeights& l, int g) {
  return g == kGemmQkv ? l.qkv : g == kGemmO ? l.o : g == kGemmGateUp ? l.gate_up : l.down;
}
__device__ int tileOfUnit(int g, int unit, int half) { return g == kGemmGateUp ? unit + half * (kInter / kTileRows) : unit; }

struct Range {
  int first, count;
};
__device__ Range ownedUnits(int g) {
  const int64_t u = gemmUnits(g), c = blockIdx.x, n = gridDim.x;
  const int first = static_cast<int>(u * c / n), last = static_cast<int>(u * (c + 1) / n);
  return {first, last - first};
}

// ---- synchronization
__device__ __forceinline__ void consumerSync() { asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory"); }

// All consumers of all CTAs have finished the phase before any continues: `index` counts the
// launch's barriers from 0.
__device__ void gridBarrier(const Params& p, int index) {
  consumerSync();
  if (threadIdx.x == 0) {
    const unsigned long long target = p.barrier_base + static_cast<unsigned long long>(index + 1) * gridDim.x;
    __threadfence();
    asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(p.barrier) : "memory");
    unsigned long long seen = 0;
    do {
      asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(seen) : "l"(p.barrier) : "memory");
    } while (seen < target);
  }
  consumerSync();
}

// The ring as both sides walk it: slot i % kSlots, phase parity (i / kSlots) & 1.
struct Ring {
  uint32_t data, full, empty;  // shared addresses
  uint8_t* base;
  uint32_t next = 0;
  __device__ uint32_t slot() const { return next % kSlots; }
  __device__ uint32_t parity() const { return (next / kSlots) & 1u; }
};

// ---- the producer: every weight byte the CTA's consumers will read, in their order
__device__ __forceinline__ void produceTile(Ring& ring, const uint8_t* w, int k, int tile) {
  const int lane = threadIdx.x & 31;
  for (int ks = 0; ks < k / kSlotK; ++ks, ++ring.next) {
    const uint32_t s = ring.slot();
    dev::mbarWait(ring.empty + 8 * s, ring.parity() ^ 1u);  // the consumers freed it
    if (lane == 0) dev::mbarArriveExpectTx(ring.full + 8 * s, kTileRows * kSlotK);
    __syncwarp();
    if (lane < kTileRows) {
      const uint8_t* src = w + (static_cast<int64_t>(tile) * kTileRows + lane) * k + ks * kSlotK;
      dev::bulkCopyToShared(ring.data + s * kSlotBytes + lane * kRowPitch, src, kSlotK, ring.full + 8 * s);
    }
  }
}

__device__ __forceinline__ void producer(const Params& p, Ring& ring) {
  for (int layer = 0; layer < p.num_layers; ++layer) {
    const LayerWeights& l = p.layers[layer];
    for (int g = 0; g < kGemms; ++g) {
      const Range r = ownedUnits(g);
      for (int u = r.first; u < r.first + r.count; ++u)
        for (int half = 0; half < (g == kGemmGateUp ? 2 : 1); ++half)
          produceTile(ring, gemmWeight(l, g), gemmK(g), tileOfUnit(g, u, half));
    }
  }
}

// ---- consumer GEMM: one 16-row tile over all K, warp w taking bytes [w * 128, w * 128 + 128)
// of every slot; tokens are the mma's N (8), weight rows its M (16), as in small_m_fp8_gemm.cu.

// 16 activation bytes of token g at `at`: shared memory (the normalized rows) or global memory
// written earlier in this launch (read through L2: another SM wrote it).
template <bool kShared>
__device__ __forceinline__ uint4 loadActivations(const uint8_t* at, bool valid) {
  if (!valid) return make_uint4(0, 0, 0, 0);
  if (kShared) return *reinterpret_cast<const uint4*>(at);
  return __ldcg(reinterpret_cast<const uint4*>(at));
}

__device__ __forceinline__ void slotProduct(const uint8_t* slot, uint4 x0, uint4 x1, float (&acc)[4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const uint8_t* r0 = slot + g * kRowPitch + warp * 128 + t * 16;
  const uint8_t* r1 = r0 + 8 * kRowPitch;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint4 lo = *reinterpret_cast<const uint4*>(r0 + h * 64), hi = *reinterpret_cast<const uint4*>(r1 + h * 64);
    const uint4 x = h ? x1 : x0;
    dev::mmaE4m3(acc, lo.x, hi.x, lo.y, hi.y, x.x, x.y);
    dev::mmaE4m3(acc, lo.z, hi.z, lo.w, hi.w, x.z, x.w);
  }
}

// acc (this warp's K share of the tile) from the ring; x: [batch, k] FP8, row stride k.
template <bool kShared>
__device__ __forceinline__ void tileProduct(Ring& ring, const uint8_t* x, int k, int batch, float (&acc)[4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int slots = k / kSlotK;
  const bool valid = g < batch;
  const uint8_t* row = x + static_cast<int64_t>(valid ? g : 0) * k + warp * 128 + t * 16;
  uint4 xa[kAhead][2];
#pragma unroll
  for (int j = 0; j < kAhead; ++j)
    if (j < slots) {
      xa[j][0] = loadActivations<kShared>(row + j * kSlotK, valid);
      xa[j][1] = loadActivations<kShared>(row + j * kSlotK + 64, valid);
    }
  for (int s0 = 0; s0 < slots; s0 += kAhead) {
#pragma unroll
    for (int j = 0; j < kAhead; ++j) {
      const int s = s0 + j;
      if (s >= slots) continue;
      const uint4 x0 = xa[j][0], x1 = xa[j][1];
      if (s + kAhead < slots) {
        xa[j][0] = loadActivations<kShared>(row + (s + kAhead) * kSlotK, valid);
        xa[j][1] = loadActivations<kShared>(row + (s + kAhead) * kSlotK + 64, valid);
      }
      dev::mbarWait(ring.full + 8 * ring.slot(), ring.parity());
      slotProduct(ring.base + ring.slot() * kSlotBytes, x0, x1, acc);
      __syncwarp();
      if (lane == 0) dev::mbarArrive(ring.empty + 8 * ring.slot());
      ++ring.next;
    }
  }
}

// The 8 warps' sums of each (row, token) of the tile, in warp order; thread i < 128 gets row
// i / 8, token i % 8 (accumulator j of lane el: token (el % 4) * 2 + j % 2, row el / 4 + 8 * (j / 2)).
__device__ __forceinline__ float tileSum(const float (&acc)[4], float* partial) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int j = 0; j < 4; ++j) partial[(warp * 4 + j) * 32 + lane] = acc[j];
  consumerSync();
  float sum = 0.f;
  if (threadIdx.x < kTileRows * kMaxBatch) {
    const int row = threadIdx.x >> 3, token = threadIdx.x & 7;
    const int el = (row & 7) * 4 + (token >> 1), j = (token & 1) + (row >= 8 ? 2 : 0);
    for (int w = 0; w < kConsumerWarps; ++w) sum += partial[(w * 4 + j) * 32 + el];
  }
  consumerSync();
  return sum;
}

__device__ __forceinline__ float round16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }
__device__ __forceinline__ uint8_t toFp8(float v, float inv_scale) {
  float x = fminf(fmaxf(v * inv_scale, -kFp8Max), kFp8Max);
  if (v != v) x = v;
  return __nv_fp8_e4m3(x).__x;
}

struct Shared {
  Ring ring;
  uint8_t* xq;
  float* partial;
  float* gate;
};

// One GEMM phase: the CTA's units; thread i < 128 stores row i / 8, token i % 8 of each tile as
// round16(sum * sx * sw), and for gate/up pairs silu_and_mul_quant of the gate and up values.
template <bool kShared>
__device__ __forceinline__ void gemmPhase(const Params& p, Shared& sh, int g, const uint8_t* x, float scale) {
  const Range r = ownedUnits(g);
  const int row = threadIdx.x >> 3, token = threadIdx.x & 7;
  const bool mine = threadIdx.x < kTileRows * kMaxBatch && token < p.batch;
  for (int u = r.first; u < r.first + r.count; ++u) {
    for (int half = 0; half < (g == kGemmGateUp ? 2 : 1); ++half) {
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      tileProduct<kShared>(sh.ring, x, gemmK(g), p.batch, acc);
      const float v = round16(tileSum(acc, sh.partial) * scale);
      if (!mine) continue;
      const int n = tileOfUnit(g, u, half) * kTileRows + row;
      if (g == kGemmQkv) p.qkv[token * kQkv + n] = __float2bfloat16_rn(v);
      if (g == kGemmO) p.o[token * kHidden + n] = __float2bfloat16_rn(v);
      if (g == kGemmDown) p.hidden[token * kHidden + n] = __float2bfloat16_rn(v);
      if (g == kGemmGateUp && half == 0) sh.gate[threadIdx.x] = v;
      if (g == kGemmGateUp && half == 1) {
        const float gate = sh.gate[threadIdx.x];
        const float silu = round16(gate / (1.f + __expf(-gate)));
        p.act[token * kInter + n - kInter] = toFp8(round16(silu * v), 1.f / p.s.x_down);
      }
    }
  }
}

// ---- the norm in front of qkv and gate/up, done by every CTA for all tokens (warp m: token
// m): z = round16(x + residual) (layer 0's first norm: z = x), the new residual written by CTA
// 0, then fp8(round16(round16(z * rsqrt(mean(z^2) + eps)) * w) * (1 / scale)) into xq.
__device__ __forceinline__ void normToShared(const Params& p, const bf16* x, const bf16* r_in, bf16* r_out, const bf16* w,
                             float scale, uint8_t* xq) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (warp < p.batch) {
    constexpr int kChunks = kHidden / 256;  // 8 elements per lane per chunk
    uint4 z[kChunks];
    float sum_sq = 0.f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t at = static_cast<int64_t>(warp) * kHidden + c * 256 + lane * 8;
      const uint4 xv = __ldcg(reinterpret_cast<const uint4*>(x + at));
      uint4 rv = r_in ? __ldcg(reinterpret_cast<const uint4*>(r_in + at)) : make_uint4(0, 0, 0, 0);
      const bf16* xs = reinterpret_cast<const bf16*>(&xv);
      bf16* rs = reinterpret_cast<bf16*>(&rv);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float sum = round16(__bfloat162float(xs[e]) + (r_in ? __bfloat162float(rs[e]) : 0.f));
        rs[e] = __float2bfloat16_rn(sum);
        sum_sq += sum * sum;
      }
      z[c] = rv;
      if (blockIdx.x == 0) *reinterpret_cast<uint4*>(r_out + at) = rv;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, o);
    const float inv = rsqrtf(sum_sq / kHidden + kEps), inv_scale = 1.f / scale;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int col = c * 256 + lane * 8;
      const uint4 wv = __ldg(reinterpret_cast<const uint4*>(w + col));
      const bf16* zs = reinterpret_cast<const bf16*>(&z[c]);
      const bf16* ws = reinterpret_cast<const bf16*>(&wv);
      uint2 q = make_uint2(0, 0);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const uint32_t byte = toFp8(round16(round16(__bfloat162float(zs[e]) * inv) * __bfloat162float(ws[e])), inv_scale);
        (e < 4 ? q.x : q.y) |= byte << (8 * (e % 4));
      }
      *reinterpret_cast<uint2*>(xq + warp * kHidden + col) = q;
    }
  }
  consumerSync();
}

// ---- attention: unit = (sequence b, KV head, chunk of its context); the CTA's 8 warps split
// the chunk's keys, merge in shared memory, and the last CTA of a (b, KV head) to finish
// merges the chunks and writes the FP8 output of its kGroup query heads.
struct AttnState {
  float m[kGroup], l[kGroup], o[kGroup][4];  // lane's elements lane * 4 .. + 3; m in base 2
};

// Elements lane * 4 .. + 3 of a 128-element head row after the neox rotary at `cs` (cos then
// sin of the position), rounded to bf16 as vLLM's rotary kernel writes them.
__device__ __forceinline__ void rotatedLane(const bf16* row, const float* cs, int lane, float (&out)[4]) {
  const int d0 = lane * 4, half = kHeadDim / 2;
  const bool first = d0 < half;
  const uint2 own = __ldcg(reinterpret_cast<const uint2*>(row + d0));
  const uint2 other = __ldcg(reinterpret_cast<const uint2*>(row + (first ? d0 + half : d0 - half)));
  const bf16* x = reinterpret_cast<const bf16*>(&own);
  const bf16* y = reinterpret_cast<const bf16*>(&other);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int f = (d0 + i) % half;
    const float c = cs[f], s = cs[half + f], xv = __bfloat162float(x[i]), yv = __bfloat162float(y[i]);
    out[i] = round16(first ? xv * c - yv * s : xv * c + yv * s);
  }
}

// Keys a warp takes at a time: their K and V loads are in flight together, and their kGroup x
// kKeysInFlight = 32 scores leave the warp reduction one per lane.
constexpr int kKeysInFlight = 8;
static_assert(kGroup * kKeysInFlight == 32, "one score per lane");

__device__ __forceinline__ void unpack4(uint2 raw, float (&out)[4]) {
  const bf16* b = reinterpret_cast<const bf16*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] = __bfloat162float(b[i]);
}
// A lane's 4 consecutive elements of a cache row, raw: 8 bytes of bf16 or 4 of e4m3.
template <CacheFormat F>
using LaneRaw = std::conditional_t<F == CacheFormat::kFp8, uint32_t, uint2>;

// The lane's 4 cache elements as values (FP8: f32(x8) * scale, as fxfuse.paged_attention reads).
template <CacheFormat F>
__device__ __forceinline__ void unpackCache(LaneRaw<F> raw, float scale, float (&out)[4]) {
  if constexpr (F == CacheFormat::kFp8) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __nv_fp8_e4m3 v;
      v.__x = static_cast<__nv_fp8_storage_t>((raw >> (8 * i)) & 0xffu);
      out[i] = static_cast<float>(v) * scale;
    }
  } else {
    unpack4(raw, out);
  }
}

// The lane's 4 values as cache elements: bf16, or fp8(x / scale) saturated (vLLM's
// reshape_and_cache_flash with kv_cache_dtype=fp8 divides).
template <CacheFormat F>
__device__ __forceinline__ LaneRaw<F> packCache(const float (&in)[4], float scale);

__device__ __forceinline__ uint2 pack4(const float (&in)[4]) {
  uint2 raw;
  bf16* b = reinterpret_cast<bf16*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) b[i] = __float2bfloat16_rn(in[i]);
  return raw;
}

template <>
__device__ __forceinline__ LaneRaw<CacheFormat::kBf16> packCache<CacheFormat::kBf16>(const float (&in)[4], float) {
  return pack4(in);
}
template <>
__device__ __forceinline__ LaneRaw<CacheFormat::kFp8> packCache<CacheFormat::kFp8>(const float (&in)[4], float scale) {
  uint32_t raw = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) raw |= static_cast<uint32_t>(__nv_fp8_e4m3(in[i] / scale).__x) << (8 * i);
  return raw;
}

// Sums v[i] over the warp's lanes for 32 values at once with halving exchanges (31 shuffles
// instead of 5 per value): in the round of kHalf, a lane keeps one half of its values, sends the
// other to lane ^ kHalf and adds what it receives; lane l ends with the sum of value l.
template <int kHalf>
__device__ __forceinline__ float warpReduceScatter(float (&v)[32]) {
  const bool upper = (threadIdx.x & 31) & kHalf;
#pragma unroll
  for (int i = 0; i < kHalf; ++i) {
    const float lo = v[i], hi = v[i + kHalf];  // both read first: a select of addresses would put v in local memory
    v[i] = (upper ? hi : lo) + __shfl_xor_sync(0xffffffffu, upper ? lo : hi, kHalf);
  }
  if constexpr (kHalf == 1) return v[0];
  else return warpReduceScatter<kHalf / 2>(v);
}

// kKeysInFlight keys (this lane's 4 elements of each key's K and V row, raw cache elements; key j
// counts where bit j of `valid` is set) into the state of the kGroup heads. Lane l holds the
// score of key l / kGroup, head l % kGroup after the reduction; the online softmax update of a
// head takes its group's maximum and sum across the lanes holding that head.
template <CacheFormat F>
__device__ __forceinline__ void attendGroup(AttnState& st, const float (&q)[kGroup][4], const LaneRaw<F> (&kr)[kKeysInFlight],
                                            const LaneRaw<F> (&vr)[kKeysInFlight], unsigned valid, const Scales& sc) {
  const int lane = threadIdx.x & 31;
  float v[32];
#pragma unroll
  for (int j = 0; j < kKeysInFlight; ++j) {
    float k[4];
    unpackCache<F>(kr[j], sc.k_cache, k);
#pragma unroll
    for (int h = 0; h < kGroup; ++h) v[j * kGroup + h] = q[h][0] * k[0] + q[h][1] * k[1] + q[h][2] * k[2] + q[h][3] * k[3];
  }
  float score = warpReduceScatter<16>(v);
  if (!((valid >> (lane / kGroup)) & 1u)) score = -INFINITY;
  float group_max = score;
#pragma unroll
  for (int o = kGroup; o < 32; o <<= 1) group_max = fmaxf(group_max, __shfl_xor_sync(0xffffffffu, group_max, o));
  float m_new[kGroup], factor[kGroup];
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
    m_new[h] = fmaxf(st.m[h], __shfl_sync(0xffffffffu, group_max, h));  // lane h holds head h
    factor[h] = st.m[h] == -INFINITY ? 0.f : exp2f(st.m[h] - m_new[h]);
  }
  float my_m = m_new[0];  // m_new[lane % kGroup] without a dynamic index (local memory)
#pragma unroll
  for (int h = 1; h < kGroup; ++h) my_m = lane % kGroup == h ? m_new[h] : my_m;
  const float pw = score == -INFINITY ? 0.f : exp2f(score - my_m);
  float group_sum = pw;
#pragma unroll
  for (int o = kGroup; o < 32; o <<= 1) group_sum += __shfl_xor_sync(0xffffffffu, group_sum, o);
#pragma unroll
  for (int h = 0; h < kGroup; ++h) {
    st.l[h] = st.l[h] * factor[h] + __shfl_sync(0xffffffffu, group_sum, h);
    st.m[h] = m_new[h];
#pragma unroll
    for (int i = 0; i < 4; ++i) st.o[h][i] *= factor[h];
  }
#pragma unroll
  for (int j = 0; j < kKeysInFlight; ++j) {
    float val[4];
    unpackCache<F>(vr[j], sc.v_cache, val);
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      const float pj = __shfl_sync(0xffffffffu, pw, j * kGroup + h);
#pragma unroll
      for (int i = 0; i < 4; ++i) st.o[h][i] += pj * val[i];
    }
  }
}

// Keys [lo, hi) of sequence b, KV head hk, into `st`. The step's own token (position ctx - 1)
// comes from qkv (its K rotated here), is written into the cache by the warp that sees it and
// attended as the cache holds it (FP8: quantized).
template <CacheFormat F>
__device__ __forceinline__ void attendRange(const Params& p, const LayerWeights& l, int b, int hk, int lo, int hi,
                                            const float (&q)[kGroup][4], AttnState& st) {
  using Raw = LaneRaw<F>;
  const int lane = threadIdx.x & 31, ctx = p.seq_lens[b];
  const int32_t* table = p.block_table + static_cast<int64_t>(b) * p.max_blocks;
  auto at = [&](uint8_t* cache, int pos) {  // the lane's 4 elements of position pos
    const int64_t row = (static_cast<int64_t>(table[pos / kBlockSize]) * kBlockSize + pos % kBlockSize) * kKvHeads + hk;
    return reinterpret_cast<Raw*>(cache + (row * kHeadDim + lane * 4) * cacheBytes(F));
  };
  for (int k0 = lo; k0 < hi; k0 += kKeysInFlight) {
    Raw kr[kKeysInFlight], vr[kKeysInFlight];
    unsigned valid = 0;
#pragma unroll
    for (int j = 0; j < kKeysInFlight; ++j) {
      const int pos = k0 + j;
      kr[j] = vr[j] = Raw{};
      if (pos < hi) valid |= 1u << j;
      if (pos < hi && pos != ctx - 1) kr[j] = __ldg(at(l.k_cache, pos)), vr[j] = __ldg(at(l.v_cache, pos));
      if (pos < hi && pos == ctx - 1) {
        const bf16* tok = p.qkv + static_cast<int64_t>(b) * kQkv;
        float k[4], v[4];
        rotatedLane(tok + (kHeads + hk) * kHeadDim, p.cos_sin + static_cast<int64_t>(pos) * kHeadDim, lane, k);
        unpack4(__ldcg(reinterpret_cast<const uint2*>(tok + (kHeads + kKvHeads + hk) * kHeadDim + lane * 4)), v);
        kr[j] = packCache<F>(k, p.s.k_cache), vr[j] = packCache<F>(v, p.s.v_cache);  // bf16: exact
        *at(l.k_cache, pos) = kr[j], *at(l.v_cache, pos) = vr[j];
      }
    }
    attendGroup<F>(st, q, kr, vr, valid, p.s);
  }
}

// Merges `count` states read by `load(i, m, l, o)` (lane's 4 elements of head h) in order.
template <typename Load>
__device__ __forceinline__ void mergeStates(int count, Load&& load, float& m_out, float& l_out, float (&o_out)[4]) {
  m_out = -INFINITY;
  for (int i = 0; i < count; ++i) {
    float m, l, o[4];
    load(i, m, l, o);
    const float mm = fmaxf(m_out, m);
    const float a = m_out == -INFINITY ? 0.f : exp2f(m_out - mm), c = m == -INFINITY ? 0.f : exp2f(m - mm);
    l_out = (i == 0 ? 0.f : l_out * a) + l * c;
#pragma unroll
    for (int e = 0; e < 4; ++e) o_out[e] = (i == 0 ? 0.f : o_out[e] * a) + o[e] * c;
    m_out = mm;
  }
}

__device__ __forceinline__ void storeAttention(const Params& p, int b, int head, float l, const float (&o)[4]) {
  const int lane = threadIdx.x & 31;
  const float inv_scale = 1.f / p.s.x_o;
  uint32_t q = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) q |= static_cast<uint32_t>(toFp8(round16(o[e] / l), inv_scale)) << (8 * e);
  *reinterpret_cast<uint32_t*>(p.attn + static_cast<int64_t>(b) * kHidden + head * kHeadDim + lane * 4) = q;
}

// The unit's warp states (in `states`: [warp][head][kStatePitch]) merged by warp h for head h;
// one chunk: the output, else the chunk's partial state, and the chunks' last CTA merges them.
__device__ __forceinline__ void finishUnit(const Params& p, int b, int hk, int chunk, float* states, unsigned* last_flag) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, chunks = p.attn_chunks;
  const int64_t row = static_cast<int64_t>(b) * kKvHeads + hk;
  if (warp < kGroup) {
    float m, l, o[4];
    mergeStates(kConsumerWarps, [&](int w, float& mw, float& lw, float (&ow)[4]) {
      const float* s = states + (w * kGroup + warp) * kStatePitch;
      mw = s[kHeadDim], lw = s[kHeadDim + 1];
      for (int e = 0; e < 4; ++e) ow[e] = s[lane * 4 + e];
    }, m, l, o);
    if (chunks == 1) {
      storeAttention(p, b, hk * kGroup + warp, l, o);
    } else {
      float* dst = p.attn_partials + ((row * chunks + chunk) * kGroup + warp) * kStatePitch;
      *reinterpret_cast<float4*>(dst + lane * 4) = make_float4(o[0], o[1], o[2], o[3]);
      if (lane == 0) dst[kHeadDim] = m, dst[kHeadDim + 1] = l;
    }
  }
  if (chunks == 1) return;
  __threadfence();
  consumerSync();
  // atomicInc wraps to 0 after the last arrival: every `chunks` arrivals make one merge, with no
  // reset that a later layer's arrivals could race with (--skip barrier).
  if (threadIdx.x == 0) *last_flag = atomicInc(p.attn_arrivals + row, chunks - 1) == static_cast<unsigned>(chunks - 1);
  consumerSync();
  if (!*last_flag) return;
  __threadfence();
  if (warp < kGroup) {
    float m, l, o[4];
    mergeStates(chunks, [&](int c, float& mc, float& lc, float (&oc)[4]) {
      const float* s = p.attn_partials + ((row * chunks + c) * kGroup + warp) * kStatePitch;
      const float4 v = __ldcg(reinterpret_cast<const float4*>(s + lane * 4));
      oc[0] = v.x, oc[1] = v.y, oc[2] = v.z, oc[3] = v.w;
      mc = __ldcg(s + kHeadDim), lc = __ldcg(s + kHeadDim + 1);
    }, m, l, o);
    storeAttention(p, b, hk * kGroup + warp, l, o);
  }
}

template <CacheFormat F>
__device__ __forceinline__ void attentionPhase(const Params& p, const LayerWeights& l, float* states, unsigned* last_flag) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, chunks = p.attn_chunks;
  const float q_factor = 1.4426950408889634f / sqrtf(static_cast<float>(kHeadDim));
  for (int unit = blockIdx.x; unit < p.batch * kKvHeads * chunks; unit += gridDim.x) {
    const int b = unit / (kKvHeads * chunks), hk = unit / chunks % kKvHeads, chunk = unit % chunks;
    const int ctx = p.seq_lens[b], per = (ctx + chunks - 1) / chunks;
    const int lo = min(ctx, chunk * per), hi = min(ctx, lo + per), per_warp = (hi - lo + kConsumerWarps - 1) / kConsumerWarps;
    const int wlo = min(hi, lo + warp * per_warp), whi = min(hi, wlo + per_warp);
    float q[kGroup][4];
    const float* cs = p.cos_sin + static_cast<int64_t>(ctx - 1) * kHeadDim;
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      rotatedLane(p.qkv + static_cast<int64_t>(b) * kQkv + (hk * kGroup + h) * kHeadDim, cs, lane, q[h]);
      for (int i = 0; i < 4; ++i) q[h][i] *= q_factor;
    }
    AttnState st;
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      st.m[h] = -INFINITY, st.l[h] = 0.f;
      for (int i = 0; i < 4; ++i) st.o[h][i] = 0.f;
    }
    attendRange<F>(p, l, b, hk, wlo, whi, q, st);
#pragma unroll
    for (int h = 0; h < kGroup; ++h) {
      float* s = states + (warp * kGroup + h) * kStatePitch;
      for (int i = 0; i < 4; ++i) s[lane * 4 + i] = st.o[h][i];
      if (lane == 0) s[kHeadDim] = st.m[h], s[kHeadDim + 1] = st.l[h];
    }
    consumerSync();
    finishUnit(p, b, hk, chunk, states, last_flag);
    consumerSync();
  }
}

// The attention phase in the layer's cache format. Not inlined, and called from one place: its
// registers are allocated apart from the GEMM and norm phases' (inlined, the kernel spilled
// inside the key loop at its 168-register limit: 9 warps per CTA).
__device__ __noinline__ void attention(const Params& p, const LayerWeights& l, float* states, unsigned* last_flag) {
  if (p.cache == CacheFormat::kFp8) attentionPhase<CacheFormat::kFp8>(p, l, states, last_flag);
  else attentionPhase<CacheFormat::kBf16>(p, l, states, last_flag);
}

// ---- the kernel
__device__ Shared carveShared(uint8_t* smem) {
  Shared sh;
  sh.ring.base = smem;
  sh.ring.data = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  sh.ring.full = sh.ring.data + kRingBytes;
  sh.ring.empty = sh.ring.full + 8 * kSlots;
  sh.xq = smem + kRingBytes + kBarrierBytes;
  sh.partial = reinterpret_cast<float*>(sh.xq + kXqBytes);
  sh.gate = sh.partial + kPartialBytes / 4;
  return sh;
}

__device__ __forceinline__ void consumer(const Params& p, Shared& sh, unsigned* last_flag) {
  int barrier = 0;
  auto sync = [&] {
    if (!(p.skip & kSkipBarrier)) gridBarrier(p, barrier++);
  };
  for (int layer = 0; layer < p.num_layers; ++layer) {
    const LayerWeights& l = p.layers[layer];
    const int norm = 2 * layer;
    if (!(p.skip & kSkipNorm))
      normToShared(p, p.hidden, layer ? p.residual[norm % 2] : nullptr, p.residual[(norm + 1) % 2], l.norm1,
                   p.s.x_qkv, sh.xq);
    gemmPhase<true>(p, sh, kGemmQkv, sh.xq, p.s.x_qkv * p.s.w_qkv);
    sync();
    if (!(p.skip & kSkipAttention)) attention(p, l, reinterpret_cast<float*>(sh.xq), last_flag);
    sync();
    gemmPhase<false>(p, sh, kGemmO, p.attn, p.s.x_o * p.s.w_o);
    sync();
    if (!(p.skip & kSkipNorm))
      normToShared(p, p.o, p.residual[(norm + 1) % 2], p.residual[norm % 2], l.norm2, p.s.x_gu, sh.xq);
    gemmPhase<true>(p, sh, kGemmGateUp, sh.xq, p.s.x_gu * p.s.w_gu);
    sync();
    gemmPhase<false>(p, sh, kGemmDown, p.act, p.s.x_down * p.s.w_down);
    sync();
  }
}
constexpr int kBarriersPerLayer = 5;

// `p` stays in the parameter space (__grid_constant__): the attention phase takes it by
// reference, which would otherwise copy it into every thread's local memory.
__global__ void __launch_bounds__(kThreads, 1) persistentDecodeKernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ unsigned last_flag;
  Shared sh = carveShared(smem);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kSlots; ++s) {
      dev::mbarInit(sh.ring.full + 8 * s, 1);
      dev::mbarInit(sh.ring.empty + 8 * s, kConsumerWarps);
    }
    dev::fenceBarrierInit();
  }
  __syncthreads();
  if (threadIdx.x >= kConsumers) producer(p, sh.ring);
  else consumer(p, sh, &last_flag);
}

// ---- host: inputs
__device__ uint32_t hash32(uint64_t i, uint32_t seed) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31, x *= 0x94D049BB133111EBull, x ^= x >> 29;
  return static_cast<uint32_t>(x >> 16);
}
__device__ float uniform(uint64_t i, uint32_t seed) { return hash32(i, seed) * (2.f / 4294967296.f) - 1.f; }

__global__ void fillFp8(uint8_t* p, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * static_cast<int64_t>(blockDim.x))
    p[i] = __nv_fp8_e4m3(uniform(i, seed)).__x;
}
__global__ void fillBf16(bf16* p, int64_t n, uint32_t seed, float center, float spread) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += gridDim.x * static_cast<int64_t>(blockDim.x))
    p[i] = __float2bfloat16_rn(center + spread * uniform(i, seed));
}

struct Model {
  int layers = 0, blocks = 0;
  std::vector<LayerWeights> host_layers;
  std::vector<void*> owned;
  LayerWeights* layers_dev = nullptr;
  Scales scales{};
  CacheFormat cache = CacheFormat::kBf16;
};

template <typename T>
T* deviceAlloc(Model& m, int64_t count) {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, count * sizeof(T)));
  m.owned.push_back(p);
  return static_cast<T*>(p);
}

// Random FP8 weights uniform in [-1, 1] with scales that keep every GEMM's output near unit
// variance, norm weights in [0.5, 1.5], bf16 cache values in [-1, 1] (FP8: bytes of [-1, 1]
// times the scale).
Model makeModel(int layers, int blocks, CacheFormat cache) {
  Model m;
  m.layers = layers, m.blocks = blocks, m.cache = cache;
  const float w_sd = 0.5f;  // about the standard deviation of the random FP8 weights
  m.scales = {1.f / (w_sd * std::sqrt(float(kHidden))), 1.f / (w_sd * std::sqrt(float(kHidden))),
              1.f / (w_sd * std::sqrt(float(kHidden))), 1.f / (w_sd * std::sqrt(float(kInter))),
              4.f / kFp8Max, 1.f / kFp8Max, 4.f / kFp8Max, 2.f / kFp8Max,
              // FP8 cache scales (unused for bf16): not powers of two, and v's small enough that
              // a few percent of the step's values saturate, so --check sees a scale misapplied.
              0.37f, 2.f / kFp8Max};
  const int64_t elements = static_cast<int64_t>(blocks) * kBlockSize * kKvHeads * kHeadDim;
  uint32_t seed = 1;
  for (int i = 0; i < layers; ++i) {
    LayerWeights l{};
    const int64_t sizes[kGemms] = {int64_t(kQkv) * kHidden, int64_t(kHidden) * kHidden, int64_t(2 * kInter) * kHidden,
                                   int64_t(kHidden) * kInter};
    uint8_t* w[kGemms];
    for (int g = 0; g < kGemms; ++g) {
      w[g] = deviceAlloc<uint8_t>(m, sizes[g]);
      fillFp8<<<1024, 256>>>(w[g], sizes[g], seed++);
    }
    l.qkv = w[0], l.o = w[1], l.gate_up = w[2], l.down = w[3];
    bf16* norms[2];
    for (bf16*& n : norms) n = deviceAlloc<bf16>(m, kHidden), fillBf16<<<16, 256>>>(n, kHidden, seed++, 1.f, 0.5f);
    l.norm1 = norms[0], l.norm2 = norms[1];
    for (uint8_t** c : {&l.k_cache, &l.v_cache}) {
      *c = deviceAlloc<uint8_t>(m, elements * cacheBytes(cache));
      if (cache == CacheFormat::kFp8) fillFp8<<<1024, 256>>>(*c, elements, seed++);
      else fillBf16<<<1024, 256>>>(reinterpret_cast<bf16*>(*c), elements, seed++, 0.f, 1.f);
    }
    m.host_layers.push_back(l);
  }
  m.layers_dev = deviceAlloc<LayerWeights>(m, layers);
  CHECK(cudaMemcpy(m.layers_dev, m.host_layers.data(), layers * sizeof(LayerWeights), cudaMemcpyHostToDevice));
  CHECK(cudaGetLastError());
  return m;
}

void freeModel(Model& m) {
  for (void* p : m.owned) CHECK(cudaFree(p));
  m.owned.clear();
}

// The step's batch: contexts, a shuffled block table over the model's blocks, activations.
struct Batch : HostBatch {
  Params params{};
  Model* model = nullptr;
};

Batch makeBatch(Model& m, const std::vector<int>& contexts, int sms, uint32_t seed) {
  Batch b;
  b.model = &m;
  b.cache = m.cache;
  b.batch = static_cast<int>(contexts.size());
  for (int c : contexts) b.max_blocks = std::max(b.max_blocks, (c + kBlockSize - 1) / kBlockSize);
  std::vector<int32_t> order(m.blocks);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  b.table.assign(static_cast<size_t>(b.batch) * b.max_blocks, 0);
  int next = 0;
  for (int s = 0; s < b.batch; ++s)
    for (int i = 0; i < (contexts[s] + kBlockSize - 1) / kBlockSize; ++i) b.table[s * b.max_blocks + i] = order[next++];
  b.seq_lens.assign(contexts.begin(), contexts.end());
  const int max_ctx = *std::max_element(contexts.begin(), contexts.end());
  Params& p = b.params;
  p.layers = m.layers_dev, p.num_layers = m.layers, p.batch = b.batch, p.max_blocks = b.max_blocks, p.s = m.scales;
  p.cache = m.cache;
  p.attn_chunks = std::max(1, std::min(16, sms / (b.batch * kKvHeads)));
  int32_t* table = deviceAlloc<int32_t>(m, b.table.size());
  int32_t* lens = deviceAlloc<int32_t>(m, b.batch);
  CHECK(cudaMemcpy(table, b.table.data(), b.table.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(lens, b.seq_lens.data(), b.batch * 4, cudaMemcpyHostToDevice));
  p.block_table = table, p.seq_lens = lens;
  const std::vector<float> cs = CosSinTable(max_ctx);
  float* cs_dev = deviceAlloc<float>(m, cs.size());
  CHECK(cudaMemcpy(cs_dev, cs.data(), cs.size() * 4, cudaMemcpyHostToDevice));
  p.cos_sin = cs_dev;
  p.hidden = deviceAlloc<bf16>(m, int64_t(kMaxBatch) * kHidden);
  fillBf16<<<64, 256>>>(p.hidden, int64_t(kMaxBatch) * kHidden, seed + 7, 0.f, 1.f);
  p.residual[0] = deviceAlloc<bf16>(m, int64_t(kMaxBatch) * kHidden);
  p.residual[1] = deviceAlloc<bf16>(m, int64_t(kMaxBatch) * kHidden);
  p.qkv = deviceAlloc<bf16>(m, int64_t(kMaxBatch) * kQkv);
  p.attn = deviceAlloc<uint8_t>(m, int64_t(kMaxBatch) * kHidden);
  p.o = deviceAlloc<bf16>(m, int64_t(kMaxBatch) * kHidden);
  p.act = deviceAlloc<uint8_t>(m, int64_t(kMaxBatch) * kInter);
  p.attn_partials = deviceAlloc<float>(m, int64_t(b.batch) * kKvHeads * p.attn_chunks * kGroup * kStatePitch);
  p.attn_arrivals = deviceAlloc<unsigned>(m, int64_t(b.batch) * kKvHeads);
  CHECK(cudaMemset(p.attn_arrivals, 0, int64_t(b.batch) * kKvHeads * 4));
  p.barrier = deviceAlloc<unsigned long long>(m, 1);
  CHECK(cudaMemset(p.barrier, 0, 8));
  CHECK(cudaDeviceSynchronize());
  return b;
}

// One launch (the whole step's layers); the barrier counter carries on from the last launch.
void launch(Params& p, int sms, cudaStream_t stream) {
  void* args[] = {&p};
  CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(persistentDecodeKernel), dim3(sms), dim3(kThreads), args,
                                    kSmemBytes, stream));
  if (!(p.skip & kSkipBarrier)) p.barrier_base += static_cast<unsigned long long>(kBarriersPerLayer) * p.num_layers * sms;
}

// ---- check mode: the kernel against persistent_layer_reference.cc
template <typename T>
std::vector<T> download(const T* p, int64_t n) {
  std::vector<T> h(n);
  CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
std::vector<uint16_t> downloadBf16(const bf16* p, int64_t n) { return download(reinterpret_cast<const uint16_t*>(p), n); }

// One output against the reference, one line: fails beyond a relative RMS error of 2e-2, and
// where `strict` (a layer whose inputs match the reference's: only the summation order and
// rsqrt/exp accuracy differ) when more than 1 % of the elements are over one bf16 ulp or e4m3
// step apart, which a rounding step done differently produces.
bool report(const char* what, const Distance& d, bool strict) {
  const bool ok = d.relative_rms < 2e-2 && (!strict || d.beyond_one_step <= 0.01);
  std::printf("  %-10s relative RMS error %.2e, %.3f %% beyond one step: %s\n", what, d.relative_rms,
              100 * d.beyond_one_step, ok ? "ok" : "FAIL");
  return ok;
}

// The cache rows of each sequence's new token compared as values, every other byte of both
// caches exactly (nothing else may be written).
bool compareCaches(const Model& m, const Batch& b, const std::vector<HostLayer>& want, bool strict) {
  const int64_t elements = int64_t(m.blocks) * kBlockSize * kKvHeads * kHeadDim, row = int64_t(kKvHeads) * kHeadDim;
  const int bytes = cacheBytes(m.cache);
  std::vector<char> is_new(static_cast<size_t>(elements), 0);
  for (int s = 0; s < b.batch; ++s) {
    const int pos = b.seq_lens[s] - 1;
    const int64_t slot = int64_t(b.table[s * b.max_blocks + pos / kBlockSize]) * kBlockSize + pos % kBlockSize;
    std::fill(is_new.begin() + slot * row, is_new.begin() + (slot + 1) * row, 1);
  }
  bool ok = true;
  for (int i = 0; i < m.layers; ++i) {
    const LayerWeights& l = m.host_layers[i];
    for (int kv = 0; kv < 2; ++kv) {
      const std::vector<uint8_t> got = download(kv ? l.v_cache : l.k_cache, elements * bytes);
      const std::vector<uint8_t>& exp = kv ? want[i].v_cache : want[i].k_cache;
      std::vector<uint8_t> got_new, exp_new;
      int64_t stray = 0;
      for (int64_t e = 0; e < elements; ++e)
        for (int k = 0; k < bytes; ++k) {
          if (is_new[e]) got_new.push_back(got[e * bytes + k]), exp_new.push_back(exp[e * bytes + k]);
          else stray += got[e * bytes + k] != exp[e * bytes + k];
        }
      const std::string what = std::string(kv ? "v" : "k") + " cache " + std::to_string(i);
      std::vector<uint16_t> got16(got_new.size() / 2), exp16(exp_new.size() / 2);
      if (bytes == 2) {
        std::memcpy(got16.data(), got_new.data(), got_new.size());
        std::memcpy(exp16.data(), exp_new.data(), exp_new.size());
      }
      const Distance d = bytes == 2 ? Bf16Distance(got16, exp16) : Fp8Distance(got_new, exp_new);
      ok &= report(what.c_str(), d, strict && i == 0);
      if (stray) std::printf("  %s: %lld bytes outside the new tokens' rows changed: FAIL\n", what.c_str(), static_cast<long long>(stray));
      ok &= stray == 0;
    }
  }
  return ok;
}

// `num_layers` layers over one batch, one launch, against the CPU: the last layer's
// intermediates, the output, the residual and both caches of every layer; `strict` (one layer:
// the reference and the kernel start from the same bits) also bounds the elements more than one
// step apart.
bool checkBatch(int sms, const std::vector<int>& contexts, int num_layers, CacheFormat cache, const char* what) {
  int blocks = 0;
  for (int c : contexts) blocks += (c + kBlockSize - 1) / kBlockSize;
  Model m = makeModel(num_layers, blocks + 8, cache);
  Batch b = makeBatch(m, contexts, sms, 11);
  Params& p = b.params;
  std::vector<HostLayer> layers(m.layers);
  for (int i = 0; i < m.layers; ++i) {
    const LayerWeights& l = m.host_layers[i];
    const uint8_t* w[kGemms] = {l.qkv, l.o, l.gate_up, l.down};
    for (int g = 0; g < kGemms; ++g) layers[i].w[g] = download(w[g], int64_t(gemmN(g)) * gemmK(g));
    layers[i].norm1 = downloadBf16(l.norm1, kHidden), layers[i].norm2 = downloadBf16(l.norm2, kHidden);
    const int64_t cache_bytes = int64_t(m.blocks) * kBlockSize * kKvHeads * kHeadDim * cacheBytes(cache);
    layers[i].k_cache = download(l.k_cache, cache_bytes), layers[i].v_cache = download(l.v_cache, cache_bytes);
  }
  std::vector<float> hidden0;
  for (uint16_t bits : downloadBf16(p.hidden, int64_t(b.batch) * kHidden)) hidden0.push_back(__bfloat162float(__ushort_as_bfloat16(bits)));
  CHECK(cudaFuncSetAttribute(persistentDecodeKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  launch(p, sms, 0);
  CHECK(cudaDeviceSynchronize());
  std::printf("check %s: %d layer(s), batch %d, %s cache, %d attention chunks\n", what, m.layers, b.batch,
              cache == CacheFormat::kFp8 ? "FP8" : "bf16", p.attn_chunks);
  const int positions = *std::max_element(contexts.begin(), contexts.end());
  const Outputs want = RunReference(layers, b, m.scales, hidden0, CosSinTable(positions));
  const size_t rows = b.batch;
  const bool strict = num_layers == 1;
  bool ok = report("qkv", Bf16Distance(downloadBf16(p.qkv, rows * kQkv), want.qkv), strict);
  ok &= report("attention", Fp8Distance(download(p.attn, rows * kHidden), want.attn), strict);
  ok &= report("o", Bf16Distance(downloadBf16(p.o, rows * kHidden), want.o), strict);
  ok &= report("act", Fp8Distance(download(p.act, rows * kInter), want.act), strict);
  ok &= report("hidden", Bf16Distance(downloadBf16(p.hidden, rows * kHidden), want.hidden), strict);
  ok &= report("residual", Bf16Distance(downloadBf16(p.residual[0], rows * kHidden), want.residual), strict);
  ok &= compareCaches(m, b, layers, strict);
  freeModel(m);
  return ok;
}

// Five runs: one layer over uneven contexts that split into chunks, leave a chunk empty and put
// a new token alone in its block, strictly; two layers over eight sequences (the whole token
// tile, a context of one token: the residual and the layers' hand-over); one layer over one long
// sequence in 16 chunks, strictly; two layers over the first batch; and the first batch over an
// FP8 cache, strictly.
int check(int sms) {
  constexpr CacheFormat kBf16 = CacheFormat::kBf16;
  bool ok = checkBatch(sms, {37, 129, 16}, 1, kBf16, "3 sequences");
  ok &= checkBatch(sms, {1, 17, 300, 64, 5, 90, 33, 128}, 2, kBf16, "8 sequences");
  ok &= checkBatch(sms, {1000}, 1, kBf16, "1 sequence");
  ok &= checkBatch(sms, {37, 129, 16}, 2, kBf16, "3 sequences, 2 layers");
  ok &= checkBatch(sms, {37, 129, 16}, 1, CacheFormat::kFp8, "3 sequences");
  std::printf("check: %s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

// Device copy rate (bytes read + written per second) of a buffer far larger than L2.
double copyRate() {
  const size_t bytes = size_t(2) << 30;
  void *a = nullptr, *b = nullptr;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < 23; ++i) {
    CHECK(cudaEventRecord(e0));
    CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    if (i >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  return 2.0 * bytes / (ms[ms.size() / 2] * 1e-3);
}

// The median of `reps` launches (each the whole step) after 5 warm-up launches, all queued back
// to back with an event between two launches (so no host launch latency is timed); one JSON line.
void bench(int sms, int batch, int context, int layers, int reps, double copy_rate, unsigned skip, CacheFormat cache) {
  const int blocks_per_seq = (context + kBlockSize - 1) / kBlockSize;
  Model m = makeModel(layers, batch * blocks_per_seq, cache);
  Batch b = makeBatch(m, std::vector<int>(batch, context), sms, 5);
  b.params.skip = skip;
  CHECK(cudaFuncSetAttribute(persistentDecodeKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  constexpr int kWarmup = 5;
  std::vector<cudaEvent_t> events(reps + 1);
  for (cudaEvent_t& ev : events) CHECK(cudaEventCreate(&ev));
  for (int i = 0; i < kWarmup; ++i) launch(b.params, sms, 0);
  for (int i = 0; i < reps; ++i) {
    CHECK(cudaEventRecord(events[i]));
    launch(b.params, sms, 0);
  }
  CHECK(cudaEventRecord(events[reps]));
  CHECK(cudaEventSynchronize(events[reps]));
  std::vector<float> us;
  for (int i = 0; i < reps; ++i) {
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, events[i], events[i + 1]));
    us.push_back(t * 1e3f);
  }
  for (cudaEvent_t& ev : events) CHECK(cudaEventDestroy(ev));
  std::sort(us.begin(), us.end());
  const double median = us[us.size() / 2];
  const double weights = double(layers) * (double(kQkv) * kHidden + double(kHidden) * kHidden +
                                           2.0 * kInter * kHidden + double(kHidden) * kInter + 2.0 * kHidden * 2);
  // C - 1 tokens read and 1 written per sequence and layer (none when the attention is skipped).
  const double kv =
      skip & kSkipAttention ? 0.0 : double(layers) * batch * context * 2.0 * kKvHeads * kHeadDim * cacheBytes(cache);
  const double floor_us = (weights + kv) / copy_rate * 1e6;
  std::string skipped;
  for (const auto& [bit, name] : {std::pair{kSkipAttention, "attention"}, {kSkipNorm, "norm"}, {kSkipBarrier, "barrier"}})
    if (skip & bit) skipped += (skipped.empty() ? "" : ",") + std::string(name);
  std::printf("{\"batch\": %d, \"context\": %d, \"layers\": %d, \"median_us\": %.1f, \"tokens_per_s\": %.0f, "
              "\"per_layer_us\": %.2f, "
              "\"floor_us\": %.1f, \"fraction_of_floor\": %.3f, \"attention_chunks\": %d, \"copy_rate_tb_s\": %.3f, "
              "\"kv_cache\": \"%s\", \"skipped\": \"%s\"}\n",
              batch, context, layers, median, batch / (median * 1e-6), median / layers, floor_us, floor_us / median,
              b.params.attn_chunks,
              copy_rate / 1e12, cache == CacheFormat::kFp8 ? "fp8" : "bf16", skipped.c_str());
  std::fflush(stdout);
  freeModel(m);
}

std::vector<int> intList(const char* s) {
  std::vector<int> v;
  for (const char* p = s; *p;) {
    v.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> batches = {1, 8}, contexts = {1024, 4096};
  int layers = 32, reps = 30;
  unsigned skip = 0;
  CacheFormat cache = CacheFormat::kBf16;
  bool check_only = false;
  const char* usage =
      "usage: %s [--check] [--batch 1,8] [--context 1024,4096] [--layers 32] [--reps 30] [--kv bf16|fp8]\n"
      "          [--skip attention,norm,barrier]\n";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--check") {
      check_only = true;
      continue;
    }
    if (i + 1 >= argc) return std::fprintf(stderr, usage, argv[0]), 2;
    const char* v = argv[++i];
    if (a == "--batch") batches = intList(v);
    else if (a == "--context") contexts = intList(v);
    else if (a == "--layers") layers = std::atoi(v);
    else if (a == "--reps") reps = std::atoi(v);
    else if (a == "--kv") {
      const std::string format = v;
      if (format != "bf16" && format != "fp8") return std::fprintf(stderr, "--kv takes bf16 or fp8\n"), 2;
      cache = format == "fp8" ? CacheFormat::kFp8 : CacheFormat::kBf16;
    } else if (a == "--skip") {
      for (std::string rest = v; !rest.empty();) {
        const std::string word = rest.substr(0, rest.find(','));
        rest = word.size() < rest.size() ? rest.substr(word.size() + 1) : "";
        if (word == "attention") skip |= kSkipAttention;
        else if (word == "norm") skip |= kSkipNorm;
        else if (word == "barrier") skip |= kSkipBarrier;
        else return std::fprintf(stderr, "--skip takes attention, norm and barrier\n"), 2;
      }
    }
    else return std::fprintf(stderr, usage, argv[0]), 2;
  }
  bool sizes_ok = layers >= 1 && reps >= 1 && !batches.empty() && !contexts.empty();
  for (int batch : batches) sizes_ok &= batch >= 1 && batch <= kMaxBatch;
  for (int context : contexts) sizes_ok &= context >= 1;
  if (!sizes_ok) {
    std::fprintf(stderr, "batch must be 1..%d, contexts, layers and reps at least 1\n", kMaxBatch);
    return 2;
  }
  int device = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (check_only) return check(sms);
  const double rate = copyRate();
  for (int batch : batches)
    for (int context : contexts) bench(sms, batch, context, layers, reps, rate, skip, cache);
  return 0;
}
