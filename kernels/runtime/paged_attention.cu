// The paged attention kernels (paged_attention.h): attention over each sequence's cached
// context (the cache write is cache_write.cu). Numerics in docs/attention.md "Paged attention".
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdlib>
#include <type_traits>

#include "kernels/device/cp_async.cuh"
#include "kernels/device/mbarrier.cuh"
#include "kernels/device/pdl.cuh"
#include "kernels/device/reduce.cuh"
#include "kernels/runtime/paged_attention.h"
#include "kernels/types.h"

namespace fxfuse::runtime {
namespace {

constexpr int kWarps = 4;

__device__ __forceinline__ float load16(const void* p, int64_t i, DType t) {
  if (t == DType::BF16) return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(p)[i]);
  return __half2float(reinterpret_cast<const __half*>(p)[i]);
}

__device__ __forceinline__ float roundTo(float x, DType t) {
  if (t == DType::BF16) return __bfloat162float(__float2bfloat16_rn(x));
  if (t == DType::F16) return __half2float(__float2half_rn(x));
  return x;
}

// The sequence whose queries hold token t: the last b with qsl[b] <= t, or -1 when t is a
// padding token (t >= qsl[num_seqs]). Called by a whole warp with the same t in every lane: the
// lanes compare 32 sequences' starts per round of independent loads (a binary search would chain
// log2(num_seqs) dependent loads before the warp's first key load). With qsl not ascending (bad
// metadata) the result is some b in [0, num_seqs), never out of bounds.
__device__ int64_t sequenceOf(const int32_t* qsl, int64_t num_seqs, int64_t t, int lane) {
  if (num_seqs <= 0) return -1;
  const bool padding = t >= qsl[num_seqs];
  int64_t at_or_before = 0;  // sequences b with qsl[b] <= t
#pragma unroll 2
  for (int64_t b0 = 0; b0 < num_seqs; b0 += 32) {
    const int64_t b = b0 + lane;
    at_or_before += __popc(__ballot_sync(0xffffffffu, b < num_seqs && qsl[b] <= t));
  }
  return padding ? -1 : at_or_before - 1;
}

// Output element e of a row: o in D, or FP8 as attention_quant (round to D, times 1/s, clamp).
__device__ __forceinline__ void storeOut(const PagedAttentionParams& p, int64_t i, float o, float inv_out_scale) {
  switch (p.out_dtype) {
    case DType::BF16: reinterpret_cast<__nv_bfloat16*>(p.out)[i] = __float2bfloat16_rn(o); break;
    case DType::F16: reinterpret_cast<__half*>(p.out)[i] = __float2half_rn(o); break;
    case DType::F8E4M3FN: {
      float x = roundTo(o, p.dtype) * inv_out_scale;
      x = fminf(fmaxf(x, -kernels::kFp8E4m3Max), kernels::kFp8E4m3Max);
      if (o != o) x = o;  // fminf/fmaxf drop a NaN: keep it
      reinterpret_cast<__nv_fp8_e4m3*>(p.out)[i] = __nv_fp8_e4m3(x);
      break;
    }
    default: break;
  }
}

constexpr float kLog2e = 1.4426950408889634f;

// Keys a warp loads before it reduces any: their loads are in flight together instead of one
// key's latency after another's.
constexpr int kKeyGroup = static_cast<int>(kPagedKeyGroup);
constexpr int64_t kMaxSplits = 256;

// The cache formats the attention kernel is compiled for.
enum class CacheFormat { kBf16, kF16, kFp8 };

// The raw bits of the NE consecutive cache elements a lane holds (elements lane * NE ...):
// NE bytes (FP8) or 2 * NE bytes, in 32-bit words. Loaded for a whole key group before any is
// converted, so the group's loads are in flight together.
template <int NE, CacheFormat F>
struct LaneBits {
  static constexpr int kBytes = NE * (F == CacheFormat::kFp8 ? 1 : 2);
  uint32_t w[(kBytes + 3) / 4];
};

// Loads a lane's elements of the row at element `i`: one load when `vector` (the row length is
// a multiple of NE, so the lane's elements are aligned and all in or all past the row), else
// one per element; elements past `length` are 0 bits (0.0 in every format).
template <int NE, CacheFormat F>
__device__ __forceinline__ LaneBits<NE, F> loadBits(const void* p, int64_t i, int lane, int64_t length, bool vector) {
  using Bits = LaneBits<NE, F>;
  constexpr int kElem = F == CacheFormat::kFp8 ? 1 : 2;
  Bits b{};
  const int64_t e0 = static_cast<int64_t>(lane) * NE;
  const uint8_t* src = static_cast<const uint8_t*>(p) + (i + e0) * kElem;
  if (vector) {
    if (e0 >= length) return b;
    if constexpr (Bits::kBytes == 16) *reinterpret_cast<uint4*>(b.w) = *reinterpret_cast<const uint4*>(src);
    else if constexpr (Bits::kBytes == 8) *reinterpret_cast<uint2*>(b.w) = *reinterpret_cast<const uint2*>(src);
    else if constexpr (Bits::kBytes == 4) b.w[0] = *reinterpret_cast<const uint32_t*>(src);
    else if constexpr (Bits::kBytes == 2) b.w[0] = *reinterpret_cast<const uint16_t*>(src);
    else b.w[0] = *src;
    return b;
  }
#pragma unroll
  for (int k = 0; k < NE; ++k) {
    if (e0 + k >= length) break;
    const uint32_t v = kElem == 1 ? src[k] : reinterpret_cast<const uint16_t*>(src)[k];
    b.w[k * kElem / 4] |= v << (8 * ((k * kElem) % 4));
  }
  return b;
}

// The lane's elements as floats (FP8 times its scale).
template <int NE, CacheFormat F>
__device__ __forceinline__ void toFloats(const LaneBits<NE, F>& b, float scale, float (&out)[NE]) {
#pragma unroll
  for (int k = 0; k < NE; ++k) {
    if constexpr (F == CacheFormat::kFp8) {
      __nv_fp8_e4m3 v;
      v.__x = static_cast<__nv_fp8_storage_t>((b.w[k / 4] >> (8 * (k % 4))) & 0xffu);
      out[k] = static_cast<float>(v) * scale;
    } else {
      const uint16_t h = static_cast<uint16_t>((b.w[k / 2] >> (16 * (k % 2))) & 0xffffu);
      out[k] = F == CacheFormat::kBf16 ? __uint_as_float(static_cast<uint32_t>(h) << 16)
                                       : __half2float(__ushort_as_half(h));
    }
  }
}

// The running state of HPW query heads over some keys: lane l's output elements l * NE ...
// (unnormalized), each head's maximum score and sum of 2^(score - maximum); scores are in
// base 2 (log2(e) is folded into q).
template <int NE, int HPW>
struct Softmax {
  float acc[HPW][NE];
  float m[HPW], l[HPW];
};

// Sums each of the V values of every lane over the warp's 32 lanes with halving exchanges
// (V - 1 shuffles for V <= 32 instead of 5 per value): in each round a lane keeps one half of
// its values, sends the other half to its partner and adds what it receives. Afterwards lane l
// holds in v[0..C), C = max(1, V / 32), the sums of values C * (l >> (5 - log2(V / C))) + j.
template <int V, int kRound = 0>
__device__ __forceinline__ void warpTransposeSum(float (&v)[V], int lane) {
  if constexpr (kRound < 5) {
    constexpr int kMask = 16 >> kRound;
    constexpr int kCount = (V >> kRound) > 1 ? (V >> kRound) : 1;
    if constexpr (kCount == 1) {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], kMask);
    } else {
      const bool upper = (lane & kMask) != 0;
#pragma unroll
      for (int i = 0; i < kCount / 2; ++i) {
        const float keep = upper ? v[i + kCount / 2] : v[i];
        const float send = upper ? v[i] : v[i + kCount / 2];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, kMask);
      }
    }
    warpTransposeSum<V, kRound + 1>(v, lane);
  }
}

// One group of kKeyGroup keys into `st` for the warp's HPW query heads `q`: the raw K and V
// bits each lane holds (`kb`, `vb`) converted, the HPW x kKeyGroup partial scores summed across
// the warp (warpTransposeSum) and shared through `scores` (the warp's kKeyGroup * HPW floats of
// shared memory), then every lane rescales each head's state once and adds the group's values.
// Keys whose bit in `valid` is clear (past the chunk, or an invalid block id) score -inf.
template <int NE, int HPW, CacheFormat F>
__device__ __forceinline__ void addKeyGroup(const PagedAttentionParams& p, const float (&q)[HPW][NE],
                                            const LaneBits<NE, F> (&kb)[kKeyGroup],
                                            const LaneBits<NE, F> (&vb)[kKeyGroup], unsigned valid, float vs,
                                            int lane, float* scores, Softmax<NE, HPW>& st) {
  constexpr int V = HPW * kKeyGroup;
  constexpr int C = V > 32 ? V / 32 : 1;
  constexpr int kShift = V >= 32 ? 0 : (V == 16 ? 1 : V == 8 ? 2 : 3);
  float kr[kKeyGroup][NE], vr[kKeyGroup][NE];
#pragma unroll
  for (int g = 0; g < kKeyGroup; ++g) toFloats<NE, F>(kb[g], 1.0f, kr[g]);  // k_scale is in q
  float part[V];
#pragma unroll
  for (int h = 0; h < HPW; ++h)
#pragma unroll
    for (int g = 0; g < kKeyGroup; ++g) {
      float x = 0.0f;
#pragma unroll
      for (int k = 0; k < NE; ++k) x += q[h][k] * kr[g][k];
      part[h * kKeyGroup + g] = x;
    }
  warpTransposeSum<V>(part, lane);
#pragma unroll
  for (int g = 0; g < kKeyGroup; ++g) toFloats<NE, F>(vb[g], vs, vr[g]);
  __syncwarp();  // the previous group's scores are read by every lane
#pragma unroll
  for (int j = 0; j < C; ++j) scores[C * (lane >> kShift) + j] = part[j];
  __syncwarp();
#pragma unroll
  for (int h = 0; h < HPW; ++h) {
    float s[kKeyGroup];
    float mn = st.m[h];
#pragma unroll
    for (int g = 0; g < kKeyGroup; ++g) {
      s[g] = (valid >> g) & 1u ? scores[h * kKeyGroup + g] : -INFINITY;
      mn = fmaxf(mn, s[g]);
    }
    if (mn == -INFINITY) continue;  // no valid key so far
    const float corr = exp2f(st.m[h] - mn);  // st.m = -inf the first time: 2^-inf = 0
    st.l[h] *= corr;
#pragma unroll
    for (int k = 0; k < NE; ++k) st.acc[h][k] *= corr;
#pragma unroll
    for (int g = 0; g < kKeyGroup; ++g) {
      const float pj = exp2f(s[g] - mn);  // an invalid key: 2^-inf = 0 (and its row is 0)
      st.l[h] += pj;
#pragma unroll
      for (int k = 0; k < NE; ++k) st.acc[h][k] += pj * vr[g][k];
    }
    st.m[h] = mn;
  }
}

