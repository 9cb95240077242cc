// The paged KV-cache kernels (paged_attention.h): the cache write of this step's keys and
// values, then attention over each sequence's cached context. Numerics in
// docs/attention.md "Paged attention".
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <type_traits>

#include "kernels/runtime/paged_attention.h"
#include "kernels/types.h"

namespace fxfuse::runtime {
namespace {

constexpr int kWarps = 4;
constexpr int kCacheThreads = 256;

__device__ __forceinline__ float load16(const void* p, int64_t i, DType t) {
  if (t == DType::BF16) return __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(p)[i]);
  return __half2float(reinterpret_cast<const __half*>(p)[i]);
}

// A cache element as f32: a model-dtype value as it is, an FP8 one times its scale (one fp32
// multiply).
__device__ __forceinline__ float loadCache(const void* p, int64_t i, DType t, float scale) {
  if (t != DType::F8E4M3FN) return load16(p, i, t);
  __nv_fp8_e4m3 v;
  v.__x = reinterpret_cast<const __nv_fp8_storage_t*>(p)[i];
  return static_cast<float>(v) * scale;
}

__device__ __forceinline__ float roundTo(float x, DType t) {
  if (t == DType::BF16) return __bfloat162float(__float2bfloat16_rn(x));
  if (t == DType::F16) return __half2float(__float2half_rn(x));
  return x;
}

// One element of a key or value row into its cache slot: the 16-bit value copied, or
// fp8_e4m3(satfinite(f32(x) / scale)) as vLLM's reshape_and_cache_flash.
__device__ __forceinline__ void storeCache(void* cache, int64_t i, const void* src, int64_t si, DType src_dtype,
                                           DType cache_dtype, const float* scale) {
  if (cache_dtype == DType::F8E4M3FN) {
    const float x = load16(src, si, src_dtype) / *scale;
    reinterpret_cast<__nv_fp8_storage_t*>(cache)[i] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
  } else {
    reinterpret_cast<uint16_t*>(cache)[i] = reinterpret_cast<const uint16_t*>(src)[si];
  }
}

// One thread per (token, head, element), grid-stride; tokens without a slot in the cache
// (-1, or outside it) are skipped.
__global__ void __launch_bounds__(kCacheThreads) reshapeAndCacheKernel(ReshapeAndCacheParams p) {
  const int64_t row = p.heads_kv * p.head_size;
  const int64_t total = p.num_tokens * row;
  const int64_t capacity = p.num_blocks * p.block_size;
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < total;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = x / row, h = (x % row) / p.head_size, e = x % p.head_size;
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0 || slot >= capacity) continue;
    const int64_t dst = slot * row + h * p.head_size + e;
    storeCache(p.key_cache, dst, p.key, t * p.key_stride[0] + h * p.key_stride[1] + e, p.dtype, p.cache_dtype, p.k_scale);
    storeCache(p.value_cache, dst, p.value, t * p.value_stride[0] + h * p.value_stride[1] + e, p.dtype, p.cache_dtype,
               p.v_scale);
  }
}

