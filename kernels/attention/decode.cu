// Split-KV decode attention: a few query tokens per sequence against a long KV cache
// (contiguous or paged through a block table). Memory-bound: each CTA streams one KV head's
// share of the context (a "split") through a two-stage cp.async ring of 64-key tiles and
// serves all query heads of that KV head (GQA) and all query tokens from it, so K and V are
// read once. Per tile: scores on CUDA cores (fp32), online softmax per row, P·V. With one split
// the CTA writes the final output; with several it writes (O/l, m, l) per split and row, and a
// combine kernel merges them. Output bf16/fp16 or FP8 e4m3 with a static scale (no D16 rounding).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/attention/device/sm90.cuh"
#include "kernels/device/cp_async.cuh"

namespace fxfuse::attention {
namespace {

using device::Elem;

constexpr int kThreads = 128;
constexpr int kTileKeys = 64;
constexpr int kStages = 2;

struct DecodeArgs {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* part_o;   // [splits][rows_total][E]
  float* part_ml;  // [splits][rows_total][2]
  const int* block_table;
  const int* context_lens;
  const float* out_scale;
  int64_t q_stride[3], o_stride[3], k_stride[3], v_stride[3];
  int64_t block_table_stride;
  int block_size;  // 0: contiguous
  int heads_q, heads_kv, group, nq, rows;  // rows = group * nq
  int max_ctx, chunk;                      // keys per split (multiple of kTileKeys)
  float scale_log2;
  bool causal, fp8;
};

template <int E, int kRows>
struct DecodeLayout {
  static constexpr int kRowBytes = E * 2 + 16;  // padded K/V rows: conflict-free 16-byte reads
  static constexpr int kTileBytes = kTileKeys * kRowBytes;
  static constexpr int kColThreads = E / 2;      // each thread owns a column pair in P·V
  static constexpr int kRowStep = kThreads / kColThreads;
  static constexpr int kRowsPerThread = kRows / kRowStep > 0 ? kRows / kRowStep : 1;
  static constexpr int kChunks = E / 8;  // 16-byte chunks per K/V row
  // dynamic: q [rows][E] f32 | scores [rows][64] f32 | m, l, corr [rows] | K, V stages
  static constexpr int kBytes = kRows * E * 4 + kRows * kTileKeys * 4 + 3 * kRows * 4 + 2 * kStages * kTileBytes + 16;
};

using kernels::cpAsync16;
using kernels::cpAsyncCommit;
using kernels::cpAsyncWait;

// kRows: rows (query heads of the group x query tokens) padded to 4, 16 or 64; padded rows have
// q = 0 and are not stored. P V: with 4 rows each thread owns 8 columns of all rows for a subset
// of the tile's keys (16-byte V reads, partial sums reduced across key groups at the end); with
// more rows each thread owns a column pair of some rows for all keys.
template <int E, typename T, int kRows>
__global__ void __launch_bounds__(kThreads) decodeKernel(const DecodeArgs a) {
  using L = DecodeLayout<E, kRows>;
  constexpr bool kKeySplitPV = kRows == 4;
  constexpr int kColGroups = E / 8, kKeyGroups = kThreads / kColGroups;  // key-split P V
  extern __shared__ __align__(16) uint8_t smem[];
  const int split = blockIdx.x, hk = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
  const int rows = a.rows;
  float* s_q = reinterpret_cast<float*>(smem);  // [kRows][E]
  float* s_p = s_q + kRows * E;                 // [kRows][kTileKeys]
  float* s_m = s_p + kRows * kTileKeys;
  float* s_l = s_m + kRows;
  float* s_corr = s_l + kRows;
  const uint32_t kv_base = (device::smemAddr(s_corr + kRows) + 15u) & ~15u;
  uint8_t* const kv_ptr = smem + (kv_base - device::smemAddr(smem));

  const int ctx = a.context_lens ? a.context_lens[b] : a.max_ctx;
  const int k_begin = split * a.chunk;
  const int k_end = min(ctx, k_begin + a.chunk);
  const int n_tiles = k_end > k_begin ? (k_end - k_begin + kTileKeys - 1) / kTileKeys : 0;

  // Row r: query head hk * group + r % group, query token r / group.
  for (int i = tid; i < kRows * E; i += kThreads) {
    const int r = i / E, e = i % E;
    const int hq = hk * a.group + r % a.group, t = r / a.group;
    const T* q = static_cast<const T*>(a.q);
    s_q[i] = r < rows ? static_cast<float>(q[b * a.q_stride[0] + hq * a.q_stride[1] + t * a.q_stride[2] + e]) : 0.0f;
  }
  for (int r = tid; r < kRows; r += kThreads) {
    s_m[r] = -INFINITY;
    s_l[r] = 0.0f;
  }

  // Loads: this thread always copies 16-byte chunk `load_chunk` of keys load_key0 + kLoadStep k.
  constexpr int kLoadStep = kThreads / L::kChunks;
  const int load_chunk = tid % L::kChunks, load_key0 = tid / L::kChunks;
  const T* const kbase = static_cast<const T*>(a.k) + hk * a.k_stride[2] + load_chunk * 8;
  const T* const vbase = static_cast<const T*>(a.v) + hk * a.v_stride[2] + load_chunk * 8;
  auto loadTile = [&](int j) {
    if (j < n_tiles) {
      const int stage = j % kStages;
      const uint32_t ks = kv_base + stage * 2 * L::kTileBytes, vs = ks + L::kTileBytes;
#pragma unroll
      for (int k = 0; k < kTileKeys / kLoadStep; ++k) {
        const int key = load_key0 + kLoadStep * k;
        const int tok = k_begin + j * kTileKeys + key;
        const bool valid = tok < k_end;
        const int safe = valid ? tok : k_begin;
        int64_t ko, vo;
        if (a.block_size > 0) {
          const int64_t blk = a.block_table[b * a.block_table_stride + safe / a.block_size];
          const int64_t in_blk = safe % a.block_size;
          ko = blk * a.k_stride[0] + in_blk * a.k_stride[1];
          vo = blk * a.v_stride[0] + in_blk * a.v_stride[1];
        } else {
          ko = b * a.k_stride[0] + static_cast<int64_t>(safe) * a.k_stride[1];
          vo = b * a.v_stride[0] + static_cast<int64_t>(safe) * a.v_stride[1];
        }
        cpAsync16(ks + key * L::kRowBytes + load_chunk * 16, kbase + ko, valid);
        cpAsync16(vs + key * L::kRowBytes + load_chunk * 16, vbase + vo, valid);
      }
    }
    cpAsyncCommit();  // empty groups keep the wait counts uniform
  };

#pragma unroll
  for (int j = 0; j < kStages - 1; ++j) loadTile(j);

  // P V accumulators: key-split (kRows x 8 columns) or column pairs of kRowsPerThread rows.
  constexpr int kAccRows = kKeySplitPV ? kRows : L::kRowsPerThread;
  constexpr int kAccCols = kKeySplitPV ? 8 : 2;
  float acc[kAccRows][kAccCols];
#pragma unroll
  for (int i = 0; i < kAccRows; ++i)
#pragma unroll
    for (int c = 0; c < kAccCols; ++c) acc[i][c] = 0.0f;
  const int col_pair = tid % L::kColThreads, row_start = tid / L::kColThreads;
  const int col_group = tid % kColGroups, key_group = tid / kColGroups;
  const int key_lane = tid % kTileKeys, row_half = tid / kTileKeys;
  const int warp = tid / 32, lane = tid % 32;

  for (int j = 0; j < n_tiles; ++j) {
    loadTile(j + kStages - 1);
    cpAsyncWait<kStages - 1>();
    __syncthreads();
    const int stage = j % kStages;
    const uint8_t* ks = kv_ptr + stage * 2 * L::kTileBytes;
    const uint8_t* vs = ks + L::kTileBytes;

    // Scores: thread (key_lane, row_half) computes rows row_half, row_half + 2, ...
    {
      float sc[kRows / 2];
#pragma unroll
      for (int i = 0; i < kRows / 2; ++i) sc[i] = 0.0f;
      const uint4* krow = reinterpret_cast<const uint4*>(ks + key_lane * L::kRowBytes);
#pragma unroll 4
      for (int c = 0; c < L::kChunks; ++c) {
        float kf[8];
        device::unpack8<T>(krow[c], kf);
#pragma unroll
        for (int i = 0; i < kRows / 2; ++i) {
          const float4* qv = reinterpret_cast<const float4*>(s_q + (row_half + 2 * i) * E + c * 8);
          const float4 q0 = qv[0], q1 = qv[1];
          sc[i] += q0.x * kf[0] + q0.y * kf[1] + q0.z * kf[2] + q0.w * kf[3] + q1.x * kf[4] + q1.y * kf[5] +
                   q1.z * kf[6] + q1.w * kf[7];
        }
      }
      const int key = k_begin + j * kTileKeys + key_lane;
#pragma unroll
      for (int i = 0; i < kRows / 2; ++i) {
        const int r = row_half + 2 * i;
        const int t = r / a.group;
        const bool visible = key < k_end && (!a.causal || key <= ctx - a.nq + t);
        s_p[r * kTileKeys + key_lane] = visible ? sc[i] * a.scale_log2 : -INFINITY;
      }
    }
    __syncthreads();

    // Online softmax: warp w owns rows w, w + 4, ...
    for (int r = warp; r < kRows; r += kThreads / 32) {
      const float x0 = s_p[r * kTileKeys + lane], x1 = s_p[r * kTileKeys + lane + 32];
      float mx = fmaxf(x0, x1);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = s_m[r];
      const float m_new = fmaxf(m_old, mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float p0 = exp2f(x0 - m_use), p1 = exp2f(x1 - m_use);
      s_p[r * kTileKeys + lane] = p0;
      s_p[r * kTileKeys + lane + 32] = p1;
      float sum = p0 + p1;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      __syncwarp();
      if (lane == 0) {
        const float corr = exp2f(m_old - m_use);
        s_corr[r] = corr;
        s_l[r] = s_l[r] * corr + sum;
        s_m[r] = m_new;
      }
    }
    __syncthreads();

    if constexpr (kKeySplitPV) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float c = s_corr[r];
#pragma unroll
        for (int q = 0; q < 8; ++q) acc[r][q] *= c;
      }
#pragma unroll
      for (int k = 0; k < kTileKeys / kKeyGroups; ++k) {
        const int key = key_group + kKeyGroups * k;
        float vf[8];
        device::unpack8<T>(*reinterpret_cast<const uint4*>(vs + key * L::kRowBytes + col_group * 16), vf);
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const float p = s_p[r * kTileKeys + key];
#pragma unroll
          for (int q = 0; q < 8; ++q) acc[r][q] = fmaf(p, vf[q], acc[r][q]);
        }
      }
    } else {
      // thread owns columns 2 col_pair, 2 col_pair + 1 of rows row_start + kRowStep i
#pragma unroll
      for (int i = 0; i < L::kRowsPerThread; ++i) {
        const int r = row_start + L::kRowStep * i;
        if (r < kRows) {
          const float c = s_corr[r];
          acc[i][0] *= c;
          acc[i][1] *= c;
        }
      }
#pragma unroll 4
      for (int key = 0; key < kTileKeys; ++key) {
        const float2 v = Elem<T>::unpack(*reinterpret_cast<const uint32_t*>(vs + key * L::kRowBytes + col_pair * 4));
#pragma unroll
        for (int i = 0; i < L::kRowsPerThread; ++i) {
          const int r = row_start + L::kRowStep * i;
          if (r < kRows) {  // compile-time true except for 4 rows of a 64-wide head
            const float p = s_p[r * kTileKeys + key];
            acc[i][0] = fmaf(p, v.x, acc[i][0]);
            acc[i][1] = fmaf(p, v.y, acc[i][1]);
          }
        }
      }
    }
    __syncthreads();
  }
  cpAsyncWait<0>();

