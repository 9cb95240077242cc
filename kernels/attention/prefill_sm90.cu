// Prefill attention for Hopper (sm_90a): one CTA computes 128 query rows of one head.
//
//   warpgroup 0 (producer, 24 registers): one thread issues TMA loads of the Q tile once and of
//       K/V tiles (128 keys) into a two-stage shared-memory ring, each stage guarded by
//       full (TMA bytes landed) and empty (both consumers done with K, or with V) mbarriers;
//   warpgroups 1, 2 (consumers, 240 registers): 64 query rows each;
//       S = Q K^T      wgmma m64n128k16, A and B from shared memory (K-major, 128 B swizzle)
//       online softmax in fp32 registers (row max/sum over the quad of lanes sharing a row)
//       O += P V       wgmma m64nEk16, P from registers (bf16/fp16), V N-major from shared memory
//     S of tile j and P V of tile j-1 are issued together; the softmax of tile j runs while the
//     tensor cores do P V (FlashAttention-3's intra-warpgroup overlap), and the two consumer
//     warpgroups take turns issuing (ping-pong), so one's softmax overlaps the other's products.
//   epilogue: O / l straight to bf16/fp16, or to FP8 e4m3 with a static scale (no D16 rounding),
//     staged in shared memory and stored with 16-byte writes; one kernel for both output kinds
//     (a run-time branch in the epilogue), so the FP8 variant has the same main loop.
//
// Causal masks are applied only on tiles that cross the diagonal or the end of the keys; causal
// CTAs are scheduled longest first. Variable lengths: cu_seqlens give each sequence's token
// offset; TMA boxes may reach into the next sequence (masked keys, unstored rows) or past the
// tensor (zero fill).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "kernels/attention/attention.h"
#include "kernels/attention/device/sm90.cuh"
#include "kernels/attention/device/wgmma.cuh"

namespace fxfuse::attention {
namespace {

using device::Elem;
using device::Wgmma;

constexpr int kBlockM = 128;  // query rows per CTA
constexpr int kBlockN = 128;  // keys per tile
constexpr int kStages = 2;
constexpr int kThreads = 384;

template <int E>
struct Layout {
  static constexpr uint32_t kQBytes = kBlockM * E * 2;
  static constexpr uint32_t kKVBytes = kBlockN * E * 2;
  static constexpr uint32_t kQ = 0;
  static constexpr uint32_t kK = kQBytes;
  static constexpr uint32_t kV = kK + kStages * kKVBytes;
  static constexpr uint32_t kBar = kV + kStages * kKVBytes;
  static constexpr uint32_t kBytes = kBar + 8 * (1 + 4 * kStages) + 1024;  // + slack to align to 1024
};

struct PrefillArgs {
  void* out;
  const int* cu_q;
  const int* cu_k;
  const float* out_scale;
  int group;  // heads_q / heads_kv
  int seqlen_q, seqlen_k;
  int64_t o_stride[3];
  float scale_log2;
  bool causal, bottom_right, fp8;
};

template <typename T>
struct TagOf;
template <>
struct TagOf<__nv_bfloat16> {
  using type = device::Bf16Tag;
};
template <>
struct TagOf<__half> {
  using type = device::F16Tag;
};

template <int E, typename T>
__global__ void __launch_bounds__(kThreads, 1)
    prefillKernel(const __grid_constant__ CUtensorMap tm_q, const __grid_constant__ CUtensorMap tm_k,
                  const __grid_constant__ CUtensorMap tm_v, const PrefillArgs a) {
  using L = Layout<E>;
  using Tag = typename TagOf<T>::type;
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = (device::smemAddr(smem_raw) + 1023u) & ~1023u;
  uint8_t* const base_ptr = smem_raw + (base - device::smemAddr(smem_raw));

  const int b = blockIdx.z, h = blockIdx.y, hk = h / a.group;
  int q_off = 0, k_off = 0, sq = a.seqlen_q, sk = a.seqlen_k;
  if (a.cu_q) {
    q_off = a.cu_q[b];
    sq = a.cu_q[b + 1] - q_off;
    k_off = a.cu_k[b];
    sk = a.cu_k[b + 1] - k_off;
  }
  const int tile = a.causal ? static_cast<int>(gridDim.x) - 1 - static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.x);
  const int q0 = tile * kBlockM;
  if (q0 >= sq) return;
  const int shift = a.causal && a.bottom_right ? sk - sq : 0;
  int kv_end = sk;
  if (a.causal) kv_end = min(sk, q0 + kBlockM + shift);
  const int n_tiles = kv_end > 0 ? (kv_end + kBlockN - 1) / kBlockN : 0;
  const int tma_b = a.cu_q ? 0 : b;