// Keys [lo, hi) of a sequence (block table `blocks`) into `st`, loaded straight into
// registers kKeyGroup keys at a time (any head size: rows that are not whole 16-byte pieces).
// A key's block and offset advance with the key: no division per key; the next group's block
// ids are looked up while the current group's rows load.
template <int NE, int HPW, CacheFormat F>
__device__ void attendKeys(const PagedAttentionParams& p, const float (&q)[HPW][NE], const int32_t* blocks, int64_t hk,
                           int64_t lo, int64_t hi, float vs, int lane, bool vector, float* scores,
                           Softmax<NE, HPW>& st) {
  const int block_size = static_cast<int>(p.block_size);
  int bi = static_cast<int>(lo / block_size), off = static_cast<int>(lo - static_cast<int64_t>(bi) * block_size);
  int32_t ids[kKeyGroup], offs[kKeyGroup];
  auto lookup = [&](int64_t j0) {
#pragma unroll
    for (int g = 0; g < kKeyGroup; ++g) {
      ids[g] = j0 + g < hi ? blocks[bi] : -1;
      offs[g] = off;
      if (++off == block_size) {
        off = 0;
        ++bi;
      }
    }
  };
  lookup(lo);
  for (int64_t j0 = lo; j0 < hi; j0 += kKeyGroup) {
    unsigned valid = 0;
    LaneBits<NE, F> kb[kKeyGroup], vb[kKeyGroup];
#pragma unroll
    for (int g = 0; g < kKeyGroup; ++g) {
      const int64_t block = ids[g];
      const bool ok = block >= 0 && block < p.num_blocks;  // bad metadata: never read outside the cache
      valid |= static_cast<unsigned>(ok) << g;
      const int64_t base = ok ? ((block * p.block_size + offs[g]) * p.heads_kv + hk) * p.head_size : 0;
      kb[g] = loadBits<NE, F>(p.key_cache, base, lane, ok ? p.head_size : 0, vector);
      vb[g] = loadBits<NE, F>(p.value_cache, base, lane, ok ? p.head_size : 0, vector);
    }
    if (j0 + kKeyGroup < hi) lookup(j0 + kKeyGroup);
    addKeyGroup<NE, HPW, F>(p, q, kb, vb, valid, vs, lane, scores, st);
  }
}

// The cp.async ring a warp streams its keys through when rows are whole 16-byte pieces: each
// stage holds one key group's K rows then V rows, kRowPitch apart (room for the longest row of
// NE elements per lane, plus 16 bytes so the 8 rows of a group fall in different banks for the
// tensor-core fragment loads); about 13 KB of shared memory per warp, 2 to 4 stages, so 4 CTAs
// of 4 warps fit a multiprocessor.
template <int NE, CacheFormat F>
struct StagedRing {
  static constexpr int kElem = F == CacheFormat::kFp8 ? 1 : 2;
  static constexpr int kRowBytes = 32 * NE * kElem;
  static constexpr int kRowPitch = kRowBytes + 16;
  static constexpr int kStageBytes = 2 * kKeyGroup * kRowPitch;
  static constexpr int kBudget = 13312;
  static constexpr int kStages = kBudget / kStageBytes < 2 ? 2 : kBudget / kStageBytes > 4 ? 4 : kBudget / kStageBytes;
  static constexpr int kWarpBytes = kStages * kStageBytes;
};

// Whether a head of `head_size` elements streams through the ring: whole 16-byte pieces, a
// power of two of them per row (so a copy's row and piece are a shift and a mask).
__host__ __device__ constexpr bool StagedRows(int64_t head_size, int64_t elem_bytes) {
  const int64_t bytes = head_size * elem_bytes;
  const int64_t pieces = bytes / 16;
  return bytes % 16 == 0 && pieces > 0 && (pieces & (pieces - 1)) == 0;
}

// Keys [lo, hi) of a sequence (block table `blocks`, KV head hk) through the warp's cp.async
// ring `ring` (shared memory of StagedRing::kWarpBytes) and `masks` (a valid-key mask per
// stage), one key group at a time into consume(stage, valid): the copies of the next
// kStages - 1 groups are in flight while a group is computed, without registers to hold them.
// Copies of keys past `hi` or with an invalid block id are zero-filled and their mask bit clear.
template <typename Ring, typename Consume>
__device__ void streamKeys(const PagedAttentionParams& p, const int32_t* blocks, int64_t hk, int64_t lo, int64_t hi,
                           int lane, uint8_t* ring, unsigned* masks, Consume&& consume) {
  // Keys are counted from lo in 32 bits (a chunk is shorter than 2^31 keys, a block than 2^31
  // slots: LaunchPagedAttention checks): key lo + r is at offset (first_offset + r) % bs of the
  // block table's entry first_block + (first_offset + r) / bs.
  const int64_t span = hi > lo ? hi - lo : 0;
  const int groups = static_cast<int>((span + kKeyGroup - 1) / kKeyGroup);
  const uint32_t bs = static_cast<uint32_t>(p.block_size);
  const int64_t first_block = lo / p.block_size;
  const uint32_t first_offset = static_cast<uint32_t>(lo - first_block * p.block_size);
  // A row is 1 << pieces_log2 16-byte pieces (at most 32: head_size <= kPagedMaxHeadSize).
  const int pieces_log2 = __ffs(static_cast<int>(p.head_size * Ring::kElem / 16)) - 1;
  const int rows_per_pass = 32 >> pieces_log2, piece = lane & ((1 << pieces_log2) - 1);
  const int passes = (kKeyGroup + rows_per_pass - 1) / rows_per_pass;
  const uint32_t ring_address = static_cast<uint32_t>(__cvta_generic_to_shared(ring));
  // Block ids in windows of 32 keys (kWindowGroups groups), lane l holding key l's: the
  // current window and the next one are loaded a window ahead, so the lookups of a chunk's
  // first groups are one round trip and later ones overlap the copies and the compute.
  constexpr int kWindowGroups = 32 / kKeyGroup;
  auto windowOf = [&](int first_group) -> int32_t {
    const uint32_t r = static_cast<uint32_t>(first_group) * kKeyGroup + lane;
    return r < span ? blocks[first_block + (first_offset + r) / bs] : -1;
  };
  int32_t window = windowOf(0), next_window = windowOf(kWindowGroups);
  auto issue = [&](int gi) {  // called for gi = 0, 1, 2, ... in order
    const int slot = gi % kWindowGroups;
    if (slot == 0 && gi > 0) {
      window = next_window;
      next_window = windowOf(gi + kWindowGroups);
    }
    const int32_t block_of_lane = __shfl_sync(0xffffffffu, window, slot * kKeyGroup + (lane & (kKeyGroup - 1)));
    const int32_t block = lane < kKeyGroup ? block_of_lane : -1;
    const bool ok = block >= 0 && block < p.num_blocks;  // bad metadata: never read outside the cache
    const uint32_t offset = (first_offset + static_cast<uint32_t>(gi) * kKeyGroup + lane) % bs;
    const int64_t row = ok ? ((static_cast<int64_t>(block) * bs + offset) * p.heads_kv + hk) * p.head_size : -1;
    const unsigned valid = __ballot_sync(0xffffffffu, ok);
    const int stage = gi % Ring::kStages;
    if (lane == 0) masks[stage] = valid;
    // Lane l copies piece l % pieces of the K and the V row of keys l / pieces, + rows_per_pass, ...
#pragma unroll
    for (int i = 0; i < kKeyGroup; ++i) {
      if (i >= passes) break;  // warp-uniform
      const int g = (lane >> pieces_log2) + i * rows_per_pass;
      const int64_t key_row = __shfl_sync(0xffffffffu, row, g & (kKeyGroup - 1));
      if (g >= kKeyGroup) continue;  // rows shorter than 64 bytes: more lanes than the group's rows
      const bool ok_row = key_row >= 0;
      const int64_t src = (ok_row ? key_row * Ring::kElem : 0) + piece * 16;
      const uint32_t dst = ring_address + stage * Ring::kStageBytes + g * Ring::kRowPitch + piece * 16;
      kernels::cpAsync16(dst, static_cast<const uint8_t*>(p.key_cache) + src, ok_row);
      kernels::cpAsync16(dst + kKeyGroup * Ring::kRowPitch, static_cast<const uint8_t*>(p.value_cache) + src, ok_row);
    }
  };
#pragma unroll
  for (int s = 0; s < Ring::kStages - 1; ++s) {
    if (s < groups) issue(s);
    kernels::cpAsyncCommit();  // empty groups keep the wait counts uniform
  }
  for (int gi = 0; gi < groups; ++gi) {
    kernels::cpAsyncWait<Ring::kStages - 2>();
    __syncwarp();  // every lane's copies of group gi landed; the stage read last round is free
    if (gi + Ring::kStages - 1 < groups) issue(gi + Ring::kStages - 1);
    kernels::cpAsyncCommit();
    const int stage = gi % Ring::kStages;
    consume(static_cast<const uint8_t*>(ring + stage * Ring::kStageBytes), masks[stage]);
  }
}

// Keys [lo, hi) into `st` like attendKeys, through the warp's cp.async ring (streamKeys).
template <int NE, int HPW, CacheFormat F>
__device__ void attendKeysStaged(const PagedAttentionParams& p, const float (&q)[HPW][NE], const int32_t* blocks,
                                 int64_t hk, int64_t lo, int64_t hi, float vs, int lane, float* scores,
                                 uint8_t* ring, unsigned* masks, Softmax<NE, HPW>& st) {
  using Ring = StagedRing<NE, F>;
  streamKeys<Ring>(p, blocks, hk, lo, hi, lane, ring, masks, [&](const uint8_t* keys, unsigned valid) {
    LaneBits<NE, F> kb[kKeyGroup], vb[kKeyGroup];
#pragma unroll
    for (int g = 0; g < kKeyGroup; ++g) {
      kb[g] = loadBits<NE, F>(keys + g * Ring::kRowPitch, 0, lane, p.head_size, true);
      vb[g] = loadBits<NE, F>(keys + (kKeyGroup + g) * Ring::kRowPitch, 0, lane, p.head_size, true);
    }
    addKeyGroup<NE, HPW, F>(p, q, kb, vb, valid, vs, lane, scores, st);
  });
}

// ---- Tensor-core scores and P.V (head size 64 or 128).
//
// Per key group, for the warp's HPW query heads of one KV head (rows of a 16-row tile, rows
// HPW..15 zero):
//
//      S[16 x 8] = Q[16 x E] . K^T[E x 8]       mma m16n8k16, K rows straight from the ring
//      P = 2^(S * q_factor - m)                 online softmax per row, in fp32
//      O[16 x E] += P[16 x 8] . V[8 x E]        mma m16n8k8, V through ldmatrix.trans, P as
//                                               hi + lo 16-bit terms (~16 bits of P)
//
// Lane (g, t) holds S[g][2t, 2t+1] and O[g][8n + 2t, 8n + 2t + 1]: row g is query head h0 + g.
// A 16-bit cache multiplies in its own type. An FP8 cache multiplies in f16, which holds every
// e4m3 value exactly: K pairs are widened as their fragments are read (one cvt per pair), V
// rows into a per-warp f16 copy that ldmatrix.trans reads, Q is scaled by a power of two that
// puts its largest element in [2^14, 2^15) (f16's range; undone in q_factor), and v_scale
// multiplies O once at the end.

// The 16-bit type the tensor cores multiply in for cache format F.
constexpr CacheFormat MmaType(CacheFormat f) { return f == CacheFormat::kBf16 ? CacheFormat::kBf16 : CacheFormat::kF16; }

