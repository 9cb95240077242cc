// Fused all-reduce + (residual add) + RMSNorm (+ static FP8 quant) over peer-visible memory:
// one kernel per rank and call, no barrier kernel, no NVLink multicast.
//
//   rank r:  input_r ─┐
//   rank s:  input_s ─┼─ sum (fp32, rank order) ─ a ─(+ residual)─ z ─ rms_norm ─ n ─ fp8 ─ q
//                    ─┘
//
// Synchronization is Lamport-style: every 16-bit lane of a workspace data slot holds the
// sentinel 0xFFFF until its producer writes the value, the consumer polls its own (local)
// memory until no lane of a 16-byte vector is the sentinel, then writes the sentinel back. Two
// slots alternate with a launch counter (epoch) kept in the workspace, so the same launch works
// under CUDA-graph replay. docs/allreduce.md has the protocol and the proof of the slot count.
//
//   one-shot: each rank pushes its input rows into slot[rank] of every peer, then sums the N
//             rows of each of its rows from local memory (its own from `input`);
//   two-shot: rank o owns rows [T*o/N, T*(o+1)/N); each rank pushes the rows it does not own to
//             their owner (reduce-scatter), owners sum and push the rounded sum a to every peer
//             (all-gather of a), then every rank runs the epilogue on all rows locally;
//   world size 1: the epilogue alone (a = input).
//
// Row work (the epilogue) follows the unfused row kernel exactly: the same CTA size and
// vectors per thread (internal::ChooseRowLaunchConfig with the same T, H and work class), the
// same per-thread element order and block reduction, the same rounding helpers, so n and q
// equal RmsNorm / RmsNormQuantFp8 applied to a, bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "kernels/all_reduce_rms_norm.h"
#include "kernels/allreduce/launch_info.h"
#include "kernels/allreduce/workspace_layout.h"
#include "kernels/device/numeric.cuh"
#include "kernels/device/reduce.cuh"
#include "kernels/internal/launch_config.h"

