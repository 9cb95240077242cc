// The paged KV-cache kernels (paged_attention.h): the cache write of this step's keys and
// values, then attention over each sequence's cached context. Numerics in
// docs/attention.md "Paged attention".
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

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

// One warp per (query token, query head): lane l holds elements l, l + 32, ... of the query
// and of the running output; keys 0..position of the token's sequence, in order, each read
// through the block table; online softmax in fp32.
template <int NE>
__global__ void __launch_bounds__(kWarps * 32) pagedAttentionKernel(PagedAttentionParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (warp >= p.num_tokens * p.heads_q) return;
  const int64_t t = warp / p.heads_q, h = warp % p.heads_q;
  const int64_t obase = t * p.o_stride[0] + h * p.o_stride[1];
  float inv_out_scale = 1.0f;
  if (p.out_dtype == DType::F8E4M3FN) inv_out_scale = 1.0f / *p.out_scale;
  const int64_t b = sequenceOf(p.query_start_loc, p.num_seqs, t);
  if (b < 0) {  // padding token: a zero row
#pragma unroll
    for (int k = 0; k < NE; ++k)
      if (lane + 32 * k < p.head_size) storeOut(p, obase + lane + 32 * k, 0.0f, inv_out_scale);
    return;
  }
  const int64_t ql = p.query_start_loc[b + 1] - p.query_start_loc[b];
  int64_t ctx = p.seq_lens[b];
  if (ctx > p.max_blocks * p.block_size) ctx = p.max_blocks * p.block_size;
  const int64_t pos = ctx - ql + (t - p.query_start_loc[b]);  // keys 0..pos
  const int64_t hk = h / (p.heads_q / p.heads_kv);
  const float ks = p.cache_dtype == DType::F8E4M3FN ? *p.k_scale : 1.0f;
  const float vs = p.cache_dtype == DType::F8E4M3FN ? *p.v_scale : 1.0f;
  const int32_t* blocks = p.block_table + b * p.block_table_stride;
  float q[NE], acc[NE];
#pragma unroll
  for (int k = 0; k < NE; ++k) {
    const int64_t e = lane + 32 * k;
    q[k] = e < p.head_size ? load16(p.q, t * p.q_stride[0] + h * p.q_stride[1] + e, p.dtype) : 0.0f;
    acc[k] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = 0; j <= pos && j < ctx; ++j) {
    const int64_t block = blocks[j / p.block_size];
    if (block < 0 || block >= p.num_blocks) continue;  // bad metadata: never read outside the cache
    const int64_t base = ((block * p.block_size + j % p.block_size) * p.heads_kv + hk) * p.head_size;
    float part = 0.0f;
#pragma unroll
    for (int k = 0; k < NE; ++k) {
      const int64_t e = lane + 32 * k;
      if (e < p.head_size) part += q[k] * loadCache(p.key_cache, base + e, p.cache_dtype, ks);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
    const float s = part * p.scale;
    const float mn = fmaxf(m, s);
    const float corr = expf(m - mn);  // m = -inf the first time: exp(-inf) = 0
    const float pj = expf(s - mn);
    l = l * corr + pj;
#pragma unroll
    for (int k = 0; k < NE; ++k) {
      const int64_t e = lane + 32 * k;
      const float v = e < p.head_size ? loadCache(p.value_cache, base + e, p.cache_dtype, vs) : 0.0f;
      acc[k] = acc[k] * corr + pj * v;
    }
    m = mn;
  }
  const float inv = l > 0.0f ? 1.0f / l : __int_as_float(0x7fc00000);  // no key: NaN (bad metadata)
#pragma unroll
  for (int k = 0; k < NE; ++k) {
    const int64_t e = lane + 32 * k;
    if (e < p.head_size) storeOut(p, obase + e, acc[k] * inv, inv_out_scale);
  }
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
  const unsigned grid = gridFor(rows, kWarps, (int64_t{1} << 31) - 1);
  const int64_t ne = (p.head_size + 31) / 32;
  if (ne <= 1) pagedAttentionKernel<1><<<grid, kWarps * 32, 0, stream>>>(p);
  else if (ne <= 2) pagedAttentionKernel<2><<<grid, kWarps * 32, 0, stream>>>(p);
  else if (ne <= 4) pagedAttentionKernel<4><<<grid, kWarps * 32, 0, stream>>>(p);
  else pagedAttentionKernel<8><<<grid, kWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace fxfuse::runtime