template <CacheFormat M>
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a2, uint32_t b0, uint32_t b1) {
  const uint32_t zero = 0;  // rows 8..15 of the tile: no query head
  if constexpr (M == CacheFormat::kBf16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(zero), "r"(a2), "r"(zero), "r"(b0), "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(zero), "r"(a2), "r"(zero), "r"(b0), "r"(b1));
}

// Two floats as a 16-bit pair of type M (round to nearest), and back.
template <CacheFormat M>
__device__ __forceinline__ uint32_t pack16(float a, float b) {
  if constexpr (M == CacheFormat::kBf16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}
template <CacheFormat M>
__device__ __forceinline__ float2 unpack16(uint32_t u) {
  if constexpr (M == CacheFormat::kBf16) return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u));
  else return __half22float2(*reinterpret_cast<const __half2*>(&u));
}

// Two e4m3 values (the low byte first) as an f16 pair, exactly.
__device__ __forceinline__ uint32_t widenPair(uint32_t bits) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(bits & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | static_cast<uint32_t>(h.y) << 16;
}

// Elements c, c + 1 of a K row in the ring as a pair of the mma type.
template <CacheFormat F>
__device__ __forceinline__ uint32_t keyPair(const uint8_t* row, int c) {
  if constexpr (F == CacheFormat::kFp8) return widenPair(*reinterpret_cast<const uint16_t*>(row + c));
  else return *reinterpret_cast<const uint32_t*>(row + 2 * c);
}

// The shared memory of one tensor-core warp: a cp.async ring of kStages stages, each one key
// group's 8 K rows then its 8 V rows kRowPitch apart, consumed two stages (16 keys) at a time
// while the copies of the next two are in flight; for an FP8 cache, then those 16 V rows
// widened to f16 (kWidePitch apart, padded by 16 bytes so the 8 rows a fragment load touches
// fall in different banks). Rows of whole groups of 8 pieces (16-bit E = 64, 128; FP8 E = 128)
// are packed and swizzled instead (kSwizzled): 16-byte piece c of row r sits at piece
// c ^ (r % 8), so the 8 rows a fragment load touches still hit 8 different bank groups.
// Padding them costs the copies ~7 % of their rate (rows 272 bytes apart:
// examples/decode_step/paged_read_bench.cu, docs/attention.md). bf16 with E = 128: 16 KB
// per warp, so 3 CTAs of 4 warps fit a multiprocessor. Everything a copy's address needs is
// known once per warp but the key's row, so the per-key work is one shuffle and two copies
// per 16-byte piece; the fragment loads' swizzled offsets are per-lane constants too.
template <int E, CacheFormat F>
struct MmaRing {
  static constexpr int kElem = F == CacheFormat::kFp8 ? 1 : 2;
  static constexpr int kRowBytes = E * kElem;
  static constexpr bool kSwizzled = (E * kElem / 16) % 8 == 0;
  static constexpr int kRowPitch = kSwizzled ? kRowBytes : kRowBytes + 16;
  static constexpr int kPieces = kRowBytes / 16;            // 16-byte copies per row: 4 to 16
  static constexpr int kRowsPerPass = 32 / kPieces;         // rows one warp instruction copies
  static constexpr int kPasses = kKeyGroup / kRowsPerPass;  // copy instructions per group, K or V
  static constexpr int kStageBytes = 2 * kKeyGroup * kRowPitch;
  static constexpr int kStages = 4;
  static constexpr int kWidePitch = 2 * E + 16;
  static constexpr int kWideBytes = F == CacheFormat::kFp8 ? 2 * kKeyGroup * kWidePitch : 0;
  static constexpr int kBytes = kStages * kStageBytes + kWideBytes;
  static_assert(kPasses >= 1 && kRowsPerPass * kPieces == 32, "a pass copies whole rows");
  // Byte offset of 16-byte piece `piece` of ring row `row` (rows counted from a stage's first).
  __device__ static __forceinline__ uint32_t pieceOffset(int row, int piece) {
    return static_cast<uint32_t>(row * kRowPitch + (kSwizzled ? piece ^ (row & 7) : piece) * 16);
  }
};

// The 8 V rows of an FP8 stage (kPitch8 apart, swizzled as MmaRing says when kSwizzled) as
// f16 rows kWidePitch apart: lane l widens E / 4 bytes of row l % 8, from byte (l / 8) * E / 4.
template <int E, int kPitch8, int kWidePitch, bool kSwizzled>
__device__ __forceinline__ void widenValues(const uint8_t* v8, uint8_t* wide, int lane) {
  constexpr int kLaneBytes = E / 4;
  const int row = lane & 7, col = (lane >> 3) * kLaneBytes;
#pragma unroll
  for (int i = 0; i < kLaneBytes / 16; ++i) {
    const int piece = col / 16 + i;
    const uint4 x = *reinterpret_cast<const uint4*>(v8 + row * kPitch8 + (kSwizzled ? piece ^ row : piece) * 16);
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
    uint32_t h[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) h[j] = widenPair(w[j / 2] >> (16 * (j % 2)));
    uint4* dst = reinterpret_cast<uint4*>(wide + row * kWidePitch + 2 * (col + 16 * i));
    dst[0] = make_uint4(h[0], h[1], h[2], h[3]);
    dst[1] = make_uint4(h[4], h[5], h[6], h[7]);
  }
}

// The running state of a lane: O[g][8n + 2t + j] in o[n][j] (o[n][2..3] are rows 8..15: zero),
// row g's maximum (base 2) and this lane's share of row g's sum (keys 2t, 2t + 1, 8 + 2t and
// 9 + 2t of each 16-key step).
template <int E>
struct MmaSoftmax {
  float o[E / 8][4];
  float m, l;
};

__device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void ldmatrixX4Trans(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// S[16 x 8] = Q . K^T of one stage's 8 keys (rows of `keys`, cache format F). A 16-bit cache's
// B fragments come four registers per ldmatrix (matrix j of lanes 8j.. = columns 8j.. of the 8
// rows: the fragments of two k-steps); FP8 pairs are widened as they are read.
template <int E, CacheFormat F>
__device__ __forceinline__ void stageScores(const uint8_t* keys, const uint32_t (&qa)[E / 16][2], int lane,
                                            float (&c)[4]) {
  using Ring = MmaRing<E, F>;
  constexpr CacheFormat M = MmaType(F);
  if constexpr (F == CacheFormat::kFp8) {
    const int row = lane >> 2, t = lane & 3;
    const uint8_t* krow = keys + row * Ring::kRowPitch;
#pragma unroll
    for (int k = 0; k < E / 16; ++k) {  // elements 16k + 2t (+ 8): bytes of piece k
      const uint8_t* piece = krow + (Ring::kSwizzled ? k ^ row : k) * 16;
      mma16816<M>(c, qa[k][0], qa[k][1], keyPair<F>(piece, 2 * t), keyPair<F>(piece, 2 * t + 8));
    }
  } else {
    // Matrix j of the ldmatrix of k-steps k, k + 1: piece 2k + j of rows 0..7 (lane 8j + r gives
    // row r's address). 2k is a multiple of 4, so the swizzled piece (2k + j) ^ r = 2k ^ (j ^ r).
    const int row = lane & 7, piece = lane >> 3;
    const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(keys)) + row * Ring::kRowPitch;
#pragma unroll
    for (int k = 0; k < E / 16; k += 2) {
      uint32_t b[4];
      ldmatrixX4(b, address + (Ring::kSwizzled ? (2 * k) ^ (piece ^ row) : 2 * k + piece) * 16);
      mma16816<M>(c, qa[k][0], qa[k][1], b[0], b[1]);
      mma16816<M>(c, qa[k + 1][0], qa[k + 1][1], b[2], b[3]);
    }
  }
}

// One 16-key step into `st`: keys 0..7 in the stage at `stages`, 8..15 in the next one;
// the V rows of both in the mma type, lane l's ldmatrix row (key (l / 8 odd ? 8 : 0) + l % 8)
// at `value_row`: piece n of it (columns 8n..8n+7) at piece n ^ value_swizzle (swizzled rows:
// (l / 16) ^ (l % 8); n is even, so this is n + l / 16 of the unswizzled row with
// value_swizzle = l / 16). `valid` bit j: key j.
//
//      S[16 x 16] = Q . K^T           two mma m16n8k16 chains, one per stage
//      P = 2^(S * q_factor - m)       online softmax per row in fp32; O is rescaled only when
//                                     some row's maximum grew (else the factor is exactly 1)
//      O[16 x E] += P . V             mma m16n8k16, P as hi + lo 16-bit terms (~16 bits of P)
template <int E, CacheFormat F>
__device__ __forceinline__ void addKeyStepMma(const uint8_t* stages, uint32_t value_row, int value_swizzle,
                                              unsigned valid,
                                              const uint32_t (&qa)[E / 16][2], float q_factor, int lane,
                                              MmaSoftmax<E>& st) {
  using Ring = MmaRing<E, F>;
  constexpr CacheFormat M = MmaType(F);
  const int t = lane & 3;
  float c[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
  stageScores<E, F>(stages, qa, lane, c[0]);
  stageScores<E, F>(stages + Ring::kStageBytes, qa, lane, c[1]);
  float s[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int key = (i / 2) * 8 + 2 * t + i % 2;
    s[i] = (valid >> key) & 1u ? c[i / 2][i % 2] * q_factor : -INFINITY;
  }
  float mx = fmaxf(fmaxf(s[0], s[1]), fmaxf(s[2], s[3]));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float m_new = fmaxf(st.m, mx);
  const bool none = m_new == -INFINITY;  // no valid key in this row so far
  float pr[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) pr[i] = none ? 0.0f : exp2f(s[i] - m_new);  // invalid: 2^-inf = 0
  if (__any_sync(0xffffffffu, m_new != st.m)) {
    const float corr = none ? 1.0f : exp2f(st.m - m_new);  // st.m = -inf the first time: 0
    st.l *= corr;
#pragma unroll
    for (int n = 0; n < E / 8; ++n) {
      st.o[n][0] *= corr;
      st.o[n][1] *= corr;
    }
  }
  st.m = m_new;
  st.l += (pr[0] + pr[1]) + (pr[2] + pr[3]);
  const uint32_t hi01 = pack16<M>(pr[0], pr[1]), hi23 = pack16<M>(pr[2], pr[3]);
  const float2 f01 = unpack16<M>(hi01), f23 = unpack16<M>(hi23);
  const uint32_t lo01 = pack16<M>(pr[0] - f01.x, pr[1] - f01.y), lo23 = pack16<M>(pr[2] - f23.x, pr[3] - f23.y);
  // ldmatrix.x4.trans of keys 0..15 x columns 8n..8n+15: the B fragments of n-tiles n, n + 1.
#pragma unroll
  for (int n = 0; n < E / 8; n += 2) {
    uint32_t b[4];
    ldmatrixX4Trans(b, value_row + (n ^ value_swizzle) * 16);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      mma16816<M>(st.o[n + j], hi01, hi23, b[2 * j], b[2 * j + 1]);
      mma16816<M>(st.o[n + j], lo01, lo23, b[2 * j], b[2 * j + 1]);
    }
  }
}