  // Barriers: Q landed; per stage K landed, V landed, K free, V free (K and V are released
  // separately: K right after Q K^T, V after P V, so the next K load starts a tile earlier).
  const uint32_t bar_q = base + L::kBar;
  const uint32_t full_k = bar_q + 8, full_v = full_k + 8 * kStages;
  const uint32_t empty_k = full_v + 8 * kStages, empty_v = empty_k + 8 * kStages;
  if (threadIdx.x == 0) {
    device::mbarInit(bar_q, 1);
    for (int s = 0; s < kStages; ++s) {
      device::mbarInit(full_k + 8 * s, 1);
      device::mbarInit(full_v + 8 * s, 1);
      device::mbarInit(empty_k + 8 * s, 256);
      device::mbarInit(empty_v + 8 * s, 256);
    }
    device::fenceBarrierInit();
  }
  __syncthreads();

  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    device::regDealloc<24>();
    if (threadIdx.x == 0) {
      device::mbarArriveExpectTx(bar_q, L::kQBytes);
#pragma unroll
      for (int c = 0; c < E / 64; ++c)
        device::tmaLoad4d(base + L::kQ + c * kBlockM * 128, &tm_q, c * 64, q_off + q0, h, tma_b, bar_q);
      for (int j = 0; j < n_tiles; ++j) {
        const int s = j % kStages;
        const uint32_t parity = ((j / kStages) + 1) & 1;
        if (j >= kStages) device::mbarWait(empty_k + 8 * s, parity);
        device::mbarArriveExpectTx(full_k + 8 * s, L::kKVBytes);
#pragma unroll
        for (int c = 0; c < E / 64; ++c)
          device::tmaLoad4d(base + L::kK + s * L::kKVBytes + c * kBlockN * 128, &tm_k, c * 64, k_off + j * kBlockN, hk,
                            tma_b, full_k + 8 * s);
        if (j >= kStages) device::mbarWait(empty_v + 8 * s, parity);
        device::mbarArriveExpectTx(full_v + 8 * s, L::kKVBytes);
#pragma unroll
        for (int c = 0; c < E / 64; ++c)
          device::tmaLoad4d(base + L::kV + s * L::kKVBytes + c * kBlockN * 128, &tm_v, c * 64, k_off + j * kBlockN, hk,
                            tma_b, full_v + 8 * s);
      }
    }
    return;
  }
  device::regAlloc<240>();

  // Consumer warpgroup cw owns query rows q0 + 64 cw .. + 63; this thread rows row0 and row0 + 8
  // (sequence-relative), columns 8 i + 2 t4 (+1) of each n8 chunk i.
  const int cw = wg - 1;
  const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const int warp_row = q0 + cw * 64 + warp * 16;
  const int row0 = warp_row + g;