  // Output values of (row, column pair) items: item i of this thread is row out_row(i),
  // columns 2 out_pair(i) and + 1.
  constexpr int kOutItems = kKeySplitPV ? (kRows * E / 2 + kThreads - 1) / kThreads : L::kRowsPerThread;
  float outv[kOutItems][2];
  int out_row[kOutItems], out_pair[kOutItems];
  if constexpr (kKeySplitPV) {
    // Reduce the key groups' partial sums through shared memory (the K/V stages are free now).
    __syncthreads();
    float* red = reinterpret_cast<float*>(kv_ptr);  // [kKeyGroups][kRows][E]
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int q = 0; q < 8; q += 4)
        *reinterpret_cast<float4*>(red + (key_group * kRows + r) * E + col_group * 8 + q) =
            make_float4(acc[r][q], acc[r][q + 1], acc[r][q + 2], acc[r][q + 3]);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kOutItems; ++i) {
      const int item = tid + kThreads * i;
      out_row[i] = item / (E / 2);
      out_pair[i] = item % (E / 2);
      float x = 0.0f, y = 0.0f;
      if (out_row[i] < kRows) {
        for (int g = 0; g < kKeyGroups; ++g) {
          const float2 v = *reinterpret_cast<const float2*>(red + (g * kRows + out_row[i]) * E + 2 * out_pair[i]);
          x += v.x;
          y += v.y;
        }
      }
      outv[i][0] = x;
      outv[i][1] = y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kOutItems; ++i) {
      out_row[i] = row_start + L::kRowStep * i;
      out_pair[i] = col_pair;
      outv[i][0] = acc[i][0];
      outv[i][1] = acc[i][1];
    }
  }

  const bool final_out = gridDim.x == 1;
  const bool fp8 = a.fp8;
  const float inv_scale = fp8 && final_out ? 1.0f / *a.out_scale : 1.0f;
