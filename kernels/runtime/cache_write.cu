// The paged KV-cache write (rt.reshape_and_cache, paged_attention.h): this step's key and value
// rows into their cache slots, optionally after vLLM's rotary embedding.
//
//   plain:   key[t], value[t]                       -> key_cache[slot[t]], value_cache[slot[t]]
//   rotary:  query[t]  -> rotate(query[t], pos[t])     (in place)
//            key[t]    -> rotate(key[t], pos[t])    -> key_cache[slot[t]]
//            value[t]                               -> value_cache[slot[t]]
//
// The rotary form replaces a decode layer's generated rotary kernel and its cache write, one
// launch instead of two (docs/attention.md "Rotary in the cache write"). Its rounding is the
// generated rotary's (compiler/lowering/codegen.cc emitRotary), so the plan's outputs do not
// change bit for bit: cos and sin rounded to the model dtype, each product rounded, then the sum.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "kernels/device/numeric.cuh"
#include "kernels/device/pdl.cuh"
#include "kernels/runtime/paged_attention.h"

namespace fxfuse::runtime {
namespace {

using kernels::device::D16;
using kernels::device::Round16;

constexpr int kCacheThreads = 256;

// A value of T (exactly representable: read from T or rounded to it) into its cache slot: the
// 16-bit value itself, or fp8_e4m3(satfinite(f32(x) / scale)) as vLLM's reshape_and_cache_flash.
template <typename T>
__device__ __forceinline__ void storeCache(void* cache, int64_t i, float x, DType cache_dtype, const float* scale) {
  if (cache_dtype == DType::F8E4M3FN)
    reinterpret_cast<__nv_fp8_storage_t*>(cache)[i] = __nv_cvt_float_to_fp8(x / *scale, __NV_SATFINITE, __NV_E4M3);
  else
    reinterpret_cast<T*>(cache)[i] = D16<T>::FromFloat(x);
}

template <typename T>
__device__ __forceinline__ float load(const void* p, int64_t i) {
  return D16<T>::ToFloat(reinterpret_cast<const T*>(p)[i]);
}

// Element si of `src` into its cache slot unchanged: its bits for a 16-bit cache, as storeCache
// for an FP8 one.
template <typename T>
__device__ __forceinline__ void copyToCache(void* cache, int64_t i, const void* src, int64_t si, DType cache_dtype,
                                            const float* scale) {
  if (cache_dtype == DType::F8E4M3FN) storeCache<T>(cache, i, load<T>(src, si), cache_dtype, scale);
  else reinterpret_cast<T*>(cache)[i] = reinterpret_cast<const T*>(src)[si];
}

// One thread per (token, head, element), grid-stride; tokens without a slot in the cache
// (-1, or outside it) are skipped.
template <typename T>
__global__ void __launch_bounds__(kCacheThreads) reshapeAndCacheKernel(ReshapeAndCacheParams p) {
  kernels::allowDependentGrids();
  kernels::waitForPrecedingGrid();
  const int64_t row = p.heads_kv * p.head_size;
  const int64_t total = p.num_tokens * row;
  const int64_t capacity = p.num_blocks * p.block_size;
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < total;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = x / row, h = (x % row) / p.head_size, e = x % p.head_size;
    const int64_t slot = p.slot_mapping[t];
    if (slot < 0 || slot >= capacity) continue;
    const int64_t dst = slot * row + h * p.head_size + e;
    copyToCache<T>(p.key_cache, dst, p.key, t * p.key_stride[0] + h * p.key_stride[1] + e, p.cache_dtype, p.k_scale);
    copyToCache<T>(p.value_cache, dst, p.value, t * p.value_stride[0] + h * p.value_stride[1] + e, p.cache_dtype,
                   p.v_scale);
  }
}

// cos and sin of rotary pair k at position `pos`, rounded to T; 1 and 0 off the table.
template <typename T>
__device__ __forceinline__ float2 cosSin(const ReshapeAndCacheParams& p, int64_t pos, int k) {
  if (pos < 0 || pos >= p.cos_sin_rows) return make_float2(1.0f, 0.0f);
  const int64_t i = pos * p.cos_sin_stride + k, half = p.rotary_dim / 2;
  float c, s;
  if (p.cos_sin_dtype == DType::F32) {
    c = reinterpret_cast<const float*>(p.cos_sin_cache)[i];
    s = reinterpret_cast<const float*>(p.cos_sin_cache)[i + half];
  } else if (p.cos_sin_dtype == DType::BF16) {
    c = load<__nv_bfloat16>(p.cos_sin_cache, i);
    s = load<__nv_bfloat16>(p.cos_sin_cache, i + half);
  } else {
    c = load<__half>(p.cos_sin_cache, i);
    s = load<__half>(p.cos_sin_cache, i + half);
  }
  return make_float2(Round16<T>(c), Round16<T>(s));
}

// The two elements of rotary pair k in a head: the halves' k-th (neox) or elements 2k, 2k + 1.
__device__ __forceinline__ int2 pairElements(const ReshapeAndCacheParams& p, int k) {
  return p.neox ? make_int2(k, k + static_cast<int>(p.rotary_dim / 2)) : make_int2(2 * k, 2 * k + 1);
}

// (x1, x2) rotated by (cos, sin): round(round(x1 c) - round(x2 s)), round(round(x2 c) + round(x1 s)).
template <typename T>
__device__ __forceinline__ float2 rotatePair(float x1, float x2, float2 cs) {
  const float a = Round16<T>(__fmul_rn(x1, cs.x)), b = Round16<T>(__fmul_rn(x2, cs.y));
  const float c = Round16<T>(__fmul_rn(x2, cs.x)), d = Round16<T>(__fmul_rn(x1, cs.y));
  return make_float2(Round16<T>(__fsub_rn(a, b)), Round16<T>(__fadd_rn(c, d)));
}

// One block row per token (grid-stride over tokens in y), threads over the token's items:
// the query's rotary pairs (rotated in place), then per key head its pairs and its unrotated
// elements, then the value elements. A pair is one thread's: it reads both before it writes.
template <typename T>
__global__ void __launch_bounds__(kCacheThreads) rotaryCacheWriteKernel(ReshapeAndCacheParams p) {
  kernels::allowDependentGrids();
  kernels::waitForPrecedingGrid();
  const int E = static_cast<int>(p.head_size), half = static_cast<int>(p.rotary_dim / 2);
  const int key_items_per_head = E - half;  // half pairs + (E - rotary_dim) unrotated elements
  const int query_items = static_cast<int>(p.heads_q) * half;
  const int key_items = static_cast<int>(p.heads_kv) * key_items_per_head;
  const int items = query_items + key_items + static_cast<int>(p.heads_kv) * E;
  const int64_t capacity = p.num_blocks * p.block_size;
  T* query = reinterpret_cast<T*>(p.query);
  for (int64_t t = blockIdx.y; t < p.num_tokens; t += gridDim.y) {
    const int64_t pos = p.positions[t];
    const int64_t slot = p.heads_kv > 0 ? p.slot_mapping[t] : -1;
    const bool cached = slot >= 0 && slot < capacity;
    const int64_t dst_row = slot * p.heads_kv * E;
    for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < items;
         i += static_cast<int>(gridDim.x * blockDim.x)) {
      if (i < query_items) {
        const int h = i / half, k = i % half;
        const int2 e = pairElements(p, k);
        const int64_t base = t * p.query_stride[0] + h * p.query_stride[1];
        const float2 r = rotatePair<T>(load<T>(query, base + e.x), load<T>(query, base + e.y), cosSin<T>(p, pos, k));
        query[base + e.x] = D16<T>::FromFloat(r.x);
        query[base + e.y] = D16<T>::FromFloat(r.y);
      } else if (!cached) {
        break;  // this thread's remaining items of the token are all cache writes
      } else if (i < query_items + key_items) {
        const int j = i - query_items, h = j / key_items_per_head, k = j % key_items_per_head;
        const int64_t src = t * p.key_stride[0] + h * p.key_stride[1], dst = dst_row + static_cast<int64_t>(h) * E;
        if (k < half) {
          const int2 e = pairElements(p, k);
          const float2 r = rotatePair<T>(load<T>(p.key, src + e.x), load<T>(p.key, src + e.y), cosSin<T>(p, pos, k));
          storeCache<T>(p.key_cache, dst + e.x, r.x, p.cache_dtype, p.k_scale);
          storeCache<T>(p.key_cache, dst + e.y, r.y, p.cache_dtype, p.k_scale);
        } else {
          const int e = static_cast<int>(p.rotary_dim) + (k - half);
          copyToCache<T>(p.key_cache, dst + e, p.key, src + e, p.cache_dtype, p.k_scale);
        }
      } else {
        const int j = i - query_items - key_items, h = j / E, e = j % E;
        copyToCache<T>(p.value_cache, dst_row + static_cast<int64_t>(h) * E + e, p.value,
                       t * p.value_stride[0] + h * p.value_stride[1] + e, p.cache_dtype, p.v_scale);
      }
    }
  }
}