// The cache rows of a warp's keys [lo, hi) of one sequence (block table `blocks`, KV head hk),
// 32 keys (a window) at a time: lane l holds, for key l of the current window, its cache row
// ((block * bs + offset) * Hk + hk, in rows of E elements; rows fit 31 bits: loadPathOf takes
// this path only then) or -1 for a key past the chunk or with a bad block id, and the
// block id of its key in the next window, loaded a window ahead. A key's block and offset come
// from its position: no division chain from key to key. The constructor only issues the block
// table loads of the first two windows (the kernel builds it before it waits for the preceding
// grid where the metadata is read-only); begin() turns the first window's ids into rows once
// they are needed. Positions are 32-bit: the tensor-core path's keys fit (loadPathOf).
struct KeyWindows {
  const int32_t* blocks;
  uint32_t first_block, span, bs, first_offset;
  int32_t hk, heads_kv, num_blocks;
  int lane;
  int32_t first_block_id, rows = -1, next_block;
  uint32_t offset, next_offset;  // in its block: the current window's key, the next one's

  __device__ KeyWindows(const PagedAttentionParams& p, const int32_t* blocks, int32_t hk, uint32_t lo, uint32_t hi,
                        int lane)
      : blocks(blocks),
        first_block(lo / static_cast<uint32_t>(p.block_size)),
        span(hi > lo ? hi - lo : 0u),
        bs(static_cast<uint32_t>(p.block_size)),
        first_offset(lo - first_block * static_cast<uint32_t>(p.block_size)),
        hk(hk),
        heads_kv(static_cast<int32_t>(p.heads_kv)),
        num_blocks(static_cast<int32_t>(p.num_blocks)),
        lane(lane) {
    first_block_id = blockOf(0, offset);
    next_block = blockOf(1, next_offset);
  }
  // The first window's rows.
  __device__ void begin() { rows = rowOf(first_block_id, offset); }
  // The block id of key window * 32 + lane and its offset in the block; -1 past the chunk.
  __device__ int32_t blockOf(int window, uint32_t& key_offset) const {
    const uint32_t r = static_cast<uint32_t>(window) * 32 + lane, position = first_offset + r;
    key_offset = position % bs;
    return r < span ? blocks[first_block + position / bs] : -1;
  }
  // The cache row of a key, -1 for a bad block id (never outside the cache).
  __device__ int32_t rowOf(int32_t block, uint32_t key_offset) const {
    if (block < 0 || block >= num_blocks) return -1;
    return (block * static_cast<int32_t>(bs) + static_cast<int32_t>(key_offset)) * heads_kv + hk;
  }
  // Moves to window `window` (the next one): its rows from the block ids loaded ahead.
  __device__ void advance(int window) {
    rows = rowOf(next_block, next_offset);
    next_block = blockOf(window + 1, next_offset);
  }
};

// The keys of `windows` through the warp's ring (`smem`, MmaRing::kBytes) 16 at a time into
// consume(stages, valid): the copies of the next 16 keys are in flight while 16 are computed.
// A key with row -1 is zero-filled and its valid bit clear.
template <int E, CacheFormat F, typename Consume>
__device__ void streamKeySteps(const PagedAttentionParams& p, KeyWindows& windows, int lane, uint8_t* smem,
                               Consume&& consume) {
  using Ring = MmaRing<E, F>;
  const int steps = static_cast<int>((windows.span + 15) / 16);
  windows.begin();
  unsigned window_valid = __ballot_sync(0xffffffffu, windows.rows >= 0);
  const int piece = lane % Ring::kPieces;
  const uint8_t* k_src = static_cast<const uint8_t*>(p.key_cache) + piece * 16;
  const uint8_t* v_src = static_cast<const uint8_t*>(p.value_cache) + piece * 16;
  const uint32_t ring = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  uint32_t to_row[Ring::kPasses];  // pass i: the lane's piece of row lane / kPieces + i * kRowsPerPass
#pragma unroll
  for (int i = 0; i < Ring::kPasses; ++i)
    to_row[i] = Ring::pieceOffset(lane / Ring::kPieces + i * Ring::kRowsPerPass, piece);
  auto issue = [&](int step) -> unsigned {  // called for step = 0, 1, 2, ... in order
    if (step % 2 == 0 && step > 0) {
      windows.advance(step / 2);
      window_valid = __ballot_sync(0xffffffffu, windows.rows >= 0);
    }
    const int half = (step % 2) * 16;
    const uint32_t stages = ring + (step % 2) * 2 * Ring::kStageBytes;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < Ring::kPasses; ++i) {
        const int key = half + h * kKeyGroup + lane / Ring::kPieces + i * Ring::kRowsPerPass;
        const int32_t row = __shfl_sync(0xffffffffu, windows.rows, key);
        const uint64_t from = static_cast<uint64_t>(row >= 0 ? row : 0) * Ring::kRowBytes;
        const uint32_t to = stages + h * Ring::kStageBytes + to_row[i];  // V rows: 8 rows on, same swizzle
        kernels::cpAsync16(to, k_src + from, row >= 0);
        kernels::cpAsync16(to + kKeyGroup * Ring::kRowPitch, v_src + from, row >= 0);
      }
    return (window_valid >> half) & 0xffffu;
  };
  unsigned valid = steps > 0 ? issue(0) : 0u;
  kernels::cpAsyncCommit();
  for (int step = 0; step < steps; ++step) {
    const unsigned next_valid = step + 1 < steps ? issue(step + 1) : 0u;
    kernels::cpAsyncCommit();  // an empty group at the end keeps the wait count uniform
    kernels::cpAsyncWait<1>();
    __syncwarp();  // every lane's copies of this step landed
    consume(static_cast<const uint8_t*>(smem + (step % 2) * 2 * Ring::kStageBytes), valid);
    __syncwarp();  // every lane has read the stages before the next issue refills them
    valid = next_valid;
  }
}

// The lane's Q fragments of query heads h0 + g (g < HPW; other rows 0) of token t in the mma
// type. Returns what the scores must be multiplied by to undo a scaling of Q: 1 for a 16-bit
// cache (q is read as it is); for an FP8 cache 2^s, Q having been multiplied by 2^-s (exact)
// so that its largest magnitude lies in [2^14, 2^15): inside f16's range, and every element
// within 2^-28 of it a normal f16 (bf16 and f16 values stay exact there).
template <int E, int HPW, CacheFormat F>
__device__ float loadQueryFragments(const PagedAttentionParams& p, int64_t t, int64_t h0, int lane,
                                    uint32_t (&qa)[E / 16][2]) {
  const int g = lane >> 2, tq = lane & 3;
  const uint8_t* qrow = static_cast<const uint8_t*>(p.q) + (t * p.q_stride[0] + (h0 + g) * p.q_stride[1]) * 2;
#pragma unroll
  for (int k = 0; k < E / 16; ++k) {
    qa[k][0] = g < HPW ? *reinterpret_cast<const uint32_t*>(qrow + (16 * k + 2 * tq) * 2) : 0u;
    qa[k][1] = g < HPW ? *reinterpret_cast<const uint32_t*>(qrow + (16 * k + 2 * tq + 8) * 2) : 0u;
  }
  if constexpr (F != CacheFormat::kFp8) {
    return 1.0f;
  } else {
    const bool bf16 = p.dtype == DType::BF16;
    auto value = [&](uint32_t u) { return bf16 ? unpack16<CacheFormat::kBf16>(u) : unpack16<CacheFormat::kF16>(u); };
    float largest = 0.0f;
#pragma unroll
    for (int k = 0; k < E / 16; ++k)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float2 x = value(qa[k][j]);
        largest = fmaxf(largest, fmaxf(fabsf(x.x), fabsf(x.y)));
      }
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1) largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, mask));
    int e = 0;
    frexpf(largest, &e);  // largest < 2^e
    const int s = isinf(largest) ? 0 : e - 15 < -100 ? -100 : e - 15;
#pragma unroll
    for (int k = 0; k < E / 16; ++k)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float2 x = value(qa[k][j]);
        qa[k][j] = pack16<CacheFormat::kF16>(ldexpf(x.x, -s), ldexpf(x.y, -s));
      }
    return ldexpf(1.0f, s);
  }
}

// The keys of `windows` for the warp's HPW query heads (h0 ..) of token t through the ring
// (`smem`: the warp's MmaRing) with tensor cores; returns the state of row g = lane / 4 (rows
// g >= HPW: no head).
template <int E, int HPW, CacheFormat F>
__device__ void attendKeysMma(const PagedAttentionParams& p, int64_t t, int64_t h0, KeyWindows& windows,
                              float q_factor, int lane, uint8_t* smem, MmaSoftmax<E>& st) {
  using Ring = MmaRing<E, F>;
  uint32_t qa[E / 16][2];
  q_factor *= loadQueryFragments<E, HPW, F>(p, t, h0, lane, qa);
  // Lane l's ldmatrix.trans row: key (l / 8 odd ? 8 : 0) + l % 8, first piece l / 16.
  const int value_key = ((lane >> 3) & 1) * kKeyGroup + (lane & 7), value_piece = lane >> 4;
  uint8_t* wide = smem + Ring::kStages * Ring::kStageBytes;
  streamKeySteps<E, F>(p, windows, lane, smem, [&](const uint8_t* stages, unsigned valid) {
    if constexpr (F == CacheFormat::kFp8) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
        widenValues<E, Ring::kRowPitch, Ring::kWidePitch, Ring::kSwizzled>(
            stages + h * Ring::kStageBytes + kKeyGroup * Ring::kRowPitch, wide + h * kKeyGroup * Ring::kWidePitch,
            lane);
      __syncwarp();
      const uint32_t value_row = static_cast<uint32_t>(__cvta_generic_to_shared(wide)) + value_key * Ring::kWidePitch;
      addKeyStepMma<E, F>(stages, value_row, value_piece, valid, qa, q_factor, lane, st);
    } else {
      const uint8_t* values = stages + (value_key / kKeyGroup) * Ring::kStageBytes + kKeyGroup * Ring::kRowPitch;
      const int row = value_key % kKeyGroup;  // V rows 8.. of the stage: (8 + row) % 8 = row
      const uint32_t value_row = static_cast<uint32_t>(__cvta_generic_to_shared(values)) + row * Ring::kRowPitch;
      addKeyStepMma<E, F>(stages, value_row, Ring::kSwizzled ? value_piece ^ row : value_piece, valid, qa, q_factor,
                          lane, st);
    }
  });
  st.l += __shfl_xor_sync(0xffffffffu, st.l, 1);
  st.l += __shfl_xor_sync(0xffffffffu, st.l, 2);
  if constexpr (F == CacheFormat::kFp8) {
    const float vs = *p.v_scale;
#pragma unroll
    for (int n = 0; n < E / 8; ++n) {
      st.o[n][0] *= vs;
      st.o[n][1] *= vs;
    }
  }
}

// Whether the tensor-core path takes the attention: a cache streamed through the ring with the
// head size exactly 32 * NE of 64 or 128 (full fragments; 256 would need 128 accumulators).
__host__ __device__ constexpr bool MmaPath(int NE) { return NE == 2 || NE == 4; }

// Where a query token stands: its sequence (-1: a padding token) and the keys it sees.
struct QueryRow {
  int64_t t, h, seq, keys;
};