  float o[E / 2];
  float s[kBlockN / 2];
  uint32_t pa[kBlockN / 16][4];
#pragma unroll
  for (int i = 0; i < E / 2; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, corr[2] = {1.0f, 1.0f};

  // S = Q K^T for tile j (issued, not waited): E / 16 k-steps; 64-column blocks of Q/K lie
  // 128 rows * 128 B apart.
  auto issueQK = [&](int j) {
    const int st = j % kStages;
#pragma unroll
    for (int kk = 0; kk < E / 16; ++kk) {
      const uint32_t qa = base + L::kQ + (kk / 4) * (kBlockM * 128) + cw * 64 * 128 + (kk % 4) * 32;
      const uint32_t ka = base + L::kK + st * L::kKVBytes + (kk / 4) * (kBlockN * 128) + (kk % 4) * 32;
      Wgmma<kBlockN, Tag>::ss(s, device::smemDesc(qa, 16, 1024), device::smemDesc(ka, 16, 1024), kk > 0);
    }
    device::wgmmaCommit();
  };
  // O += P V for tile j (issued, not waited); V is N-major: 64-column blocks 128 rows * 128 B apart.
  auto issuePV = [&](int j) {
    const int st = j % kStages;
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint32_t va = base + L::kV + st * L::kKVBytes + kk * 16 * 128;
      Wgmma<E, Tag>::rs(o, pa[kk], device::smemDesc(va, kBlockN * 128, 1024), true);
    }
    device::wgmmaCommit();
  };
  // Masks tile j, updates m and l, turns s into probabilities; corr rescales O.
  auto softmax = [&](int j) {
    const int k0 = j * kBlockN;
    const bool need_mask = k0 + kBlockN > sk || (a.causal && k0 + kBlockN - 1 > warp_row + shift);
    if (need_mask) {
#pragma unroll
      for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = k0 + 8 * i + 2 * t4 + (e & 1);
          const int row = row0 + (e >> 1) * 8;
          if (col >= sk || (a.causal && col > row + shift)) s[4 * i + e] = -INFINITY;
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < kBlockN / 8; ++i) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx * a.scale_log2);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      corr[r] = exp2f(m[r] - m_use);
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < kBlockN / 8; ++i)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float p = exp2f(fmaf(s[4 * i + 2 * r + e], a.scale_log2, -m_use));
          s[4 * i + 2 * r + e] = p;
          sum += p;
        }
      l[r] = l[r] * corr[r] + sum;
    }
  };
  // P as the A fragment of the second product: k-step kk covers n8 chunks 2kk and 2kk+1.
  auto packP = [&] {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
#pragma unroll
      for (int q = 0; q < 4; ++q) pa[kk][q] = Elem<T>::pack(s[8 * kk + 2 * q], s[8 * kk + 2 * q + 1]);
  };
  auto rescaleO = [&] {
#pragma unroll
    for (int i = 0; i < E / 8; ++i) {
      o[4 * i] *= corr[0];
      o[4 * i + 1] *= corr[0];
      o[4 * i + 2] *= corr[1];
      o[4 * i + 3] *= corr[1];
    }
  };

  // Ping-pong: the two consumer warpgroups take turns issuing their wgmmas (named barriers 3
  // and 4), so one warpgroup's softmax runs while the other's matrix products do. There are
  // n_tiles + 1 issue points per warpgroup; warpgroup 1 opens the first turn for warpgroup 0 and
  // skips its last hand-over, so every barrier sees as many arrivals as waits.
  int issue_point = 0;
  auto myTurn = [&] { device::namedBarrierSync(3 + cw, 256); };
  auto passTurn = [&] {
    ++issue_point;
    if (!(cw == 1 && issue_point == n_tiles + 1)) device::namedBarrierArrive(3 + (1 - cw), 256);
  };

  device::mbarWait(bar_q, 0);
  if (n_tiles > 0) {
    if (cw == 1) device::namedBarrierArrive(3, 256);
    // Tile 0: S, softmax, P. Then per tile j: issue S_j and P_{j-1} V_{j-1} together, softmax of
    // S_j while the tensor cores run P V, then rescale O and repack P.
    device::mbarWait(full_k, 0);
    device::fenceRegs(s);
    device::wgmmaFence();
    myTurn();
    issueQK(0);
    passTurn();
    device::wgmmaWait<0>();
    device::fenceRegs(s);
    device::mbarArrive(empty_k);
    softmax(0);
    packP();
    for (int j = 1; j < n_tiles; ++j) {
      const int st = j % kStages, sp = (j - 1) % kStages;
      device::mbarWait(full_k + 8 * st, (j / kStages) & 1);
      device::mbarWait(full_v + 8 * sp, ((j - 1) / kStages) & 1);
      device::fenceRegs(s);
      device::fenceRegs(o);
      device::fenceRegsU(pa);
      device::wgmmaFence();
      myTurn();
      issueQK(j);
      issuePV(j - 1);
      passTurn();
      device::wgmmaWait<1>();
      device::fenceRegs(s);
      device::mbarArrive(empty_k + 8 * st);
      softmax(j);
      device::wgmmaWait<0>();
      device::fenceRegs(o);
      device::fenceRegsU(pa);
      device::mbarArrive(empty_v + 8 * sp);
      rescaleO();
      packP();
    }
    const int last = n_tiles - 1, sl = last % kStages;
    device::mbarWait(full_v + 8 * sl, (last / kStages) & 1);
    device::fenceRegs(o);
    device::fenceRegsU(pa);
    device::wgmmaFence();
    myTurn();
    issuePV(last);
    passTurn();
    device::wgmmaWait<0>();
    device::fenceRegs(o);
    device::fenceRegsU(pa);
    device::mbarArrive(empty_v + 8 * sl);
  }

  // Epilogue: O / l per row (rows with no visible key give NaN, as the reference kernel),
  // converted and staged in this warpgroup's Q rows (free now; 128 B rows, 16 B chunks swizzled
  // by row), then written with coalesced 16-byte stores.
  const bool fp8 = a.fp8;
  const float inv_scale = fp8 ? 1.0f / *a.out_scale : 1.0f;
  uint8_t* const stage = base_ptr + L::kQ + cw * 64 * 128;  // block c at + c * kBlockM * 128
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float lr = l[r];
    lr += __shfl_xor_sync(0xffffffffu, lr, 1);
    lr += __shfl_xor_sync(0xffffffffu, lr, 2);
    const float inv = lr > 0.0f ? 1.0f / lr : __int_as_float(0x7fc00000);
    const int srow = warp * 16 + g + 8 * r;  // row within the warpgroup's 64