namespace fxfuse::kernels {
namespace {

using device::BlockAllReduce;
using device::D16;
using device::Pack8;
using device::ScaleOp;
using device::SumOp;
using device::Unpack8;

enum class Mode { kLocal, kOneShot, kTwoShot };

// A rank waits at most this long for a peer's data, then reports and traps (a dead or missing
// rank must not hang the process forever).
constexpr uint64_t kPeerWaitTimeoutNs = 20ull * 1000 * 1000 * 1000;

struct KernelArgs {
  int64_t num_tokens;
  int hidden;
  int world_size;
  int rank;
  const void* input;
  void* residual;
  void* allreduce_out;
  const void* weight;
  float epsilon;
  void* norm_out;
  uint8_t* quant_out;
  const float* scale;
  // peers[r]: rank r's workspace base in this rank's address space.
  char* peers[kMaxAllReduceRanks];
  int64_t one_shot_offset, one_shot_elems;
  int64_t scatter_offset, scatter_elems;
  int64_t gather_offset, gather_elems;
};

__device__ __forceinline__ uint4 LoadVolatile(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}
__device__ __forceinline__ void StoreVolatile(uint4* p, const uint4& v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ bool WordReady(uint32_t w) {
  return (w & 0xFFFFu) != allreduce::kSentinel16 && (w >> 16) != allreduce::kSentinel16;
}
// No lane of the vector is still the sentinel (lanes may land separately).
__device__ __forceinline__ bool VectorReady(const uint4& v) {
  return WordReady(v.x) && WordReady(v.y) && WordReady(v.z) && WordReady(v.w);
}
__device__ __forceinline__ uint32_t ReplaceSentinelInWord(uint32_t w) {
  if ((w & 0xFFFFu) == allreduce::kSentinel16) w = (w & 0xFFFF0000u) | allreduce::kSentinelReplacement16;
  if ((w >> 16) == allreduce::kSentinel16) w = (w & 0xFFFFu) | (uint32_t{allreduce::kSentinelReplacement16} << 16);
  return w;
}
// A value about to be published: the sentinel NaN pattern becomes another NaN.
__device__ __forceinline__ uint4 ReplaceSentinel(uint4 v) {
  return make_uint4(ReplaceSentinelInWord(v.x), ReplaceSentinelInWord(v.y), ReplaceSentinelInWord(v.z),
                    ReplaceSentinelInWord(v.w));
}
__device__ __forceinline__ uint4 SentinelVector() {
  return make_uint4(0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu);
}

// Polls *p (local memory written by `source`) until every lane is written; `v` is the first
// load's value. Traps after kPeerWaitTimeoutNs with a message naming both ranks.
__device__ __noinline__ uint4 WaitForVector(const uint4* p, uint4 v, int rank, int source) {
  const uint64_t start = GlobalTimerNs();
  for (uint32_t n = 1; !VectorReady(v); ++n) {
    if ((n & 1023u) == 0 && GlobalTimerNs() - start > kPeerWaitTimeoutNs) {
      printf("fxfuse all_reduce_rms_norm: rank %d timed out waiting for rank %d (block %d)\n", rank, source,
             blockIdx.x);
      __trap();
    }
    v = LoadVolatile(p);
  }
  return v;
}

__device__ __forceinline__ uint4* DataRegion(char* base, int64_t byte_offset, int slot, int64_t slot_elems,
                                             int source, int sources) {
  uint16_t* region = reinterpret_cast<uint16_t*>(base + byte_offset);
  return reinterpret_cast<uint4*>(region + (static_cast<int64_t>(slot) * sources + source) * slot_elems);
}

// Residual add, RMSNorm and the outputs of one row whose all-reduced value a is in `x`
// (packed D16, vector c = i * blockDim.x + threadIdx.x). Same arithmetic, in the same order,
// as RowKernelVectorized<T, kVecs, residual, true, kD16 / kFp8Static> (kRoundedSum).
template <typename T, int kVecs>
__device__ __forceinline__ void RowEpilogue(const KernelArgs& a, int64_t row, uint4 (&x)[kVecs],
                                            const uint4 (&w)[kVecs], float* partials, const ScaleOp& quant) {
  const int num_vecs = a.hidden >> 3;
  const int64_t row_offset = row * (a.hidden >> 3);
  if (a.allreduce_out != nullptr) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int c = i * blockDim.x + threadIdx.x;
      if (c < num_vecs) static_cast<uint4*>(a.allreduce_out)[row_offset + c] = x[i];
    }
  }
  const bool norm = a.norm_out != nullptr || a.quant_out != nullptr;
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = i * blockDim.x + threadIdx.x;
    float v[8];
    Unpack8<T>(x[i], v);
    if (a.residual != nullptr) {
      uint4* r_row = static_cast<uint4*>(a.residual) + row_offset;
      const uint4 r = c < num_vecs ? r_row[c] : make_uint4(0, 0, 0, 0);
      float rf[8];
      Unpack8<T>(r, rf);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] += rf[j];
      const uint4 z = Pack8<T>(v);
      if (c < num_vecs) r_row[c] = z;
      x[i] = z;
      Unpack8<T>(z, v);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) sum_sq += v[j] * v[j];
  }
  if (!norm) return;
  sum_sq = BlockAllReduce(sum_sq, partials, SumOp());
  const float inv = rsqrtf(sum_sq / static_cast<float>(a.hidden) + a.epsilon);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = i * blockDim.x + threadIdx.x;
    float s8[8];
    Unpack8<T>(x[i], s8);
    const uint4 n = a.weight != nullptr ? device::NormalizeWeighted8<T>(s8, inv, w[i])
                                        : device::NormalizeUnweighted8<T>(s8, inv);
    if (c < num_vecs) {
      if (a.norm_out != nullptr) static_cast<uint4*>(a.norm_out)[row_offset + c] = n;
      if (a.quant_out != nullptr) {
        reinterpret_cast<uint2*>(a.quant_out)[row_offset + c] = device::QuantizePackedToFp8x8<T>(n, quant);
      }
    }
  }
}

// The last CTA of the launch to finish advances this rank's epoch (every CTA read it at start).
__device__ __forceinline__ void FinishLaunch(allreduce::Control* control) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    const uint32_t done = atomicAdd(&control->arrived, 1u);
    if (done == gridDim.x - 1) {
      control->arrived = 0;
      volatile uint32_t* epoch = &control->epoch;
      *epoch = *epoch + 1;
      __threadfence_system();
    }
  }
}