// Called by a whole warp with the same t in every lane (sequenceOf).
__device__ QueryRow queryRow(const PagedAttentionParams& p, int64_t t, int64_t h, int lane) {
  QueryRow r{t, h, -1, 0};
  r.seq = sequenceOf(p.query_start_loc, p.num_seqs, r.t, lane);
  if (r.seq < 0) return r;
  const int64_t ql = p.query_start_loc[r.seq + 1] - p.query_start_loc[r.seq];
  int64_t ctx = p.seq_lens[r.seq];
  if (ctx > p.max_blocks * p.block_size) ctx = p.max_blocks * p.block_size;
  const int64_t pos = ctx - ql + (r.t - p.query_start_loc[r.seq]);  // keys 0..pos, causal
  r.keys = pos + 1 < ctx ? pos + 1 : ctx;
  if (r.keys < 0) r.keys = 0;
  return r;
}

// The normalized output row of head r.h (or zeros for a padding token; NaN when no key was
// seen: bad metadata).
template <int NE>
__device__ void writeRow(const PagedAttentionParams& p, const QueryRow& r, const float (&acc)[NE], float l, int lane) {
  const float inv_out_scale = p.out_dtype == DType::F8E4M3FN ? 1.0f / *p.out_scale : 1.0f;
  const int64_t obase = r.t * p.o_stride[0] + r.h * p.o_stride[1];
  const float inv = l > 0.0f ? 1.0f / l : __int_as_float(0x7fc00000);
#pragma unroll
  for (int k = 0; k < NE; ++k) {
    const int64_t e = static_cast<int64_t>(lane) * NE + k;
    if (e < p.head_size) storeOut(p, obase + e, r.seq < 0 ? 0.0f : acc[k] * inv, inv_out_scale);
  }
}

// The split-KV workspace: per (token, query head) row and chunk, the unnormalized output
// (head_size floats; all rows' first, so each is 16-byte aligned when head_size is a multiple of
// 4) and then, after all of them, the running maximum and sum (2 floats).
struct SplitWorkspace {
  float* acc;
  float* ml;
  __device__ SplitWorkspace(const PagedAttentionParams& p)
      : acc(p.workspace), ml(p.workspace + p.num_tokens * p.heads_q * p.num_splits * p.head_size) {}
};

// How the attention kernel reads K and V: straight into registers (any head size), through
// the warp's cp.async ring with the scores on CUDA cores, or through the ring with tensor cores.
enum class LoadPath { kDirect, kRing, kRingMma };

// Chunks one tensor-core CTA attends, a warp each: the largest of 12, 6, 4, 3, 2 and 1 that
// divides num_splits, so 12 / W CTAs (12 warps) fill a multiprocessor's registers and rings.
// Where a row's num_splits / W CTAs are at most kMmaMaxCluster, they form a thread-block
// cluster and merge through distributed shared memory; more go through the combine kernel.
constexpr int kMmaMaxWarps = 12;
constexpr int kMmaMaxCluster = 8;
int64_t MmaChunksPerCta(int64_t num_splits) {
  for (int64_t w : {12, 6, 4, 3, 2})
    if (num_splits % w == 0) return w;
  return 1;
}

// One row's merged state in shared memory: o[head][E] (unnormalized), then m[head] and l[head].
template <int E, int HPW>
struct MergedState {
  static constexpr int kFloats = HPW * E + 2 * HPW;
  float* f;
  __device__ float& o(int h, int e) const { return f[h * E + e]; }
  __device__ float& m(int h) const { return f[HPW * E + h]; }
  __device__ float& l(int h) const { return f[HPW * E + HPW + h]; }
};

// The dynamic shared memory of a tensor-core CTA of `warps` warps: their rings, then for a
// clustered launch of `cluster` CTAs the slots of the cluster's merged states (mergeWarpStates).
template <int E, int HPW, CacheFormat F>
constexpr int64_t MmaSmemBytes(int64_t warps, int64_t cluster) {
  return warps * MmaRing<E, F>::kBytes + (cluster > 1 ? cluster * MergedState<E, HPW>::kFloats * 4 : 0);
}
// The most any launch takes, within sm_90's 227 KB per block (bf16, E = 128, 8 heads per warp:
// 12 rings of 16 KB and 8 slots of 4160 bytes).
template <int E, int HPW, CacheFormat F>
constexpr int64_t kMmaMaxSmemBytes = MmaSmemBytes<E, HPW, F>(kMmaMaxWarps, kMmaMaxCluster);
constexpr int64_t kSm90MaxSmemPerBlock = 227 * 1024;

// The shared memory mergeStates keeps its per-head weights in: [HPW][kMaxStates] factors, then
// l and M per head.
template <int HPW, int kMaxStates>
constexpr int kMergeWeightFloats = HPW * (kMaxStates + 2);

// The merge of `count` (at most kMaxStates) states of a row's HPW heads:
//
//      M(h) = max_i m_i(h)          f_i(h) = 2^(m_i(h) - M(h))   (0 where m_i = -inf: no valid key)
//      o(h, e) = sum_i o_i(h, e) * f_i(h)      l(h) = sum_i l_i(h) * f_i(h)
//
// into emit(h, e, o, M, l) for every element, the CTA's threads a share each. The first warp
// computes each head's weights once into `weights` (kMergeWeightFloats, shared memory no state
// is in): head h takes 32 / HPW lanes, each lane a few states, and M and l are reduced across
// them with shuffles, so the warp's chain is a few loads and exchanges, not a loop over the
// states that the CTA's other warps wait for at the barrier. An element then costs one load and
// one multiply-add per state, added in state order. Called by every thread of the CTA (a barrier
// inside); the states are in this CTA's shared memory. HPW is a power of two up to 32.
template <int E, int HPW, int kMaxStates, typename StateAt, typename Emit>
__device__ void mergeStates(int count, StateAt&& state, float* weights, Emit&& emit) {
  static_assert(HPW >= 1 && HPW <= 32 && (HPW & (HPW - 1)) == 0, "heads split the warp's lanes evenly");
  constexpr int kLanesPerHead = 32 / HPW;
  constexpr int kStatesPerLane = (kMaxStates + kLanesPerHead - 1) / kLanesPerHead;
  float* factor = weights;  // [h][i]
  float* head_l = weights + HPW * kMaxStates;
  float* head_m = head_l + HPW;
  if (threadIdx.x < 32) {  // the whole first warp: its shuffles need every lane
    const int h = threadIdx.x / kLanesPerHead, first = threadIdx.x % kLanesPerHead;
    float ms[kStatesPerLane], ls[kStatesPerLane];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < kStatesPerLane; ++k) {
      const int i = first + k * kLanesPerHead;
      ms[k] = i < count ? state(i).m(h) : -INFINITY;
      ls[k] = i < count ? state(i).l(h) : 0.0f;
      m = fmaxf(m, ms[k]);
    }
#pragma unroll
    for (int mask = kLanesPerHead / 2; mask > 0; mask >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, mask));
    float l = 0.0f;
#pragma unroll
    for (int k = 0; k < kStatesPerLane; ++k) {
      const int i = first + k * kLanesPerHead;
      const float f = ms[k] == -INFINITY ? 0.0f : exp2f(ms[k] - m);
      if (i < count) factor[h * kMaxStates + i] = f;
      l += ls[k] * f;
    }
#pragma unroll
    for (int mask = kLanesPerHead / 2; mask > 0; mask >>= 1) l += __shfl_xor_sync(0xffffffffu, l, mask);
    if (first == 0) {
      head_l[h] = l;
      head_m[h] = m;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < HPW * E; i += blockDim.x) {
    const int h = i / E, e = i % E;
    float o = 0.0f;
#pragma unroll 4
    for (int j = 0; j < count; ++j) o += state(j).o(h, e) * factor[h * kMaxStates + j];
    emit(h, e, o, head_m[h], head_l[h]);
  }
}

// Element e of head h of the row's output: o / l rounded (zeros for a padding token, NaN when
// no key was seen: bad metadata).
__device__ __forceinline__ void storeMerged(const PagedAttentionParams& p, const QueryRow& r, int64_t h, int e,
                                            float o, float l) {
  const float inv_out_scale = p.out_dtype == DType::F8E4M3FN ? 1.0f / *p.out_scale : 1.0f;
  const float inv = l > 0.0f ? 1.0f / l : __int_as_float(0x7fc00000);
  storeOut(p, r.t * p.o_stride[0] + h * p.o_stride[1] + e, r.seq < 0 ? 0.0f : o * inv, inv_out_scale);
}

// The CTA's W warp states merged in shared memory (`smem`: their rings, `ring_bytes` apart; every
// copy has landed), in warp order; then the output rows when the CTA holds every chunk of the row, or the merged
// state into the workspace slot of the CTA's first chunk `first` for pagedCombineKernel. CTAs of
// a `clustered` launch (a cluster holding every chunk of the row) instead push their merged
// states into the first CTA's `cluster_states` (a slot per rank, shared memory no ring uses),
// arrive at the cluster barrier and leave; the first CTA waits for them and merges the slots in
// rank order into the output rows:
//
//      CTA 0 .. n-1:  warp states --merge--> slot[rank] of CTA 0   (distributed shared memory)
//      CTA 0:         slot[0..n) --merge--> output rows
//
// Only CTA 0's shared memory is touched by other CTAs (written), and only CTA 0 waits for them.
template <int E, int HPW>
__device__ void mergeWarpStates(const PagedAttentionParams& p, const QueryRow& r, int64_t h0, int64_t first,
                                bool clustered, const MmaSoftmax<E>& st, uint8_t* smem, int ring_bytes,
                                float* cluster_states) {
  using State = MergedState<E, HPW>;
  namespace cg = cooperative_groups;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, tq = lane & 3;
  // Warp w's state at the start of its own ring, which only it used: no barrier before the
  // writes. The merge weights follow the first warp's state.
  auto warpState = [&](int w) { return State{reinterpret_cast<float*>(smem + w * ring_bytes)}; };
  __syncwarp();  // every lane of this warp is done with its ring
  if (g < HPW) {
    const State mine = warpState(warp);
#pragma unroll
    for (int n = 0; n < E / 8; ++n)
#pragma unroll
      for (int j = 0; j < 2; ++j) mine.o(g, 8 * n + 2 * tq + j) = st.o[n][j];
    if (tq == 0) mine.m(g) = st.m, mine.l(g) = st.l;
  }
  __syncthreads();
  State pushed{nullptr};  // this CTA's slot in the first CTA's shared memory
  if (clustered) {
    const cg::cluster_group cluster = cg::this_cluster();
    cluster.barrier_wait();  // every CTA has started (the kernel's first arrive)
    pushed = State{cluster.map_shared_rank(cluster_states + cluster.block_rank() * State::kFloats, 0)};
  }
  const bool final = p.num_splits == warps;
  const SplitWorkspace ws(p);
  float* weights = warpState(0).f + State::kFloats;
  mergeStates<E, HPW, kMmaMaxWarps>(warps, warpState, weights, [&](int h, int e, float o, float m, float l) {
    if (final) {
      storeMerged(p, r, h0 + h, e, o, l);
    } else if (clustered) {
      pushed.o(h, e) = o;
      if (e == 0) pushed.m(h) = m, pushed.l(h) = l;
    } else {
      const int64_t slot = (r.t * p.heads_q + h0 + h) * p.num_splits + first;
      ws.acc[slot * E + e] = o;
      if (e == 0) ws.ml[2 * slot] = m, ws.ml[2 * slot + 1] = l;
    }
  });
  if (!clustered) return;
  const cg::cluster_group cluster = cg::this_cluster();
  cluster.barrier_arrive();  // release: this CTA's pushes; and every thread is past its merge
  if (cluster.block_rank() != 0) return;  // no other CTA touches this one's shared memory
  cluster.barrier_wait();
  auto rankState = [&](int rank) { return State{cluster_states + rank * State::kFloats}; };
  auto store = [&](int h, int e, float o, float, float l) { storeMerged(p, r, h0 + h, e, o, l); };
  mergeStates<E, HPW, kMmaMaxCluster>(static_cast<int>(cluster.num_blocks()), rankState, weights, store);
}