#pragma unroll
  for (int i = 0; i < kOutItems; ++i) {
    const int r = out_row[i];
    if (r >= rows) continue;
    const int hq = hk * a.group + r % a.group, t = r / a.group;
    const float l = s_l[r];
    const float inv = l > 0.0f ? 1.0f / l : (final_out ? __int_as_float(0x7fc00000) : 0.0f);
    const float x = outv[i][0] * inv, y = outv[i][1] * inv;
    if (final_out) {
      const int64_t oi = b * a.o_stride[0] + hq * a.o_stride[1] + t * a.o_stride[2] + 2 * out_pair[i];
      if (fp8)
        device::storePair<T, true>(a.out, oi, x, y, inv_scale);
      else
        device::storePair<T, false>(a.out, oi, x, y, 1.0f);
    } else {
      const int64_t row_id = (static_cast<int64_t>(b) * a.heads_q + hq) * a.nq + t;
      const int64_t rows_total = static_cast<int64_t>(gridDim.z) * a.heads_q * a.nq;
      *reinterpret_cast<float2*>(a.part_o + (split * rows_total + row_id) * E + 2 * out_pair[i]) = make_float2(x, y);
      if (out_pair[i] == 0) {
        a.part_ml[(split * rows_total + row_id) * 2] = s_m[r];
        a.part_ml[(split * rows_total + row_id) * 2 + 1] = l;
      }
    }
  }
}