// Sum of this rank's input vector and the N-1 peers' copies in `slots` (source s at
// slots + s * source_stride), fp32 in rank order 0..N-1, rounded once; each peer copy is reset
// to the sentinel after it is read.
template <typename T>
__device__ __forceinline__ uint4 ReduceVector(const KernelArgs& a, const uint4* own, uint4* slots,
                                              int64_t source_stride) {
  uint4 v[kMaxAllReduceRanks];
#pragma unroll
  for (int s = 0; s < kMaxAllReduceRanks; ++s) {
    v[s] = make_uint4(0, 0, 0, 0);
    if (s < a.world_size && s != a.rank) v[s] = LoadVolatile(slots + s * source_stride);
  }
#pragma unroll
  for (int s = 0; s < kMaxAllReduceRanks; ++s) {
    if (s < a.world_size && s != a.rank) {
      if (!VectorReady(v[s])) v[s] = WaitForVector(slots + s * source_stride, v[s], a.rank, s);
      StoreVolatile(slots + s * source_stride, SentinelVector());
    }
  }
  float acc[8];
  {
    const uint4 first = a.rank == 0 ? ReplaceSentinel(*own) : v[0];
    Unpack8<T>(first, acc);
  }
#pragma unroll
  for (int s = 1; s < kMaxAllReduceRanks; ++s) {
    if (s < a.world_size) {
      float f[8];
      Unpack8<T>(s == a.rank ? ReplaceSentinel(*own) : v[s], f);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] += f[j];
    }
  }
  return ReplaceSentinel(Pack8<T>(acc));
}