// The CUDA-core form of one warp's rows: keys [lo, hi) for query heads h0.. of r.t (through
// the ring when kRing), then the output rows (one chunk) or the partial states (several).
template <int NE, int HPW, CacheFormat F, bool kRing>
__device__ void attendRowsCuda(const PagedAttentionParams& p, const QueryRow& r, int64_t h0, int64_t lo, int64_t hi,
                               int lane, int warp) {
  const int64_t t = r.t;
  const bool split = p.num_splits > 1;
  Softmax<NE, HPW> st;
#pragma unroll
  for (int h = 0; h < HPW; ++h) {
    st.m[h] = -INFINITY;
    st.l[h] = 0.0f;
#pragma unroll
    for (int k = 0; k < NE; ++k) st.acc[h][k] = 0.0f;
  }
  if (r.seq >= 0) {
    // q carries the softmax scale, log2(e) (scores are exponents of 2) and the FP8 k_scale, so
    // a key's score is its dot product with q alone.
    const float ks = p.cache_dtype == DType::F8E4M3FN ? *p.k_scale : 1.0f;
    const float vs = p.cache_dtype == DType::F8E4M3FN ? *p.v_scale : 1.0f;
    const float q_factor = p.scale * kLog2e * ks;
    float q[HPW][NE];
#pragma unroll
    for (int h = 0; h < HPW; ++h)
#pragma unroll
      for (int k = 0; k < NE; ++k) {
        const int64_t e = static_cast<int64_t>(lane) * NE + k;
        q[h][k] = e < p.head_size ? load16(p.q, t * p.q_stride[0] + (h0 + h) * p.q_stride[1] + e, p.dtype) * q_factor
                                  : 0.0f;
      }
    const int32_t* blocks = p.block_table + r.seq * p.block_table_stride;
    const int64_t hk = h0 / (p.heads_q / p.heads_kv);
    __shared__ float scores[kWarps][HPW * kKeyGroup];
    if constexpr (kRing) {
      extern __shared__ __align__(16) uint8_t paged_rings[];
      __shared__ unsigned masks[kWarps][4];
      attendKeysStaged<NE, HPW, F>(p, q, blocks, hk, lo, hi, vs, lane, scores[warp],
                                   paged_rings + warp * StagedRing<NE, F>::kWarpBytes, masks[warp], st);
    } else {
      attendKeys<NE, HPW, F>(p, q, blocks, hk, lo, hi, vs, lane, p.head_size % NE == 0, scores[warp], st);
    }
  }
  const SplitWorkspace ws(p);
#pragma unroll
  for (int h = 0; h < HPW; ++h) {
    const QueryRow rh{r.t, h0 + h, r.seq, r.keys};
    if (!split) {
      writeRow<NE>(p, rh, st.acc[h], st.l[h], lane);
      continue;
    }
    const int64_t slot = (t * p.heads_q + h0 + h) * p.num_splits + blockIdx.y;
#pragma unroll
    for (int k = 0; k < NE; ++k)
      if (lane * NE + k < p.head_size) ws.acc[slot * p.head_size + lane * NE + k] = st.acc[h][k];
    if (lane == 0) {
      ws.ml[2 * slot] = st.m[h];
      ws.ml[2 * slot + 1] = st.l[h];
    }
  }
}

// CTAs per multiprocessor the register budget aims at: 4 for the CUDA-core ring with up to 16
// accumulators per lane (128 registers).
constexpr int minBlocks(LoadPath path, int accumulators) {
  return path == LoadPath::kRing && accumulators <= 16 ? 4 : 1;
}

// The CUDA-core attention (heads the tensor-core path does not take, or FXFUSE_PAGED_MMA=0): one
// warp per (query token, group of HPW query heads of one KV head, chunk blockIdx.y): the
// chunk's keys of the token's causal range, K and V read once for the group's heads, as kPath
// says (the ring: dynamic shared memory of kWarps rings). One chunk: the output rows; several:
// each head's partial state into the workspace (chunks past the context write nothing),
// merged by pagedCombineKernel. The next kernel (the combine, or the o-projection) may launch
// only once every block has attended: a trigger at the start would let it, and the kernel
// after it, take multiprocessor slots that this grid's later waves need (docs/runtime.md
// "Programmatic dependent launch").

template <int NE, int HPW, CacheFormat F, LoadPath kPath>
__global__ void __launch_bounds__(kWarps * 32, minBlocks(kPath, HPW * NE)) pagedAttentionKernel(PagedAttentionParams p) {
  // The row's metadata is read while the preceding kernel drains where no step writes it.
  if (!p.metadata_read_only) kernels::waitForPrecedingGrid();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t groups = p.heads_q / HPW;
  const int64_t warp_row = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const bool in_range = warp_row < p.num_tokens * groups;  // the same in every lane of the warp
  const int64_t t = warp_row / groups, h0 = (warp_row % groups) * HPW;
  const QueryRow r = in_range ? queryRow(p, t, h0, lane) : QueryRow{t, h0, -1, 0};
  if (p.metadata_read_only) kernels::waitForPrecedingGrid();
  if (!in_range) return;
  const bool split = p.num_splits > 1;
  const int64_t chunk = split ? PagedChunkKeys(r.keys, p.num_splits) : r.keys;
  const int64_t lo = split ? static_cast<int64_t>(blockIdx.y) * chunk : 0;
  const int64_t hi = lo + chunk < r.keys ? lo + chunk : r.keys;
  if (split && (r.seq < 0 || lo >= r.keys)) return;  // the combine reads no chunk past the context
  attendRowsCuda<NE, HPW, F, kPath == LoadPath::kRing>(p, r, h0, lo, hi, lane, warp);
  kernels::allowDependentGrids();  // blocks that return early count as triggered
}

// The tensor-core attention: one CTA per (query token, group of HPW query heads of one KV head)
// and W = blockDim.x / 32 consecutive chunks (those of blockIdx.y), one warp per chunk, each
// streaming its keys through its own ring (attendKeysMma). The W states meet in shared memory
// (mergeWarpStates), so a row split only within a CTA needs no second kernel; otherwise
// pagedCombineKernel merges the CTAs' states (chunk stride W). The next kernel may launch once
// every warp has attended, or (early_dependents) at once: the dependent starts only when every
// CTA of this grid has started, so it takes no slot this grid needs, and a small-M GEMM after
// it (the o-projection) streams its weights into its rings while this latency-bound kernel runs
// (docs/runtime.md "Programmatic dependent launch").
template <int E, int HPW, CacheFormat F>
__global__ void __launch_bounds__(kMmaMaxWarps * 32, 1)
    pagedAttentionMmaKernel(PagedAttentionParams p, bool clustered, bool early_dependents) {
  using Ring = MmaRing<E, F>;
  static_assert((MergedState<E, HPW>::kFloats + kMergeWeightFloats<HPW, kMmaMaxWarps>) * 4 <= Ring::kBytes,
                "a warp's state and the merge weights fit a ring");
  if (early_dependents) kernels::allowDependentGrids();  // a later trigger changes nothing
  // A clustered CTA pushes its merged state into the first CTA's shared memory, which must have
  // started by then: every CTA arrives here and waits before its push (mergeWarpStates).
  if (clustered) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");  // nothing to publish
  // The metadata and the first keys' block ids are read while the preceding kernel drains where
  // no step writes them; q and the caches only after the wait (every CTA waits before it exits,
  // so the grid never completes before the one it depends on).
  if (!p.metadata_read_only) kernels::waitForPrecedingGrid();
  // Index math in 32 bits (a 64-bit division is a call of ~70 instructions): the grid, heads,
  // splits and keys of the tensor-core path fit (LaunchPagedAttention, loadPathOf).
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const uint32_t warps = blockDim.x >> 5, groups = static_cast<uint32_t>(p.heads_q / HPW);
  const uint32_t ctas_per_row = static_cast<uint32_t>(p.num_splits) / warps;
  const uint32_t row = blockIdx.x / ctas_per_row, t = row / groups, h0 = row % groups * HPW;
  const QueryRow r = queryRow(p, t, h0, lane);
  const uint32_t keys = static_cast<uint32_t>(r.keys);
  const uint32_t chunk = p.num_splits > 1 ? PagedChunkKeys(keys, static_cast<uint32_t>(p.num_splits)) : keys;
  const uint32_t first = blockIdx.x % ctas_per_row * warps;
  const uint32_t lo = (first + warp) * chunk, hi = r.seq < 0 ? lo : lo + chunk < keys ? lo + chunk : keys;
  const uint32_t hk = h0 / static_cast<uint32_t>(p.heads_q / p.heads_kv);
  KeyWindows windows(p, r.seq < 0 ? p.block_table : p.block_table + r.seq * p.block_table_stride,
                     static_cast<int32_t>(hk), lo, hi, lane);
  if (p.metadata_read_only) kernels::waitForPrecedingGrid();
  // Where the combine kernel follows, it reads no chunk past the context (a cluster's CTAs all
  // take part in its barriers).
  if (p.num_splits > warps && !clustered && (r.seq < 0 || first * chunk >= keys)) {
    kernels::allowDependentGrids();
    return;
  }
  MmaSoftmax<E> st;
#pragma unroll
  for (int n = 0; n < E / 8; ++n)
#pragma unroll
    for (int j = 0; j < 4; ++j) st.o[n][j] = 0.0f;
  st.m = -INFINITY;
  st.l = 0.0f;
  extern __shared__ __align__(16) uint8_t paged_rings[];
  if (r.seq >= 0 && lo < hi) {
    const float q_factor = p.scale * kLog2e * (F == CacheFormat::kFp8 ? *p.k_scale : 1.0f);
    attendKeysMma<E, HPW, F>(p, t, h0, windows, q_factor, lane, paged_rings + warp * Ring::kBytes, st);
  }
  kernels::allowDependentGrids();
  mergeWarpStates<E, HPW>(p, r, h0, first, clustered, st, paged_rings, Ring::kBytes,
                          reinterpret_cast<float*>(paged_rings + warps * Ring::kBytes));
}

// The largest of some scores that may all be -inf (reduce.cuh's MaxOp is for magnitudes).
struct ScoreMaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Chunks whose partial outputs a combine lane loads before it adds any.
constexpr int kCombineBatch = 8;

// Lane `lane`'s NE elements of chunk c's partial output of a row (0 past the head size):
// one 16-byte load where NE = 4 and the head size is a multiple of 4 (the workspace's rows
// are then 16-byte aligned).
template <int NE>
__device__ __forceinline__ void loadPartial(const float* chunk_acc, int64_t head_size, int lane, float (&v)[NE]) {
  if constexpr (NE == 4) {
    if (head_size % 4 == 0) {
      const float4 x = lane * 4 < head_size ? *reinterpret_cast<const float4*>(chunk_acc + lane * 4)
                                            : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
      return;
    }
  }
#pragma unroll
  for (int k = 0; k < NE; ++k) v[k] = lane * NE + k < head_size ? chunk_acc[lane * NE + k] : 0.0f;
}