// Combine: one warp per (batch, query head, token); out = Σ_s w_s O_s / Σ_s w_s with
// w_s = l_s 2^(m_s - max m).
template <int E, typename T>
__global__ void __launch_bounds__(128) combineKernel(const DecodeArgs a, int splits, int batch) {
  const int64_t rows_total = static_cast<int64_t>(batch) * a.heads_q * a.nq;
  const int64_t row_id = static_cast<int64_t>(blockIdx.x) * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row_id >= rows_total) return;
  float mx = -INFINITY;
  for (int s = 0; s < splits; ++s) mx = fmaxf(mx, a.part_ml[(s * rows_total + row_id) * 2]);
  const float m_use = mx == -INFINITY ? 0.0f : mx;
  float acc[E / 32];
#pragma unroll
  for (int c = 0; c < E / 32; ++c) acc[c] = 0.0f;
  float total = 0.0f;
  for (int s = 0; s < splits; ++s) {
    const float m = a.part_ml[(s * rows_total + row_id) * 2], l = a.part_ml[(s * rows_total + row_id) * 2 + 1];
    if (l <= 0.0f) continue;
    const float w = l * exp2f(m - m_use);
    total += w;
    const float* po = a.part_o + (s * rows_total + row_id) * E;
#pragma unroll
    for (int c = 0; c < E / 64; ++c) {
      const float2 v = *reinterpret_cast<const float2*>(po + 64 * c + 2 * lane);
      acc[2 * c] = fmaf(w, v.x, acc[2 * c]);
      acc[2 * c + 1] = fmaf(w, v.y, acc[2 * c + 1]);
    }
  }
  const float inv = total > 0.0f ? 1.0f / total : __int_as_float(0x7fc00000);
  const float inv_scale = a.fp8 ? 1.0f / *a.out_scale : 1.0f;
  const int t = static_cast<int>(row_id % a.nq);
  const int hq = static_cast<int>((row_id / a.nq) % a.heads_q);
  const int64_t b = row_id / (static_cast<int64_t>(a.nq) * a.heads_q);
  const int64_t ob = b * a.o_stride[0] + hq * a.o_stride[1] + t * a.o_stride[2];