unsigned gridFor(int64_t items, int64_t per_block, int64_t cap) {
  const int64_t g = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(g < cap ? g : cap);
}

bool isD16(DType t) { return t == DType::BF16 || t == DType::F16; }

template <typename T>
cudaError_t launchRotary(const ReshapeAndCacheParams& p, cudaStream_t stream) {
  const int64_t items = p.heads_q * (p.rotary_dim / 2) + p.heads_kv * (2 * p.head_size - p.rotary_dim / 2);
  const dim3 grid(gridFor(items, kCacheThreads, 1024), static_cast<unsigned>(p.num_tokens < 65535 ? p.num_tokens : 65535));
  return kernels::LaunchProgrammatic(rotaryCacheWriteKernel<T>, grid, dim3(kCacheThreads), 0, stream, p);
}

// The rotary operands: an even rotary_dim within the head, a query and a table, and item
// counts a 32-bit index holds.
bool rotaryParamsValid(const ReshapeAndCacheParams& p) {
  if (p.rotary_dim <= 0 || p.rotary_dim % 2 != 0 || p.rotary_dim > p.head_size || p.heads_q < 0) return false;
  if (p.cos_sin_dtype != DType::F32 && !isD16(p.cos_sin_dtype)) return false;
  if (p.cos_sin_rows < 0 || p.cos_sin_stride < p.rotary_dim) return false;
  if (p.heads_q > 0 && !p.query) return false;
  const int64_t items = p.heads_q * (p.rotary_dim / 2) + p.heads_kv * (2 * p.head_size - p.rotary_dim / 2);
  return items < (int64_t{1} << 30);
}

}  // namespace