#pragma unroll
    for (int i = 0; i < E / 8; ++i) {
      const float v0 = o[4 * i + 2 * r] * inv, v1 = o[4 * i + 2 * r + 1] * inv;
      if (fp8) {  // 1-byte elements: one 128 B block per row
        const int byte = 8 * i + 2 * t4;
        const int chunk = (byte / 16) ^ (srow & 7);
        device::storePair<T, true>(stage + srow * 128 + chunk * 16, byte % 16, v0, v1, inv_scale);
      } else {  // 2-byte elements: 64-column blocks
        const int blk = i / 8, chunk = (i % 8) ^ (srow & 7);
        device::storePair<T, false>(stage + blk * kBlockM * 128 + srow * 128 + chunk * 16 + 4 * t4, 0, v0, v1, 1.0f);
      }
    }
  }
  device::namedBarrierSync(1 + cw, 128);
  const int row_bytes = fp8 ? E : 2 * E, chunks_per_row = row_bytes / 16;
  const int64_t obase = (a.cu_q ? 0 : static_cast<int64_t>(b) * a.o_stride[0]) + static_cast<int64_t>(h) * a.o_stride[1];
  const int esize = fp8 ? 1 : 2;
  for (int c = tid; c < 64 * chunks_per_row; c += 128) {
    const int srow = c / chunks_per_row, chunk = c % chunks_per_row;
    const int row = q0 + cw * 64 + srow;
    if (row >= sq) continue;
    const int blk = chunk / 8, sw = (chunk % 8) ^ (srow & 7);
    const uint4 v = *reinterpret_cast<const uint4*>(stage + blk * kBlockM * 128 + srow * 128 + sw * 16);
    uint8_t* dst = static_cast<uint8_t*>(a.out) + (obase + static_cast<int64_t>(q_off + row) * a.o_stride[2]) * esize + chunk * 16;
    *reinterpret_cast<uint4*>(dst) = v;
  }
}