// The sequence whose queries hold token t: the last b with qsl[b] <= t, or -1 when t is a
// padding token (t >= qsl[num_seqs]).
__device__ int64_t sequenceOf(const int32_t* qsl, int64_t num_seqs, int64_t t) {
  if (num_seqs <= 0 || t < qsl[0] || t >= qsl[num_seqs]) return -1;
  int64_t lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (qsl[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
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

// Keys a warp loads before it reduces any: their loads are in flight together instead of one
// key's latency after another's.
constexpr int kKeyGroup = static_cast<int>(kPagedKeyGroup);
// Split-KV target: (token, head group, chunk) warps per multiprocessor.
constexpr int64_t kTargetWarpsPerSm = 32;
constexpr int64_t kMaxSplits = 256;

// The elements of one cache or query row a lane holds: NE consecutive ones from lane * NE.
// `vector`: the row length is a multiple of NE (so the lane's elements are aligned and either
// all in the row or all past it): one load of NE elements; else one load per element.
template <int NE>
__device__ __forceinline__ void loadLane(const void* p, int64_t i, DType t, float scale, int lane, int64_t length,
                                         bool vector, float (&out)[NE]) {
  const int64_t e0 = static_cast<int64_t>(lane) * NE;
  if (vector && e0 < length) {
    if (t == DType::F8E4M3FN) {
      uint8_t b[NE];
      if constexpr (NE == 8) *reinterpret_cast<uint2*>(b) = *reinterpret_cast<const uint2*>(static_cast<const uint8_t*>(p) + i + e0);
      else if constexpr (NE == 4) *reinterpret_cast<uint32_t*>(b) = *reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(p) + i + e0);
      else if constexpr (NE == 2) *reinterpret_cast<uint16_t*>(b) = *reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(p) + i + e0);
      else b[0] = static_cast<const uint8_t*>(p)[i + e0];
#pragma unroll
      for (int k = 0; k < NE; ++k) {
        __nv_fp8_e4m3 v;
        v.__x = b[k];
        out[k] = static_cast<float>(v) * scale;
      }
      return;
    }
    uint16_t h[NE];
    const uint16_t* src = static_cast<const uint16_t*>(p) + i + e0;
    if constexpr (NE == 8) *reinterpret_cast<uint4*>(h) = *reinterpret_cast<const uint4*>(src);
    else if constexpr (NE == 4) *reinterpret_cast<uint2*>(h) = *reinterpret_cast<const uint2*>(src);
    else if constexpr (NE == 2) *reinterpret_cast<uint32_t*>(h) = *reinterpret_cast<const uint32_t*>(src);
    else h[0] = src[0];
#pragma unroll
    for (int k = 0; k < NE; ++k) {
      out[k] = t == DType::BF16 ? __bfloat162float(__ushort_as_bfloat16(h[k])) : __half2float(__ushort_as_half(h[k]));
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < NE; ++k) out[k] = e0 + k < length ? loadCache(p, i + e0 + k, t, scale) : 0.0f;
}

// The running state of HPW query heads over some keys: lane l's output elements l * NE ...
// (unnormalized), each head's maximum score and sum of exp(score - maximum).
template <int NE, int HPW>
struct Softmax {
  float acc[HPW][NE];
  float m[HPW], l[HPW];
};

// Keys [lo, hi) of a sequence (block table `blocks`) into `st` for the warp's HPW query heads
// `q`, which share KV head hk: kKeyGroup keys at a time, their K and V rows loaded together,
// each key's scores reduced across the warp, then every head's state rescaled once and the
// group's values added. Invalid block ids are skipped.
template <int NE, int HPW>
__device__ void attendKeys(const PagedAttentionParams& p, const float (&q)[HPW][NE], const int32_t* blocks, int64_t hk,
                           int64_t lo, int64_t hi, float ks, float vs, int lane, bool vector, Softmax<NE, HPW>& st) {
  for (int64_t j0 = lo; j0 < hi; j0 += kKeyGroup) {
    bool ok[kKeyGroup];
    float kr[kKeyGroup][NE], vr[kKeyGroup][NE];
#pragma unroll
    for (int g = 0; g < kKeyGroup; ++g) {
      const int64_t j = j0 + g;
      const int64_t block = j < hi ? blocks[j / p.block_size] : -1;
      ok[g] = block >= 0 && block < p.num_blocks;  // bad metadata: never read outside the cache
      const int64_t base = ok[g] ? ((block * p.block_size + j % p.block_size) * p.heads_kv + hk) * p.head_size : 0;
      loadLane<NE>(p.key_cache, base, p.cache_dtype, ks, lane, ok[g] ? p.head_size : 0, vector, kr[g]);
      loadLane<NE>(p.value_cache, base, p.cache_dtype, vs, lane, ok[g] ? p.head_size : 0, vector, vr[g]);
    }
#pragma unroll
    for (int h = 0; h < HPW; ++h) {
      float s[kKeyGroup];
#pragma unroll
      for (int g = 0; g < kKeyGroup; ++g) {
        float part = 0.0f;
#pragma unroll
        for (int k = 0; k < NE; ++k) part += q[h][k] * kr[g][k];
        s[g] = part;
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int g = 0; g < kKeyGroup; ++g) s[g] += __shfl_xor_sync(0xffffffffu, s[g], o);
      float mn = st.m[h];
#pragma unroll
      for (int g = 0; g < kKeyGroup; ++g) {
        s[g] = ok[g] ? s[g] * p.scale : -INFINITY;
        mn = fmaxf(mn, s[g]);
      }
      if (mn == -INFINITY) continue;  // no valid key so far
      const float corr = expf(st.m[h] - mn);  // st.m = -inf the first time: exp(-inf) = 0
      st.l[h] *= corr;
#pragma unroll
      for (int k = 0; k < NE; ++k) st.acc[h][k] *= corr;
#pragma unroll
      for (int g = 0; g < kKeyGroup; ++g) {
        const float pj = expf(s[g] - mn);  // an invalid key: exp(-inf) = 0 (and its row loaded as 0)
        st.l[h] += pj;
#pragma unroll
        for (int k = 0; k < NE; ++k) st.acc[h][k] += pj * vr[g][k];
      }
      st.m[h] = mn;
    }
  }
}

// Where a query token stands: its sequence (-1: a padding token) and the keys it sees.
struct QueryRow {
  int64_t t, h, seq, keys;
};

__device__ QueryRow queryRow(const PagedAttentionParams& p, int64_t t, int64_t h) {
  QueryRow r{t, h, -1, 0};
  r.seq = sequenceOf(p.query_start_loc, p.num_seqs, r.t);
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

// One warp per (query token, group of HPW query heads of one KV head, chunk blockIdx.y): the
// chunk's keys of the token's causal range, K and V read once for the group's heads. One
// chunk: the output rows; several: each head's partial state into the workspace, merged by
// pagedCombineKernel.
template <int NE, int HPW>
__global__ void __launch_bounds__(kWarps * 32) pagedAttentionKernel(PagedAttentionParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t groups = p.heads_q / HPW;
  const int64_t warp_row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (warp_row >= p.num_tokens * groups) return;
  const int64_t t = warp_row / groups, h0 = (warp_row % groups) * HPW;
  const QueryRow r = queryRow(p, t, h0);
  const bool split = p.num_splits > 1;
  const bool vector = p.head_size % NE == 0;
  Softmax<NE, HPW> st;
#pragma unroll
  for (int h = 0; h < HPW; ++h) {
    st.m[h] = -INFINITY;
    st.l[h] = 0.0f;
#pragma unroll
    for (int k = 0; k < NE; ++k) st.acc[h][k] = 0.0f;
  }
  if (r.seq >= 0) {
    float q[HPW][NE];
#pragma unroll
    for (int h = 0; h < HPW; ++h)
#pragma unroll
      for (int k = 0; k < NE; ++k) {
        const int64_t e = static_cast<int64_t>(lane) * NE + k;
        q[h][k] = e < p.head_size ? load16(p.q, t * p.q_stride[0] + (h0 + h) * p.q_stride[1] + e, p.dtype) : 0.0f;
      }
    const int64_t chunk = split ? PagedChunkKeys(r.keys, p.num_splits) : r.keys;
    const int64_t lo = split ? static_cast<int64_t>(blockIdx.y) * chunk : 0;
    const int64_t hi = lo + chunk < r.keys ? lo + chunk : r.keys;
    const float ks = p.cache_dtype == DType::F8E4M3FN ? *p.k_scale : 1.0f;
    const float vs = p.cache_dtype == DType::F8E4M3FN ? *p.v_scale : 1.0f;
    attendKeys<NE, HPW>(p, q, p.block_table + r.seq * p.block_table_stride, h0 / (p.heads_q / p.heads_kv), lo, hi, ks,
                        vs, lane, vector, st);
  }
#pragma unroll
  for (int h = 0; h < HPW; ++h) {
    const QueryRow rh{r.t, h0 + h, r.seq, r.keys};
    if (!split) {
      writeRow<NE>(p, rh, st.acc[h], st.l[h], lane);
      continue;
    }
    float* w = p.workspace + ((t * p.heads_q + h0 + h) * p.num_splits + blockIdx.y) * (p.head_size + 2);
#pragma unroll
    for (int k = 0; k < NE; ++k)
      if (lane * NE + k < p.head_size) w[lane * NE + k] = st.acc[h][k];
    if (lane == 0) {
      w[p.head_size] = st.m[h];
      w[p.head_size + 1] = st.l[h];
    }
  }
}

// One warp per (query token, query head): the chunks that hold some of the row's keys merged,
// o = sum_c acc_c * exp(m_c - M) / sum_c l_c * exp(m_c - M) with M the largest m_c; chunks
// that saw no valid key (m_c = -inf) are skipped.
template <int NE>
__global__ void __launch_bounds__(kWarps * 32) pagedCombineKernel(PagedAttentionParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= p.num_tokens * p.heads_q) return;
  const QueryRow r = queryRow(p, row / p.heads_q, row % p.heads_q);
  const int64_t stride = p.head_size + 2;
  const float* w = p.workspace + row * p.num_splits * stride;
  const int64_t chunk = PagedChunkKeys(r.keys, p.num_splits);
  const int64_t used = r.seq < 0 ? 0 : (r.keys + chunk - 1) / chunk;  // chunks past the context are empty
  float M = -INFINITY;
  for (int64_t c = 0; c < used; ++c) M = fmaxf(M, w[c * stride + p.head_size]);
  float acc[NE], l = 0.0f;
#pragma unroll
  for (int k = 0; k < NE; ++k) acc[k] = 0.0f;
  for (int64_t c = 0; c < used; ++c) {
    const float mc = w[c * stride + p.head_size];
    if (mc == -INFINITY) continue;
    const float f = expf(mc - M);
    l += w[c * stride + p.head_size + 1] * f;
#pragma unroll
    for (int k = 0; k < NE; ++k)
      if (lane * NE + k < p.head_size) acc[k] += w[c * stride + lane * NE + k] * f;
  }
  writeRow<NE>(p, r, acc, l, lane);
}

// Query heads one warp takes: the largest power of two up to 8 that divides the heads sharing
// a KV head and keeps HPW * NE <= 32 accumulators per lane.
int64_t headsPerWarp(const PagedAttentionParams& p, int64_t ne) {
  const int64_t group = p.heads_q / p.heads_kv;
  int64_t hpw = 1;
  while (hpw < 8 && group % (hpw * 2) == 0 && hpw * 2 * ne <= 32) hpw *= 2;
  return hpw;
}

bool isD16(DType t) { return t == DType::BF16 || t == DType::F16; }

unsigned gridFor(int64_t items, int64_t per_block, int64_t cap) {
  int64_t g = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(g < cap ? g : cap);
}

}  // namespace

cudaError_t LaunchReshapeAndCache(const ReshapeAndCacheParams& p, cudaStream_t stream) {
  if (!isD16(p.dtype) || (p.cache_dtype != p.dtype && p.cache_dtype != DType::F8E4M3FN)) return cudaErrorInvalidValue;
  if (p.num_tokens < 0 || p.heads_kv <= 0 || p.head_size <= 0 || p.num_blocks < 0 || p.block_size <= 0)
    return cudaErrorInvalidValue;
  if (p.cache_dtype == DType::F8E4M3FN && (!p.k_scale || !p.v_scale)) return cudaErrorInvalidValue;
  const int64_t total = p.num_tokens * p.heads_kv * p.head_size;
  if (total == 0) return cudaSuccess;
  if (!p.key || !p.value || !p.key_cache || !p.value_cache || !p.slot_mapping) return cudaErrorInvalidValue;
  reshapeAndCacheKernel<<<gridFor(total, kCacheThreads, 65536), kCacheThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchPagedAttention(const PagedAttentionParams& p, cudaStream_t stream) {
  if (!isD16(p.dtype) || (p.cache_dtype != p.dtype && p.cache_dtype != DType::F8E4M3FN)) return cudaErrorInvalidValue;
  if (p.out_dtype != p.dtype && p.out_dtype != DType::F8E4M3FN) return cudaErrorInvalidValue;
  if (p.head_size <= 0 || p.head_size > kPagedMaxHeadSize || p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0)
    return cudaErrorInvalidValue;
  if (p.num_tokens < 0 || p.num_seqs < 0 || p.max_blocks < 0 || p.num_blocks < 0 || p.block_size <= 0)
    return cudaErrorInvalidValue;
  if (p.cache_dtype == DType::F8E4M3FN && (!p.k_scale || !p.v_scale)) return cudaErrorInvalidValue;
  if (p.out_dtype == DType::F8E4M3FN && !p.out_scale) return cudaErrorInvalidValue;
  const int64_t rows = p.num_tokens * p.heads_q;
  if (rows == 0) return cudaSuccess;
  if (!p.q || !p.out || !p.query_start_loc || (p.num_seqs > 0 && (!p.key_cache || !p.value_cache || !p.block_table || !p.seq_lens)))
    return cudaErrorInvalidValue;
  if (p.num_splits < 1 || p.num_splits > kMaxSplits || p.num_splits > 65535) return cudaErrorInvalidValue;
  if (p.num_splits > 1 && !p.workspace) return cudaErrorInvalidValue;
  const int64_t ne = p.head_size <= 32 ? 1 : p.head_size <= 64 ? 2 : p.head_size <= 128 ? 4 : 8;
  const int64_t hpw = headsPerWarp(p, ne);
  const dim3 split_grid(gridFor(p.num_tokens * (p.heads_q / hpw), kWarps, (int64_t{1} << 31) - 1),
                        static_cast<unsigned>(p.num_splits));
  const unsigned combine_grid = gridFor(rows, kWarps, (int64_t{1} << 31) - 1);
  auto launch = [&](auto attend, auto combine) {
    attend<<<split_grid, kWarps * 32, 0, stream>>>(p);
    if (p.num_splits > 1) combine<<<combine_grid, kWarps * 32, 0, stream>>>(p);
  };
  auto byHeads = [&](auto ne_tag) {
    constexpr int NE = decltype(ne_tag)::value;
    if (hpw == 8) launch(pagedAttentionKernel<NE, 8>, pagedCombineKernel<NE>);
    else if (hpw == 4) launch(pagedAttentionKernel<NE, 4>, pagedCombineKernel<NE>);
    else if (hpw == 2) launch(pagedAttentionKernel<NE, 2>, pagedCombineKernel<NE>);
    else launch(pagedAttentionKernel<NE, 1>, pagedCombineKernel<NE>);
  };
  if (ne == 1) byHeads(std::integral_constant<int, 1>{});
  else if (ne == 2) byHeads(std::integral_constant<int, 2>{});
  else if (ne == 4) byHeads(std::integral_constant<int, 4>{});
  else byHeads(std::integral_constant<int, 8>{});
  return cudaGetLastError();
}

void PlanPagedAttentionSplits(PagedAttentionParams& p, int num_sms) {
  p.num_splits = 1;
  const int64_t max_keys = p.max_blocks * p.block_size;
  if (p.num_tokens <= 0 || p.heads_q <= 0 || p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0 ||
      max_keys <= kPagedMinSplitKeys)
    return;
  const int64_t ne = p.head_size <= 32 ? 1 : p.head_size <= 64 ? 2 : p.head_size <= 128 ? 4 : 8;
  const int64_t warps = p.num_tokens * (p.heads_q / headsPerWarp(p, ne));
  const int64_t target = static_cast<int64_t>(num_sms > 0 ? num_sms : 1) * kTargetWarpsPerSm;
  int64_t splits = (target + warps - 1) / warps;
  splits = std::min(splits, max_keys / kPagedMinSplitKeys);  // chunks of at least kPagedMinSplitKeys
  splits = std::min(splits, kMaxSplits);
  if (splits <= 1) return;
  p.num_splits = splits;
}

int64_t PagedAttentionWorkspaceBytes(const PagedAttentionParams& p) {
  if (p.num_splits <= 1) return 0;
  return p.num_tokens * p.heads_q * p.num_splits * (p.head_size + 2) * static_cast<int64_t>(sizeof(float));
}

}  // namespace fxfuse::runtime
