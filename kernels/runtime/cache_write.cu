// The paged KV-cache write (rt.reshape_and_cache, paged_attention.h): this step's key and value
// rows into their cache slots, optionally after vLLM's rotary embedding.
//
//   plain:   key[t], value[t]                       -> key_cache[slot[t]], value_cache[slot[t]]
//   rotary:  query[t]  -> rotate(query[t], pos[t])     (in place, or into query_out)
//            key[t]    -> rotate(key[t], pos[t])    -> key_cache[slot[t]]
//            value[t]                               -> value_cache[slot[t]]
//   rotary only (no cache): query[t] -> rotate(query[t], pos[t]) -> query_out[t] (a dense plan)
//
// The rotary form replaces a decode layer's generated rotary kernel and its cache write, one
// launch instead of two (docs/attention.md "Rotary in the cache write"); the rotary-only form
// replaces a dense plan's generated rotary, which moves one element per thread and so stays far
// below the copy rate (docs/decoder_layer.md). Its rounding is the
// generated rotary's (compiler/lowering/codegen.cc emitRotary), so the plan's outputs do not
// change bit for bit: cos and sin rounded to the model dtype, each product rounded, then the sum.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/device/numeric.cuh"
#include "kernels/device/pdl.cuh"
#include "kernels/runtime/kv_cache_store.cuh"
#include "kernels/runtime/paged_attention.h"
#include "kernels/runtime/rotary.cuh"