// ---- host side

using kernels::device::EncodeTiledFn;
using kernels::device::encodeTiled;

// 4-D map (head dim, tokens, heads, batch) with 64 x `rows` boxes and 128-byte swizzle.
bool makeMap(CUtensorMap* map, const void* ptr, DType dt, int head_size, int64_t tokens, int heads, int batch,
              const int64_t (&stride)[3], int rows) {
  EncodeTiledFn enc = encodeTiled();
  if (!enc) return false;
  auto bytes = [](int64_t s) { return static_cast<cuuint64_t>(s > 0 ? s * 2 : 16); };
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_size), static_cast<cuuint64_t>(tokens > 0 ? tokens : 1),
                              static_cast<cuuint64_t>(heads), static_cast<cuuint64_t>(batch)};
  const cuuint64_t strides[3] = {bytes(stride[2]), bytes(stride[1]), bytes(stride[0])};
  const cuuint32_t box[4] = {64, static_cast<cuuint32_t>(rows), 1, 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUtensorMapDataType t = dt == DType::BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return enc(map, t, 4, const_cast<void*>(ptr), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
             CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) ==
         CUDA_SUCCESS;
}

template <int E, typename T>
cudaError_t launchTyped(const PrefillParams& p, cudaStream_t stream) {
  const bool varlen = p.cu_seqlens_q != nullptr;
  const int map_batch = varlen ? 1 : p.batch;
  CUtensorMap tq, tk, tv;
  if (!makeMap(&tq, p.q, p.dtype, E, varlen ? p.total_q : p.seqlen_q, p.heads_q, map_batch, p.q_stride, kBlockM) ||
      !makeMap(&tk, p.k, p.dtype, E, varlen ? p.total_k : p.seqlen_k, p.heads_kv, map_batch, p.k_stride, kBlockN) ||
      !makeMap(&tv, p.v, p.dtype, E, varlen ? p.total_k : p.seqlen_k, p.heads_kv, map_batch, p.v_stride, kBlockN))
    return cudaErrorInvalidValue;
  PrefillArgs a;
  a.out = p.out;
  a.cu_q = p.cu_seqlens_q;
  a.cu_k = p.cu_seqlens_k;
  a.out_scale = p.out_scale;
  a.group = p.heads_q / p.heads_kv;
  a.seqlen_q = static_cast<int>(p.seqlen_q);
  a.seqlen_k = static_cast<int>(p.seqlen_k);
  for (int d = 0; d < 3; ++d) a.o_stride[d] = p.o_stride[d];
  a.scale_log2 = static_cast<float>(p.softmax_scale * 1.4426950408889634);
  a.causal = p.causal;
  a.bottom_right = p.causal_bottom_right;
  a.fp8 = p.out_dtype == DType::F8E4M3FN;
  auto kernel = prefillKernel<E, T>;
  const cudaError_t attr = device::ensureSmemLimit<prefillKernel<E, T>>(Layout<E>::kBytes);
  if (attr != cudaSuccess) return attr;
  const dim3 grid(static_cast<unsigned>((p.seqlen_q + kBlockM - 1) / kBlockM), static_cast<unsigned>(p.heads_q),
                  static_cast<unsigned>(p.batch));
  if (grid.x == 0) return cudaSuccess;
  kernel<<<grid, kThreads, Layout<E>::kBytes, stream>>>(tq, tk, tv, a);
  return cudaGetLastError();
}

template <int E>
cudaError_t launchE(const PrefillParams& p, cudaStream_t stream) {
  return p.dtype == DType::BF16 ? launchTyped<E, __nv_bfloat16>(p, stream) : launchTyped<E, __half>(p, stream);
}

}  // namespace

cudaError_t LaunchPrefill(const PrefillParams& p, cudaStream_t stream) {
  if (!CheckPrefill(p).empty()) return cudaErrorInvalidValue;
  return p.head_size == 64 ? launchE<64>(p, stream) : launchE<128>(p, stream);
}

}  // namespace fxfuse::attention