cudaError_t LaunchReshapeAndCache(const ReshapeAndCacheParams& p, cudaStream_t stream) {
  const bool rotary = p.positions != nullptr;
  if (!isD16(p.dtype) || (p.cache_dtype != p.dtype && p.cache_dtype != DType::F8E4M3FN)) return cudaErrorInvalidValue;
  if (p.num_tokens < 0 || p.heads_kv < (rotary ? 0 : 1) || p.head_size <= 0 || p.num_blocks < 0 || p.block_size <= 0)
    return cudaErrorInvalidValue;
  if (rotary && !rotaryParamsValid(p)) return cudaErrorInvalidValue;
  if (p.heads_kv > 0 && p.cache_dtype == DType::F8E4M3FN && (!p.k_scale || !p.v_scale)) return cudaErrorInvalidValue;
  const int64_t total = p.num_tokens * (p.heads_kv + (rotary ? p.heads_q : 0)) * p.head_size;
  if (total == 0) return cudaSuccess;
  if (p.heads_kv > 0 && (!p.key || !p.value || !p.key_cache || !p.value_cache || !p.slot_mapping))
    return cudaErrorInvalidValue;
  if (rotary && !p.cos_sin_cache) return cudaErrorInvalidValue;
  const bool bf16 = p.dtype == DType::BF16;
  if (rotary) return bf16 ? launchRotary<__nv_bfloat16>(p, stream) : launchRotary<__half>(p, stream);
  const dim3 grid(gridFor(total, kCacheThreads, 65536));
  if (bf16) return kernels::LaunchProgrammatic(reshapeAndCacheKernel<__nv_bfloat16>, grid, dim3(kCacheThreads), 0, stream, p);
  return kernels::LaunchProgrammatic(reshapeAndCacheKernel<__half>, grid, dim3(kCacheThreads), 0, stream, p);
}

}  // namespace fxfuse::runtime