namespace fxfuse::runtime {
namespace {

using kernels::device::D16;

constexpr int kCacheThreads = 256;

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

// The shared rotary helpers (rotary.cuh) on this step's table and pairing.
template <typename T>
__device__ __forceinline__ float2 cosSin(const ReshapeAndCacheParams& p, int64_t pos, int k) {
  return rotary::cosSin<T>(p.cos_sin_cache, p.cos_sin_dtype, p.cos_sin_rows, p.cos_sin_stride, p.rotary_dim, pos, k);
}

__device__ __forceinline__ int2 pairElements(const ReshapeAndCacheParams& p, int k) {
  return rotary::pairElements(p.neox, p.rotary_dim, k);
}

using rotary::rotatePair;

// Query items per head of the rotary kernel with `width` pairs per item: the pair groups, then
// (out of place) the unrotated elements' groups of `width`.
__host__ __device__ __forceinline__ int queryItemsPerHead(const ReshapeAndCacheParams& p, int width) {
  const int E = static_cast<int>(p.head_size), rot = static_cast<int>(p.rotary_dim);
  return rot / 2 / width + (p.query_out ? (E - rot) / width : 0);
}

// Query item j of head h of token t, one pair wide: pair j rotated, or (out of place) the
// unrotated element rotary_dim + j - half copied.
template <typename T>
__device__ __forceinline__ void rotateQueryItem1(const ReshapeAndCacheParams& p, int64_t t, int64_t pos, int h, int j) {
  const int half = static_cast<int>(p.rotary_dim / 2);
  const T* in = reinterpret_cast<const T*>(p.query);
  T* out = reinterpret_cast<T*>(p.query_out ? p.query_out : p.query);
  const int64_t src = t * p.query_stride[0] + h * p.query_stride[1];
  const int64_t dst = p.query_out ? t * p.query_out_stride[0] + h * p.query_out_stride[1] : src;
  if (j >= half) {
    const int e = static_cast<int>(p.rotary_dim) + (j - half);
    out[dst + e] = in[src + e];
    return;
  }
  const int2 e = pairElements(p, j);
  const float2 r = rotatePair<T>(load<T>(in, src + e.x), load<T>(in, src + e.y), cosSin<T>(p, pos, j));
  out[dst + e.x] = D16<T>::FromFloat(r.x);
  out[dst + e.y] = D16<T>::FromFloat(r.y);
}

// Query item j of head h of token t, eight pairs wide (RotaryQueryWidth's conditions hold):
// neox pairs 8j .. 8j + 7 from 16-byte loads of both halves, cos and sin, or (out of place) the
// unrotated elements' group j - half / 8 copied as one 16-byte word.
template <typename T>
__device__ __forceinline__ void rotateQueryItem8(const ReshapeAndCacheParams& p, int64_t t, int64_t pos, int h, int j) {
  using kernels::device::Pack8;
  using kernels::device::Unpack8;
  const int half = static_cast<int>(p.rotary_dim / 2), groups = half / 8;
  const T* in = reinterpret_cast<const T*>(p.query);
  T* out = reinterpret_cast<T*>(p.query_out ? p.query_out : p.query);
  const int64_t src = t * p.query_stride[0] + h * p.query_stride[1];
  const int64_t dst = p.query_out ? t * p.query_out_stride[0] + h * p.query_out_stride[1] : src;
  auto word = [](const T* base, int64_t i) { return *reinterpret_cast<const uint4*>(base + i); };
  auto put = [](T* base, int64_t i, uint4 v) { *reinterpret_cast<uint4*>(base + i) = v; };
  if (j >= groups) {
    const int64_t e = p.rotary_dim + 8 * static_cast<int64_t>(j - groups);
    put(out, dst + e, word(in, src + e));
    return;
  }
  const int k = 8 * j;
  float x1[8], x2[8], c[8], sn[8];
  Unpack8<T>(word(in, src + k), x1);
  Unpack8<T>(word(in, src + half + k), x2);
  if (pos >= 0 && pos < p.cos_sin_rows) {
    const T* table = reinterpret_cast<const T*>(p.cos_sin_cache) + pos * p.cos_sin_stride;
    Unpack8<T>(word(table, k), c);
    Unpack8<T>(word(table, half + k), sn);
  } else {
    for (int q = 0; q < 8; ++q) c[q] = 1.0f, sn[q] = 0.0f;  // off the table: cosSin's (1, 0)
  }
  float o1[8], o2[8];
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const float2 r = rotatePair<T>(x1[q], x2[q], make_float2(c[q], sn[q]));
    o1[q] = r.x;
    o2[q] = r.y;
  }
  put(out, dst + k, Pack8<T>(o1));
  put(out, dst + half + k, Pack8<T>(o2));
}

// One block row per token (grid-stride over tokens in y), threads over the token's items:
// the query's items (rotated in place or into query_out, kQueryWidth pairs each), then per key
// head its pairs and its unrotated elements, then the value elements. A pair is one thread's:
// it reads both before it writes.
template <typename T, int kQueryWidth>
__global__ void __launch_bounds__(kCacheThreads) rotaryCacheWriteKernel(ReshapeAndCacheParams p) {
  kernels::allowDependentGrids();
  // Where no step writes them, the block's first token's position and slot are read, and its
  // table row asked of L2, while the preceding kernel drains: after the wait the kernel's chain
  // is then the q/k/v loads alone, not position -> table row -> store.
  const int64_t first = blockIdx.y;
  const bool early = p.metadata_read_only && first < p.num_tokens;
  int64_t first_pos = 0, first_slot = -1;
  if (early) {
    first_pos = p.positions[first];
    first_slot = p.heads_kv > 0 ? p.slot_mapping[first] : -1;
    if (threadIdx.x == 0)
      rotary::prefetchTableRow(p.cos_sin_cache, p.cos_sin_dtype, p.cos_sin_rows, p.cos_sin_stride, p.rotary_dim,
                               first_pos);
  }
  kernels::waitForPrecedingGrid();
  const int E = static_cast<int>(p.head_size), half = static_cast<int>(p.rotary_dim / 2);
  const int key_items_per_head = E - half;  // half pairs + (E - rotary_dim) unrotated elements
  const int query_per_head = queryItemsPerHead(p, kQueryWidth);
  const int query_items = static_cast<int>(p.heads_q) * query_per_head;
  const int key_items = static_cast<int>(p.heads_kv) * key_items_per_head;
  const int items = query_items + key_items + static_cast<int>(p.heads_kv) * E;
  const int64_t capacity = p.num_blocks * p.block_size;
  for (int64_t t = blockIdx.y; t < p.num_tokens; t += gridDim.y) {
    const int64_t pos = early && t == first ? first_pos : p.positions[t];
    const int64_t slot = early && t == first ? first_slot : p.heads_kv > 0 ? p.slot_mapping[t] : -1;
    const bool cached = slot >= 0 && slot < capacity;
    const int64_t dst_row = slot * p.heads_kv * E;
    for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < items;
         i += static_cast<int>(gridDim.x * blockDim.x)) {
      if (i < query_items) {
        if (kQueryWidth == 8) rotateQueryItem8<T>(p, t, pos, i / query_per_head, i % query_per_head);
        else rotateQueryItem1<T>(p, t, pos, i / query_per_head, i % query_per_head);
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

// A token's items in the rotary kernel (its grid's x extent).
int64_t rotaryItemsPerToken(const ReshapeAndCacheParams& p, int query_width) {
  return p.heads_q * queryItemsPerHead(p, query_width) + p.heads_kv * (2 * p.head_size - p.rotary_dim / 2);
}

// One block row per token, as many threads as its items (a warp at least, 256 at most).
template <typename T>
cudaError_t launchRotary(const ReshapeAndCacheParams& p, cudaStream_t stream) {
  const int width = RotaryQueryWidth(p);
  const int64_t items = rotaryItemsPerToken(p, width);
  const int64_t threads = std::min<int64_t>(kCacheThreads, (items + 31) / 32 * 32);
  const dim3 grid(gridFor(items, threads, 1024), static_cast<unsigned>(p.num_tokens < 65535 ? p.num_tokens : 65535));
  const dim3 block(static_cast<unsigned>(threads));
  if (width == 8) return kernels::LaunchProgrammatic(rotaryCacheWriteKernel<T, 8>, grid, block, 0, stream, p);
  return kernels::LaunchProgrammatic(rotaryCacheWriteKernel<T, 1>, grid, block, 0, stream, p);
}

// The rotary operands: an even rotary_dim within the head, a query and a table, and item
// counts a 32-bit index holds.
bool rotaryParamsValid(const ReshapeAndCacheParams& p) {
  if (p.rotary_dim <= 0 || p.rotary_dim % 2 != 0 || p.rotary_dim > p.head_size || p.heads_q < 0) return false;
  if (p.cos_sin_dtype != DType::F32 && !isD16(p.cos_sin_dtype)) return false;
  if (p.cos_sin_rows < 0 || p.cos_sin_stride < p.rotary_dim) return false;
  if (p.heads_q > 0 && !p.query) return false;
  return rotaryItemsPerToken(p, 1) < (int64_t{1} << 30);
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

int RotaryQueryWidth(const ReshapeAndCacheParams& p) {
  const int64_t half = p.rotary_dim / 2;
  if (!p.neox || half % 8 != 0 || p.cos_sin_dtype != p.dtype || p.cos_sin_stride % 8 != 0) return 1;
  if (!aligned16(p.query) || !aligned16(p.cos_sin_cache) || p.query_stride[0] % 8 != 0 || p.query_stride[1] % 8 != 0)
    return 1;
  if (p.query_out && (!aligned16(p.query_out) || p.query_out_stride[0] % 8 != 0 || p.query_out_stride[1] % 8 != 0 ||
                      (p.head_size - p.rotary_dim) % 8 != 0))
    return 1;
  return 8;
}

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