// The merge of a row's chunks, o = sum_c acc_c * 2^(m_c - M) / sum_c l_c * 2^(m_c - M) with M
// the largest m_c (chunks that saw no valid key, m_c = -inf, weigh 0), by WPR warps per
// (query token, query head) row, kWarps / WPR rows per block. Warp j of a row loads chunks j,
// j + WPR, ... kCombineBatch at a time, each with its m_c, and the first batch in the same
// round as every chunk's (m_c, l_c) for M and the sum (each warp of a row computes both): after
// the row's metadata a row costs one round of loads per WPR * kCombineBatch chunks, not a chain.
// With WPR > 1 the warps' sums are added in warp order through shared memory. The launcher
// takes WPR = 1 where chunks are few (a block merges four rows) and 4 where they are many
// (decode at small batches: up to 32 chunks in one round). The tensor-core attention leaves one
// state per `stride` chunks (those of a CTA, merged): states sit at chunks 0, stride, 2 * stride...
template <int NE, int WPR>
__global__ void __launch_bounds__(kWarps * 32) pagedCombineKernel(PagedAttentionParams p, int stride) {
  static_assert(kWarps % WPR == 0, "whole rows per block");
  kernels::allowDependentGrids();
  if (!p.metadata_read_only) kernels::waitForPrecedingGrid();  // else the row's metadata first
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % WPR;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kWarps / WPR) + warp / WPR;
  const bool in_range = row < p.num_tokens * p.heads_q;  // the same in every warp of the row
  QueryRow r{0, 0, -1, 0};
  if (in_range) r = queryRow(p, row / p.heads_q, row % p.heads_q, lane);
  if (p.metadata_read_only) kernels::waitForPrecedingGrid();
  const int64_t chunk = PagedChunkKeys(r.keys, p.num_splits);
  const int chunks = r.seq < 0 ? 0 : static_cast<int>((r.keys + chunk - 1) / chunk);
  const int used = (chunks + stride - 1) / stride;  // states
  const SplitWorkspace ws(p);
  const int64_t state_floats = static_cast<int64_t>(stride) * p.head_size;
  const float* acc_in = ws.acc + (in_range ? row : 0) * p.num_splits * p.head_size;
  const float* ml = ws.ml + (in_range ? row : 0) * p.num_splits * 2;
  const int ml_stride = 2 * stride;
  float parts[kCombineBatch][NE], m_of[kCombineBatch];
  auto loadBatch = [&](int c0) {  // states c0, c0 + WPR, ... of this warp
#pragma unroll
    for (int b = 0; b < kCombineBatch; ++b) {
      const int c = c0 + b * WPR;
      m_of[b] = c < used ? ml[ml_stride * c] : -INFINITY;
      if (c < used) loadPartial<NE>(acc_in + c * state_floats, p.head_size, lane, parts[b]);
    }
  };
  loadBatch(part);
  float m = -INFINITY;
  for (int c = lane; c < used; c += 32) m = fmaxf(m, ml[ml_stride * c]);
  const float M = kernels::device::WarpAllReduce(m, ScoreMaxOp{});
  auto weightOf = [&](float mc) { return mc == -INFINITY ? 0.0f : exp2f(mc - M); };
  float l = 0.0f;
  for (int c = lane; c < used; c += 32) l += ml[ml_stride * c + 1] * weightOf(ml[ml_stride * c]);
  l = kernels::device::WarpAllReduce(l, kernels::device::SumOp{});
  float acc[NE];
#pragma unroll
  for (int k = 0; k < NE; ++k) acc[k] = 0.0f;
  for (int c0 = part; c0 < used; c0 += WPR * kCombineBatch) {
    if (c0 != part) loadBatch(c0);
#pragma unroll
    for (int b = 0; b < kCombineBatch; ++b) {
      if (c0 + b * WPR >= used) break;
      const float f = weightOf(m_of[b]);
#pragma unroll
      for (int k = 0; k < NE; ++k) acc[k] += parts[b][k] * f;
    }
  }
  if constexpr (WPR > 1) {
    __shared__ float sums[kWarps][kPagedMaxHeadSize];
#pragma unroll
    for (int k = 0; k < NE; ++k)
      if (lane * NE + k < kPagedMaxHeadSize) sums[warp][lane * NE + k] = acc[k];
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int k = 0; k < NE; ++k) {
      float total = 0.0f;
#pragma unroll
      for (int j = 0; j < WPR; ++j) total += sums[warp + j][lane * NE + k];
      acc[k] = total;
    }
  }
  if (in_range) writeRow<NE>(p, r, acc, l, lane);
}

// Query heads one warp takes: the largest power of two up to 8 that divides the heads sharing
// a KV head and keeps HPW * NE <= 32 accumulators per lane.
int64_t headsPerWarp(const PagedAttentionParams& p, int64_t ne) {
  const int64_t group = p.heads_q / p.heads_kv;
  int64_t hpw = 1;
  while (hpw < 8 && group % (hpw * 2) == 0 && hpw * 2 * ne <= 32) hpw *= 2;
  return hpw;
}

// (token, head group) rows of `p`: the warps of one chunk each.
int64_t rowsOf(const PagedAttentionParams& p) {
  const int64_t ne = p.head_size <= 32 ? 1 : p.head_size <= 64 ? 2 : p.head_size <= 128 ? 4 : 8;
  return p.num_tokens * (p.heads_q / headsPerWarp(p, ne));
}

bool isD16(DType t) { return t == DType::BF16 || t == DType::F16; }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// $FXFUSE_PAGED_MMA=0 keeps the scores on CUDA cores (for A/B runs and the GPU test's
// comparison of the two paths). Read per call: tests switch it within one process.
bool mmaDisabled() {
  const char* v = std::getenv("FXFUSE_PAGED_MMA");
  return v && v[0] == '0';
}

// Whether the tensor-core attention lets the next kernel launch at its start (default) or only
// after its keys ($FXFUSE_PAGED_EARLY_TRIGGER=0, for A/B runs). Read per call.
bool earlyDependents() {
  const char* v = std::getenv("FXFUSE_PAGED_EARLY_TRIGGER");
  return !(v && v[0] == '0');
}

int64_t targetWarpsPerSm() {
  const char* v = std::getenv("FXFUSE_PAGED_WARPS_PER_SM");
  const long n = v ? std::strtol(v, nullptr, 10) : 0;
  return n >= 1 && n <= 1024 ? n : kPagedSplitWarpsPerSm;
}

// Launches the attention kernel of (NE, HPW, F) on `path` (the rings: dynamic shared memory
// past the default 48 KB limit, raised once per kernel and device).
template <int NE, int HPW, CacheFormat F>
cudaError_t launchAttention(LoadPath path, dim3 grid, cudaStream_t stream, const PagedAttentionParams& p) {
  auto withRing = [&](auto kernel, int bytes) {
    const cudaError_t raised = kernels::device::ensureSmemLimit<decltype(kernel)::value>(bytes);
    if (raised != cudaSuccess) return raised;
    return kernels::LaunchProgrammatic(decltype(kernel)::value, grid, dim3(kWarps * 32), bytes, stream, p);
  };
  using Kernel = void (*)(PagedAttentionParams);
  if (path == LoadPath::kRing)
    return withRing(std::integral_constant<Kernel, pagedAttentionKernel<NE, HPW, F, LoadPath::kRing>>{},
                    kWarps * StagedRing<NE, F>::kWarpBytes);
  return kernels::LaunchProgrammatic(pagedAttentionKernel<NE, HPW, F, LoadPath::kDirect>, grid, dim3(kWarps * 32), 0,
                                     stream, p);
}

unsigned gridFor(int64_t items, int64_t per_block, int64_t cap) {
  int64_t g = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(g < cap ? g : cap);
}

// The tensor-core attention of (E, HPW, F): one CTA per (token, head group) and W chunks
// (MmaChunksPerCta), W rings of dynamic shared memory.
template <int E, int HPW, CacheFormat F>
cudaError_t launchMmaAttention(const PagedAttentionParams& p, int64_t chunks_per_cta, cudaStream_t stream) {
  constexpr auto kernel = pagedAttentionMmaKernel<E, HPW, F>;
  static_assert(kMmaMaxSmemBytes<E, HPW, F> <= kSm90MaxSmemPerBlock, "every launch's shared memory fits");
  const cudaError_t raised = kernels::device::ensureSmemLimit<kernel>(static_cast<int>(kMmaMaxSmemBytes<E, HPW, F>));
  if (raised != cudaSuccess) return raised;
  const int64_t ctas_per_row = p.num_splits / chunks_per_cta;
  const bool clustered = ctas_per_row > 1 && ctas_per_row <= kMmaMaxCluster;
  const int64_t cluster = clustered ? ctas_per_row : 0;
  const dim3 grid(static_cast<unsigned>(p.num_tokens * (p.heads_q / HPW) * ctas_per_row));
  return kernels::LaunchProgrammaticInClusters(kernel, grid, dim3(static_cast<unsigned>(32 * chunks_per_cta)),
                                               static_cast<size_t>(MmaSmemBytes<E, HPW, F>(chunks_per_cta, cluster)),
                                               static_cast<int>(cluster), stream, p, clustered, earlyDependents());
}

// How the attention reads the caches (valid params).
LoadPath loadPathOf(const PagedAttentionParams& p) {
  const int64_t elem_bytes = p.cache_dtype == DType::F8E4M3FN ? 1 : 2;
  const bool staged = StagedRows(p.head_size, elem_bytes) && aligned16(p.key_cache) && aligned16(p.value_cache);
  // Tensor cores: head size 64 or 128 (whole fragments), q rows read as 32-bit pairs, every cache
  // row numbered in 31 bits (streamKeySteps), every context's keys counted in 31 bits (the
  // kernel's index math).
  const bool rows_fit =
      p.num_blocks <= INT32_MAX / p.block_size / p.heads_kv && p.max_blocks <= INT32_MAX / p.block_size;
  const bool mma = staged && rows_fit && (p.head_size == 64 || p.head_size == 128) &&
                   reinterpret_cast<uintptr_t>(p.q) % 4 == 0 && p.q_stride[0] % 2 == 0 && p.q_stride[1] % 2 == 0 &&
                   !mmaDisabled();
  return mma ? LoadPath::kRingMma : staged ? LoadPath::kRing : LoadPath::kDirect;
}

// The split planned for at most `splits` chunks of a `max_keys`-key block table: the largest
// count whose chunks the tensor-core attention merges without the combine kernel (at most
// kMmaMaxCluster CTAs of MmaChunksPerCta warps per row) where `splits` allows one, giving up less
// than a fifth of the chunks (59 -> 48 at worst). Above, the most merged count (96) where its
// chunks take no more 16-key steps than the others' (the warps' chains are as long, and the
// combine kernel is saved: 120 -> 96 chunks of a 4096-key table, 3 steps each), else a
// multiple of 12 (the fewest states for the combine).
int64_t mergedInClusters(int64_t splits, int64_t max_keys) {
  constexpr int64_t kMostMerged = kMmaMaxWarps * kMmaMaxCluster;
  if (splits > kMostMerged) {
    const int64_t rounded = splits - splits % kMmaMaxWarps;
    auto steps = [&](int64_t n) { return (PagedChunkKeys(max_keys, n) + 15) / 16; };
    return steps(kMostMerged) <= steps(rounded) ? kMostMerged : rounded;
  }
  for (int64_t s = splits; s > 1; --s)
    if (s / MmaChunksPerCta(s) <= kMmaMaxCluster) return s;
  return splits;
}

}  // namespace