template <typename T, int kVecs, Mode kMode>
__global__ void __launch_bounds__(internal::MaxThreadsForVecsPerThread(kVecs))
    AllReduceRmsNormKernel(const KernelArgs a) {
  __shared__ float partials[2][32];
  const int num_vecs = a.hidden >> 3;
  const int64_t row_vecs = num_vecs;
  const uint4* input = static_cast<const uint4*>(a.input);
  uint4 w[kVecs];
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = i * blockDim.x + threadIdx.x;
    w[i] = (a.weight != nullptr && c < num_vecs) ? __ldg(static_cast<const uint4*>(a.weight) + c)
                                                 : make_uint4(0, 0, 0, 0);
  }
  const ScaleOp quant = ScaleOp::Make(a.quant_out != nullptr ? __ldg(a.scale) : 1.0f, false);
  int parity = 0;

  if constexpr (kMode == Mode::kLocal) {
    for (int64_t row = blockIdx.x; row < a.num_tokens; row += gridDim.x, parity ^= 1) {
      uint4 x[kVecs];
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int c = i * blockDim.x + threadIdx.x;
        x[i] = c < num_vecs ? input[row * row_vecs + c] : make_uint4(0, 0, 0, 0);
      }
      RowEpilogue<T, kVecs>(a, row, x, w, partials[parity], quant);
    }
    return;
  }

  char* own_base = a.peers[a.rank];
  allreduce::Control* control = reinterpret_cast<allreduce::Control*>(own_base);
  const int slot = static_cast<int>(*reinterpret_cast<volatile uint32_t*>(&control->epoch) % allreduce::kSlots);

  if constexpr (kMode == Mode::kOneShot) {
    // Push: this CTA's rows into slot[rank] of every peer.
    for (int64_t row = blockIdx.x; row < a.num_tokens; row += gridDim.x) {
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int c = i * blockDim.x + threadIdx.x;
        if (c >= num_vecs) continue;
        const uint4 v = ReplaceSentinel(input[row * row_vecs + c]);
#pragma unroll
        for (int p = 0; p < kMaxAllReduceRanks; ++p) {
          if (p < a.world_size && p != a.rank) {
            uint4* dst = DataRegion(a.peers[p], a.one_shot_offset, slot, a.one_shot_elems, a.rank, a.world_size);
            StoreVolatile(dst + row * row_vecs + c, v);
          }
        }
      }
    }
    // Reduce each row from local memory, then the epilogue.
    uint4* slots = DataRegion(own_base, a.one_shot_offset, slot, a.one_shot_elems, 0, a.world_size);
    const int64_t source_stride = a.one_shot_elems / 8;
    for (int64_t row = blockIdx.x; row < a.num_tokens; row += gridDim.x, parity ^= 1) {
      uint4 x[kVecs];
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int c = i * blockDim.x + threadIdx.x;
        x[i] = c < num_vecs ? ReduceVector<T>(a, input + row * row_vecs + c, slots + row * row_vecs + c, source_stride)
                            : make_uint4(0, 0, 0, 0);
      }
      RowEpilogue<T, kVecs>(a, row, x, w, partials[parity], quant);
    }
  } else if constexpr (kMode == Mode::kTwoShot) {
    const int64_t own_begin = allreduce::OwnedRowBegin(a.num_tokens, a.world_size, a.rank);
    const int64_t own_end = allreduce::OwnedRowBegin(a.num_tokens, a.world_size, a.rank + 1);
    // Reduce-scatter push: rows owned by a peer go to that peer's scatter slot [this rank].
    for (int64_t row = blockIdx.x; row < a.num_tokens; row += gridDim.x) {
      if (row >= own_begin && row < own_end) continue;
      const int owner = allreduce::RowOwner(a.num_tokens, a.world_size, row);
      const int64_t local_row = row - allreduce::OwnedRowBegin(a.num_tokens, a.world_size, owner);
      uint4* dst = DataRegion(a.peers[owner], a.scatter_offset, slot, a.scatter_elems, a.rank, a.world_size);
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int c = i * blockDim.x + threadIdx.x;
        if (c < num_vecs) StoreVolatile(dst + local_row * row_vecs + c, ReplaceSentinel(input[row * row_vecs + c]));
      }
    }
    // Owned rows (this CTA's share): reduce, push a to every peer's gather slot, epilogue.
    uint4* scatter = DataRegion(own_base, a.scatter_offset, slot, a.scatter_elems, 0, a.world_size);
    const int64_t source_stride = a.scatter_elems / 8;
    const int64_t first_owned = own_begin + ((blockIdx.x - own_begin % gridDim.x) + gridDim.x) % gridDim.x;
    for (int64_t row = first_owned; row < own_end; row += gridDim.x, parity ^= 1) {
      const int64_t local_row = row - own_begin;
      uint4 x[kVecs];
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int c = i * blockDim.x + threadIdx.x;
        x[i] = make_uint4(0, 0, 0, 0);
        if (c < num_vecs) {
          x[i] = ReduceVector<T>(a, input + row * row_vecs + c, scatter + local_row * row_vecs + c, source_stride);
#pragma unroll
          for (int p = 0; p < kMaxAllReduceRanks; ++p) {
            if (p < a.world_size && p != a.rank) {
              uint4* dst = DataRegion(a.peers[p], a.gather_offset, slot, a.gather_elems, 0, 1);
              StoreVolatile(dst + row * row_vecs + c, x[i]);
            }
          }
        }
      }
      RowEpilogue<T, kVecs>(a, row, x, w, partials[parity], quant);
    }
    // Rows owned by peers: wait for their a in the local gather slot, epilogue.
    uint4* gather = DataRegion(own_base, a.gather_offset, slot, a.gather_elems, 0, 1);
    for (int64_t row = blockIdx.x; row < a.num_tokens; row += gridDim.x) {
      if (row >= own_begin && row < own_end) continue;
      const int owner = allreduce::RowOwner(a.num_tokens, a.world_size, row);
      uint4 x[kVecs];
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int c = i * blockDim.x + threadIdx.x;
        x[i] = make_uint4(0, 0, 0, 0);
        if (c < num_vecs) {
          uint4* src = gather + row * row_vecs + c;
          x[i] = LoadVolatile(src);
          if (!VectorReady(x[i])) x[i] = WaitForVector(src, x[i], a.rank, owner);
          StoreVolatile(src, SentinelVector());
        }
      }
      RowEpilogue<T, kVecs>(a, row, x, w, partials[parity], quant);
      parity ^= 1;
    }
  }
  FinishLaunch(control);
}

template <typename T, int kVecs, Mode kMode>
void* KernelFor() {
  return reinterpret_cast<void*>(&AllReduceRmsNormKernel<T, kVecs, kMode>);
}