#pragma unroll
  for (int c = 0; c < E / 64; ++c) {
    if (a.fp8)
      device::storePair<T, true>(a.out, ob + 64 * c + 2 * lane, acc[2 * c] * inv, acc[2 * c + 1] * inv, inv_scale);
    else
      device::storePair<T, false>(a.out, ob + 64 * c + 2 * lane, acc[2 * c] * inv, acc[2 * c + 1] * inv, 1.0f);
  }
}

int numSms() {
  static int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 132;
    return v;
  }();
  return n;
}

template <int E, typename T, int kRows>
cudaError_t launchRows(const DecodeArgs& a, int splits, int batch, int heads_kv, int64_t rows_total, cudaStream_t stream) {
  using L = DecodeLayout<E, kRows>;
  auto kernel = decodeKernel<E, T, kRows>;
  const cudaError_t attr = device::ensureSmemLimit<decodeKernel<E, T, kRows>>(L::kBytes);
  if (attr != cudaSuccess) return attr;
  kernel<<<dim3(static_cast<unsigned>(splits), static_cast<unsigned>(heads_kv), static_cast<unsigned>(batch)), kThreads,
           L::kBytes, stream>>>(a);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || splits == 1) return e;
  combineKernel<E, T><<<static_cast<unsigned>((rows_total + 3) / 4), 128, 0, stream>>>(a, splits, batch);
  return cudaGetLastError();
}

template <int E, typename T>
cudaError_t launchTyped(const DecodeParams& p, cudaStream_t stream) {
  const int splits = DecodeSplits(p, numSms());
  if (splits > 1 && !p.workspace) return cudaErrorInvalidValue;
  DecodeArgs a;
  a.q = p.q;
  a.k = p.k_cache;
  a.v = p.v_cache;
  a.out = p.out;
  a.part_o = static_cast<float*>(p.workspace);
  const int64_t rows_total = static_cast<int64_t>(p.batch) * p.heads_q * p.num_query_tokens;
  a.part_ml = a.part_o ? a.part_o + splits * rows_total * E : nullptr;
  a.block_table = p.block_table;
  a.context_lens = p.context_lens;
  a.out_scale = p.out_scale;
  for (int d = 0; d < 3; ++d) {
    a.q_stride[d] = p.q_stride[d];
    a.o_stride[d] = p.o_stride[d];
    a.k_stride[d] = p.k_stride[d];
    a.v_stride[d] = p.v_stride[d];
  }
  a.block_table_stride = p.block_table_stride;
  a.block_size = p.block_table ? p.block_size : 0;
  a.heads_q = p.heads_q;
  a.heads_kv = p.heads_kv;
  a.group = p.heads_q / p.heads_kv;
  a.nq = p.num_query_tokens;
  a.rows = a.group * a.nq;
  a.max_ctx = static_cast<int>(p.max_context_len);
  const int64_t per_split = (p.max_context_len + splits - 1) / splits;
  a.chunk = static_cast<int>((per_split + kTileKeys - 1) / kTileKeys * kTileKeys);
  a.scale_log2 = static_cast<float>(p.softmax_scale * 1.4426950408889634);
  a.causal = p.causal;
  a.fp8 = p.out_dtype == DType::F8E4M3FN;
  if (a.rows <= 4) return launchRows<E, T, 4>(a, splits, p.batch, p.heads_kv, rows_total, stream);
  if (a.rows <= 16) return launchRows<E, T, 16>(a, splits, p.batch, p.heads_kv, rows_total, stream);
  return launchRows<E, T, 64>(a, splits, p.batch, p.heads_kv, rows_total, stream);
}

template <int E>
cudaError_t launchE(const DecodeParams& p, cudaStream_t stream) {
  return p.dtype == DType::BF16 ? launchTyped<E, __nv_bfloat16>(p, stream) : launchTyped<E, __half>(p, stream);
}

}  // namespace

cudaError_t LaunchDecode(const DecodeParams& p, cudaStream_t stream) {
  if (!CheckDecode(p).empty()) return cudaErrorInvalidValue;
  return p.head_size == 64 ? launchE<64>(p, stream) : launchE<128>(p, stream);
}

}  // namespace fxfuse::attention