int PagedAttentionKernels(const PagedAttentionParams& p) {
  if (p.num_splits <= 1 || p.head_size <= 0 || p.block_size <= 0 || p.heads_kv <= 0) return 1;
  const bool mma = loadPathOf(p) == LoadPath::kRingMma;
  const int64_t states = p.num_splits / (mma ? MmaChunksPerCta(p.num_splits) : 1);
  return states > (mma ? kMmaMaxCluster : 1) ? 2 : 1;
}

cudaError_t LaunchPagedAttention(const PagedAttentionParams& p, cudaStream_t stream) {
  if (!isD16(p.dtype) || (p.cache_dtype != p.dtype && p.cache_dtype != DType::F8E4M3FN)) return cudaErrorInvalidValue;
  if (p.out_dtype != p.dtype && p.out_dtype != DType::F8E4M3FN) return cudaErrorInvalidValue;
  if (p.head_size <= 0 || p.head_size > kPagedMaxHeadSize || p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0)
    return cudaErrorInvalidValue;
  if (p.num_tokens < 0 || p.num_seqs < 0 || p.max_blocks < 0 || p.num_blocks < 0 || p.block_size <= 0 ||
      p.block_size > INT32_MAX)
    return cudaErrorInvalidValue;
  if (p.cache_dtype == DType::F8E4M3FN && (!p.k_scale || !p.v_scale)) return cudaErrorInvalidValue;
  if (p.out_dtype == DType::F8E4M3FN && !p.out_scale) return cudaErrorInvalidValue;
  const int64_t rows = p.num_tokens * p.heads_q;
  if (rows == 0) return cudaSuccess;
  if (!p.q || !p.out || !p.query_start_loc || (p.num_seqs > 0 && (!p.key_cache || !p.value_cache || !p.block_table || !p.seq_lens)))
    return cudaErrorInvalidValue;
  if (p.num_splits < 1 || p.num_splits > kMaxSplits || p.num_splits > 65535) return cudaErrorInvalidValue;
  if (p.num_splits > 1 && !p.workspace) return cudaErrorInvalidValue;
  // Every grid below has at most one block per (row, chunk): a larger batch would not fit
  // gridDim.x, and a clipped grid would leave rows unwritten.
  if (rows > INT32_MAX / p.num_splits) return cudaErrorInvalidValue;
  const int64_t ne = p.head_size <= 32 ? 1 : p.head_size <= 64 ? 2 : p.head_size <= 128 ? 4 : 8;
  const int64_t hpw = headsPerWarp(p, ne);
  const dim3 split_grid(gridFor(p.num_tokens * (p.heads_q / hpw), kWarps, (int64_t{1} << 31) - 1),
                        static_cast<unsigned>(p.num_splits));
  const LoadPath path = loadPathOf(p);
  cudaError_t err = cudaSuccess;
  auto byHeads = [&](auto ne_tag, auto format_tag) {
    constexpr int NE = decltype(ne_tag)::value;
    constexpr CacheFormat F = decltype(format_tag)::value;
    const int64_t chunks_per_cta = path == LoadPath::kRingMma ? MmaChunksPerCta(p.num_splits) : 1;
    auto attend = [&](auto hpw_tag) {
      constexpr int HPW = decltype(hpw_tag)::value;
      if constexpr (MmaPath(NE)) {
        if (path == LoadPath::kRingMma) return launchMmaAttention<32 * NE, HPW, F>(p, chunks_per_cta, stream);
      }
      return launchAttention<NE, HPW, F>(path, split_grid, stream, p);
    };
    if constexpr (NE * 8 <= 32) {  // headsPerWarp keeps HPW * NE <= 32
      if (hpw == 8) err = attend(std::integral_constant<int, 8>{});
    }
    if (hpw == 4) err = attend(std::integral_constant<int, 4>{});
    else if (hpw == 2) err = attend(std::integral_constant<int, 2>{});
    else if (hpw == 1) err = attend(std::integral_constant<int, 1>{});
    const int64_t states = p.num_splits / chunks_per_cta;  // per row, for the combine
    if (err == cudaSuccess && states > (path == LoadPath::kRingMma ? kMmaMaxCluster : 1)) {
      const bool many_chunks = states > kCombineBatch;
      const int64_t rows_per_block = many_chunks ? 1 : kWarps;
      err = kernels::LaunchProgrammatic(many_chunks ? pagedCombineKernel<NE, kWarps> : pagedCombineKernel<NE, 1>,
                                        dim3(gridFor(rows, rows_per_block, (int64_t{1} << 31) - 1)),
                                        dim3(kWarps * 32), 0, stream, p, static_cast<int>(chunks_per_cta));
    }
  };
  auto byFormat = [&](auto ne_tag) {
    using Format = CacheFormat;
    if (p.cache_dtype == DType::F8E4M3FN) byHeads(ne_tag, std::integral_constant<Format, Format::kFp8>{});
    else if (p.cache_dtype == DType::BF16) byHeads(ne_tag, std::integral_constant<Format, Format::kBf16>{});
    else byHeads(ne_tag, std::integral_constant<Format, Format::kF16>{});
  };
  if (ne == 1) byFormat(std::integral_constant<int, 1>{});
  else if (ne == 2) byFormat(std::integral_constant<int, 2>{});
  else if (ne == 4) byFormat(std::integral_constant<int, 4>{});
  else byFormat(std::integral_constant<int, 8>{});
  return err;
}

namespace {

// The split of `p` for at most `warps_per_sm` (token, head group, chunk) warps per multiprocessor.
int64_t splitsForWarpTarget(const PagedAttentionParams& p, int num_sms, int64_t warps_per_sm) {
  const int64_t max_keys = p.max_blocks * p.block_size;
  const int64_t target = static_cast<int64_t>(num_sms > 0 ? num_sms : 1) * warps_per_sm;
  // At most `target` warps: with the target a whole number of waves of resident warps, the last
  // wave is full rather than a few CTAs long.
  int64_t splits = target / rowsOf(p);
  splits = std::min(splits, max_keys / kPagedMinSplitKeys);  // chunks of at least kPagedMinSplitKeys
  splits = std::min(splits, kMaxSplits);
  return splits <= 1 ? 1 : mergedInClusters(splits, max_keys);
}

// Whether every cluster of the tensor-core attention planned for `p` is resident at once (or
// none is planned, or the count is unknown).
bool clustersResident(const PagedAttentionParams& p, const PagedResidentClusters& resident) {
  if (p.num_splits <= 1 || loadPathOf(p) != LoadPath::kRingMma) return true;
  const int64_t chunks_per_cta = MmaChunksPerCta(p.num_splits), cluster = p.num_splits / chunks_per_cta;
  if (cluster < 2 || cluster > kMmaMaxCluster) return true;
  const int64_t at_once = resident ? resident(cluster, chunks_per_cta) : 0;
  return at_once <= 0 || rowsOf(p) <= at_once;
}

// Clusters of `cluster` CTAs of `chunks_per_cta` warps of pagedAttentionMmaKernel<E, HPW, F>
// resident at once on the current device; 0 where the runtime cannot say.
template <int E, int HPW, CacheFormat F>
int64_t residentMmaClusters(int64_t cluster, int64_t chunks_per_cta) {
  constexpr auto kernel = pagedAttentionMmaKernel<E, HPW, F>;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(cluster));
  config.blockDim = dim3(static_cast<unsigned>(32 * chunks_per_cta));
  config.dynamicSmemBytes = static_cast<size_t>(MmaSmemBytes<E, HPW, F>(chunks_per_cta, cluster));
  cudaLaunchAttribute attribute = {};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(cluster);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  int count = 0;
  if (kernels::device::ensureSmemLimit<kernel>(static_cast<int>(kMmaMaxSmemBytes<E, HPW, F>)) != cudaSuccess ||
      cudaOccupancyMaxActiveClusters(&count, kernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: the caller plans without the limit
    return 0;
  }
  return count;
}

}  // namespace

PagedResidentClusters DevicePagedResidentClusters(const PagedAttentionParams& p) {
  if (p.head_size != 64 && p.head_size != 128) return {};
  const int64_t hpw = headsPerWarp(p, p.head_size / 32);
  const CacheFormat format = p.cache_dtype == DType::F8E4M3FN ? CacheFormat::kFp8
                             : p.cache_dtype == DType::BF16   ? CacheFormat::kBf16
                                                              : CacheFormat::kF16;
  return [head_size = p.head_size, hpw, format](int64_t cluster, int64_t chunks_per_cta) -> int64_t {
    auto byFormat = [&](auto e_tag, auto hpw_tag) -> int64_t {
      constexpr int E = decltype(e_tag)::value, HPW = decltype(hpw_tag)::value;
      if (format == CacheFormat::kFp8) return residentMmaClusters<E, HPW, CacheFormat::kFp8>(cluster, chunks_per_cta);
      if (format == CacheFormat::kBf16) return residentMmaClusters<E, HPW, CacheFormat::kBf16>(cluster, chunks_per_cta);
      return residentMmaClusters<E, HPW, CacheFormat::kF16>(cluster, chunks_per_cta);
    };
    auto byHeads = [&](auto e_tag) -> int64_t {
      if (hpw == 8) return byFormat(e_tag, std::integral_constant<int, 8>{});
      if (hpw == 4) return byFormat(e_tag, std::integral_constant<int, 4>{});
      if (hpw == 2) return byFormat(e_tag, std::integral_constant<int, 2>{});
      return byFormat(e_tag, std::integral_constant<int, 1>{});
    };
    return head_size == 64 ? byHeads(std::integral_constant<int, 64>{}) : byHeads(std::integral_constant<int, 128>{});
  };
}

void PlanPagedAttentionSplits(PagedAttentionParams& p, int num_sms, const PagedResidentClusters& resident) {
  p.num_splits = 1;
  if (p.num_tokens <= 0 || p.heads_q <= 0 || p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0 ||
      p.max_blocks * p.block_size <= kPagedMinSplitKeys)
    return;
  // Clusters past the ones resident at once wait for a second wave, which runs a few of them
  // alone (the H200 takes 30 clusters of 4 such CTAs: batch 4's 32 rows at 12 warps per SM ran
  // 4 x 32k in 172 us). Half the warps per multiprocessor until they fit: batch 4 then takes
  // clusters of 2 (135 us; clusters of 3, all resident, 156 us: docs/attention.md).
  for (int64_t warps_per_sm = targetWarpsPerSm(); warps_per_sm >= 1; warps_per_sm /= 2) {
    p.num_splits = splitsForWarpTarget(p, num_sms, warps_per_sm);
    if (clustersResident(p, resident)) return;
  }
}

void PlanPagedAttentionSplits(PagedAttentionParams& p, int num_sms) {
  PlanPagedAttentionSplits(p, num_sms, DevicePagedResidentClusters(p));
}

int64_t PagedAttentionWorkspaceBytes(const PagedAttentionParams& p) {
  if (p.num_splits <= 1) return 0;
  return p.num_tokens * p.heads_q * p.num_splits * (p.head_size + 2) * static_cast<int64_t>(sizeof(float));
}

}  // namespace fxfuse::runtime