template <typename T, Mode kMode>
void* KernelForVecs(int vecs) {
  switch (vecs) {
    case 1:
      return KernelFor<T, 1, kMode>();
    case 2:
      return KernelFor<T, 2, kMode>();
    case 4:
      return KernelFor<T, 4, kMode>();
    default:
      return KernelFor<T, 8, kMode>();
  }
}

template <typename T>
void* KernelForMode(Mode mode, int vecs) {
  switch (mode) {
    case Mode::kLocal:
      return KernelForVecs<T, Mode::kLocal>(vecs);
    case Mode::kOneShot:
      return KernelForVecs<T, Mode::kOneShot>(vecs);
    default:
      return KernelForVecs<T, Mode::kTwoShot>(vecs);
  }
}

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(std::string("all_reduce_rms_norm: ") + what + ": " + cudaGetErrorName(err) + ": " +
                           cudaGetErrorString(err));
}

// CTAs of `kernel` with `threads` threads resident per multiprocessor (occupancy API, cached
// per kernel and CTA size of the current device).
Status ResidentCtasPerSm(void* kernel, int threads, int* per_sm) {
  static std::mutex mutex;
  static std::map<std::tuple<int, void*, int>, int> cache;
  int device = 0;
  FXFUSE_KERNELS_RETURN_IF_ERROR(CudaStatus(cudaGetDevice(&device), "cudaGetDevice"));
  const auto key = std::make_tuple(device, kernel, threads);
  std::lock_guard<std::mutex> lock(mutex);
  const auto it = cache.find(key);
  if (it != cache.end()) {
    *per_sm = it->second;
    return Status::Ok();
  }
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      CudaStatus(cudaOccupancyMaxActiveBlocksPerMultiprocessor(per_sm, kernel, threads, 0), "occupancy"));
  cache.emplace(key, *per_sm);
  return Status::Ok();
}

// The kernel, CTA size and grid one rank launches for `p` with algorithm `algorithm`.
struct Launch {
  void* kernel = nullptr;
  int threads = 0;
  int grid = 0;
  Mode mode = Mode::kLocal;
};

Status PlanLaunch(const AllReduceRmsNormParams& p, AllReduceAlgorithm algorithm, Launch* launch) {
  int sm_count = 0;
  FXFUSE_KERNELS_RETURN_IF_ERROR(internal::CurrentDeviceSmCount(&sm_count));
  // The unfused chain's launch shape for the same rows: its reduction order is ours.
  internal::RowLaunchConfig config;
  FXFUSE_KERNELS_RETURN_IF_ERROR(internal::ChooseRowLaunchConfig(
      p.num_tokens, p.hidden_size, /*vectorizable=*/true, sm_count, LaunchTuning(), &config,
      internal::NormRowWork(p.residual != nullptr)));
  if (!config.vectorized) return Status::InvalidArgument("all_reduce_rms_norm: H does not fit the fused kernels");
  launch->mode = p.workspace.world_size == 1          ? Mode::kLocal
                 : algorithm == AllReduceAlgorithm::kOneShot ? Mode::kOneShot
                                                             : Mode::kTwoShot;
  launch->kernel = p.dtype == DType::BF16 ? KernelForMode<__nv_bfloat16>(launch->mode, config.vecs_per_thread)
                                               : KernelForMode<__half>(launch->mode, config.vecs_per_thread);
  launch->threads = config.threads;
  int per_sm = 0;
  FXFUSE_KERNELS_RETURN_IF_ERROR(ResidentCtasPerSm(launch->kernel, launch->threads, &per_sm));
  int64_t grid = std::min<int64_t>(p.num_tokens, static_cast<int64_t>(per_sm) * sm_count);
  if (p.max_ctas > 0) grid = std::min<int64_t>(grid, p.max_ctas);
  launch->grid = static_cast<int>(std::max<int64_t>(grid, 1));
  return Status::Ok();
}

}  // namespace

Status InitAllReduceWorkspace(const AllReduceWorkspace& w, cudaStream_t stream) {
  if (w.world_size < 1 || w.world_size > kMaxAllReduceRanks || w.rank < 0 || w.rank >= w.world_size) {
    return Status::InvalidArgument("InitAllReduceWorkspace: world_size/rank out of range");
  }
  void* own = w.peers[w.rank];
  if (own == nullptr) return Status::InvalidArgument("InitAllReduceWorkspace: peers[rank] is null");
  const int64_t need = AllReduceWorkspaceBytes(w.world_size, w.max_tokens, w.hidden_size);
  if (w.bytes < need) return Status::InvalidArgument("InitAllReduceWorkspace: workspace.bytes too small");
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      CudaStatus(cudaMemsetAsync(own, 0, allreduce::kControlBytes, stream), "clear control block"));
  return CudaStatus(cudaMemsetAsync(static_cast<char*>(own) + allreduce::kControlBytes, 0xFF,
                                    need - allreduce::kControlBytes, stream),
                    "fill sentinels");
}

Status AllReduceRmsNorm(const AllReduceRmsNormParams& p, cudaStream_t stream) {
  FXFUSE_KERNELS_RETURN_IF_ERROR(p.Check());
  const AllReduceAlgorithm algorithm = ResolveAllReduceAlgorithm(p);
  if (algorithm == AllReduceAlgorithm::kNcclFallback) {
    return Status::InvalidArgument(std::string("all_reduce_rms_norm: T=") + std::to_string(p.num_tokens) +
                                   " H=" + std::to_string(p.hidden_size) + " at world size " +
                                   std::to_string(p.workspace.world_size) + " (algorithm " +
                                   AllReduceAlgorithmName(p.algorithm) +
                                   ") resolves to nccl_fallback: run NCCL all-reduce + RmsNorm");
  }
  if (p.num_tokens == 0) return Status::Ok();
  Launch launch;
  FXFUSE_KERNELS_RETURN_IF_ERROR(PlanLaunch(p, algorithm, &launch));
  const AllReduceWorkspace& w = p.workspace;
  const allreduce::WorkspaceLayout layout = allreduce::WorkspaceLayout::For(w.world_size, w.max_tokens, w.hidden_size);
  KernelArgs a{};
  a.num_tokens = p.num_tokens;
  a.hidden = static_cast<int>(p.hidden_size);
  a.world_size = w.world_size;
  a.rank = w.rank;
  a.input = p.input;
  a.residual = p.residual;
  a.allreduce_out = p.allreduce_out;
  a.weight = p.weight;
  a.epsilon = p.epsilon;
  a.norm_out = p.norm_out;
  a.quant_out = static_cast<uint8_t*>(p.quant_out);
  a.scale = p.scale;
  for (int r = 0; r < kMaxAllReduceRanks; ++r) a.peers[r] = static_cast<char*>(w.peers[r]);
  a.one_shot_offset = layout.one_shot_offset;
  a.one_shot_elems = layout.one_shot_elems;
  a.scatter_offset = layout.scatter_offset;
  a.scatter_elems = layout.scatter_elems;
  a.gather_offset = layout.gather_offset;
  a.gather_elems = layout.gather_elems;
  void* args[] = {&a};
  return CudaStatus(cudaLaunchKernel(launch.kernel, dim3(launch.grid), dim3(launch.threads), args, 0, stream),
                    AllReduceAlgorithmName(algorithm));
}

namespace allreduce {

Status FusedLaunchShape(const AllReduceRmsNormParams& p, int* threads, int* ctas_per_sm, int* sm_count) {
  FXFUSE_KERNELS_RETURN_IF_ERROR(p.Check());
  const AllReduceAlgorithm algorithm = ResolveAllReduceAlgorithm(p);
  if (algorithm == AllReduceAlgorithm::kNcclFallback) {
    return Status::InvalidArgument("all_reduce_rms_norm: the call resolves to nccl_fallback");
  }
  Launch launch;
  AllReduceRmsNormParams q = p;
  if (q.num_tokens == 0) q.num_tokens = 1;
  FXFUSE_KERNELS_RETURN_IF_ERROR(PlanLaunch(q, algorithm, &launch));
  FXFUSE_KERNELS_RETURN_IF_ERROR(internal::CurrentDeviceSmCount(sm_count));
  *threads = launch.threads;
  return ResidentCtasPerSm(launch.kernel, launch.threads, ctas_per_sm);
}

}  // namespace allreduce
}  // namespace fxfuse::kernels
