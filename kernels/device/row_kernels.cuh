// Row kernels: one CTA handles a row of [T, H] at a time, for RMSNorm (with optional residual
// add) and FP8 quantization, fused or not. Two paths compute the same math:
//   RowKernelVectorized: 16-byte loads/stores, the whole row kept in registers between the
//     reduction(s) and the output pass (each input byte read once), following rows prefetched
//     into shared memory with cp.async;
//   RowKernelScalar: element loads, any H and alignment, one row per CTA; the row is streamed
//     two or three times (the later passes mostly hit L2).
// Included only by the .cu files that instantiate the variants they launch.
#ifndef FXFUSE_KERNELS_DEVICE_ROW_KERNELS_CUH_
#define FXFUSE_KERNELS_DEVICE_ROW_KERNELS_CUH_

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kernels/device/mbarrier.cuh"
#include "kernels/device/numeric.cuh"
#include "kernels/device/pdl.cuh"
#include "kernels/device/reduce.cuh"
#include "kernels/internal/launch_config.h"
#include "kernels/status.h"
#include "kernels/types.h"

namespace fxfuse::kernels::device {

// What a row kernel writes after the (optional) normalization n of each row.
enum class RowOutput {
  kD16,           // n as D16 (RmsNorm)
  kFp8Static,     // fp8(clamp(n op s)), s = *scale given
  kFp8PerToken,   // s = dynamic scale of the row, written to scale[row * token_stride]
  kFp8PerGroup,   // s = dynamic scale of each group of g values, written with (token, group) strides
  kTensorAbsMax,  // nothing but atomicMax(scale, dynamic scale of the row) (dynamic per-tensor, pass 1)
};

// Everything a row kernel reads; strides in elements. Passed by value (kernel parameter space).
struct RowKernelArgs {
  int64_t num_rows = 0;  // T
  int hidden = 0;
  const void* input = nullptr;  // [T, H] D16
  int64_t input_stride = 0;
  const void* residual = nullptr;  // [T, H] D16, read (kResidual only)
  int64_t residual_stride = 0;
  void* residual_out = nullptr;    // [T, H] D16: round16(x + r) is written here (kResidual only;
  int64_t residual_out_stride = 0;  // `residual` itself for the in-place update)
  bool residual_unrounded = false;  // normalize the fp32 sum x + r instead of round16(x + r)
  const void* weight = nullptr;     // [H] D16 (kNorm only); null: no weight multiply
  float epsilon = 0.0f;
  void* output = nullptr;  // [T, H] D16 (kD16) or e4m3fn bytes (kFp8*)
  int64_t output_stride = 0;
  float* scale = nullptr;  // see RowOutput
  int64_t scale_token_stride = 0;
  int64_t scale_group_stride = 0;
  const float* scale_upper_bound = nullptr;  // per-token: optional clamp of the row's max
  int group_size = 0;                        // per-group: 64 or 128
  bool divide = false;     // quantize with v / s (true) or v * (1/s) (false)
  float min_abs = 0.0f;    // dynamic scale s = max(max(a, min_abs) / 448, min_scale)
  float min_scale = 0.0f;
  int stages = 0;          // vectorized path: 0 = one row per CTA; else rows staged in shared memory
  bool l2_prefetch = false;  // vectorized path: operands asked of L2 before the grid wait (RowL2Prefetch)
};

// Whether the 16-byte row kernel asks L2 for its first row's residual, the weight and the
// static scale before it waits for the preceding grid (on unless $FXFUSE_ROW_L2_PREFETCH=0;
// read per launch). In a decode step the residual was written a layer's weight stream ago and
// is back in DRAM, so its load after the wait is a DRAM round trip under the next GEMM's ring
// fill; asked for while the previous GEMM drains, it is an L2 hit (the 8B step 0.7-1.1 %
// faster at batch 1 and 8 on an H100: docs/benchmarks/decode_step.md, thirty-seventh session).
// A prefetch is only a hint to L2, the point of coherence, so it cannot read stale data
// whichever kernel still writes those bytes.
inline bool RowL2Prefetch() {
  const char* v = std::getenv("FXFUSE_ROW_L2_PREFETCH");
  return !(v && v[0] == '0');
}

// The L2 prefetch of RowL2Prefetch for `row`, by one thread (16-byte path: rows and the weight
// are 16-byte aligned multiples of 16 bytes).
template <typename T, bool kResidual, bool kNorm, RowOutput kOut>
__device__ __forceinline__ void PrefetchRowOperandsToL2(const RowKernelArgs& a, int64_t row) {
  const uint32_t row_bytes = static_cast<uint32_t>(a.hidden) * sizeof(T);
  if constexpr (kResidual) bulkPrefetchToL2(static_cast<const T*>(a.residual) + row * a.residual_stride, row_bytes);
  if (kNorm && a.weight != nullptr) bulkPrefetchToL2(a.weight, row_bytes);
  if constexpr (kOut == RowOutput::kFp8Static) asm volatile("prefetch.global.L2 [%0];" ::"l"(a.scale));
}

// Dynamic per-tensor, pass 1: raise *scale (zeroed before) to this row's dynamic scale. Scales
// are >= 0, so their bit patterns order like the values; reading first skips most atomics.
__device__ __forceinline__ void RaiseTensorScale(float* scale, float row_scale) {
  unsigned int* target = reinterpret_cast<unsigned int*>(scale);
  const unsigned int bits = __float_as_uint(row_scale);
  if (bits > *reinterpret_cast<volatile unsigned int*>(target)) atomicMax(target, bits);
}

// Asynchronous 16-byte global -> shared copies (sm_80+ cp.async, L2 only) and their groups.
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const unsigned int address = static_cast<unsigned int>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(gmem) : "memory");
}
__device__ __forceinline__ void CpAsyncCommitGroup() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `pending` (0, 1 or 2) of this thread's newest groups are in flight.
__device__ __forceinline__ void CpAsyncWaitGroups(int pending) {
  if (pending >= 2) {
    asm volatile("cp.async.wait_group 2;\n" ::: "memory");
  } else if (pending == 1) {
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
  } else {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  }
}

// Shared memory of the 16-byte row kernel: `stages` slots, each holding the row's input (and
// residual) vectors, thread t's vector i at [i * blockDim.x + t] (conflict-free, and private to
// the thread: the pipeline needs no barrier).
inline int64_t RowStageBytes(int vecs_per_thread, int threads, bool residual) {
  return int64_t{16} * vecs_per_thread * threads * (residual ? 2 : 1);
}

// Row kernel, 16-byte path. Each CTA walks rows blockIdx.x, blockIdx.x + gridDim.x, ... (the
// grid is at most the CTAs resident on the device). Rows are copied global -> shared with
// cp.async `a.stages - 1` rows ahead of the one being reduced and written, so loads are always
// in flight. Thread t owns vectors c = i * blockDim.x + t (i < kVecs) of 8 elements; a group of
// g elements is g/8 consecutive lanes. The current row is held in registers as packed D16, the
// weight too (loaded once per CTA).
// Rounding points (s: source value of an element):
//   kResidual: v = float(x) + float(r) (fp32); residual_out <- round16(v) (the residual itself, or out of place);
//              s = v (residual_unrounded) or round16(v)
//   otherwise: s = float(x)
//   kNorm:     inv = rsqrtf(sum(s^2) / H + eps);  n = round16(round16(s * inv) * float(w))
//              (no weight: n = round16(s * inv))
//   otherwise: n = s
//   kFp8*:     q = fp8(clamp(n * (1/scale) or n / scale, -448, 448)), RNE, NaN kept
// The per-row arithmetic and reduction order depend only on blockDim.x and kVecs, never on the
// grid or the pipeline depth, so a fused kernel equals its unfused chain bit for bit.
template <typename T, int kVecs, bool kResidual, bool kNorm, RowOutput kOut>
__global__ void __launch_bounds__(internal::MaxThreadsForVecsPerThread(kVecs))
    RowKernelVectorized(const RowKernelArgs a) {
  static_assert(kNorm || !kResidual, "a residual add is only fused with a normalization");
  allowDependentGrids();
  if (a.l2_prefetch && threadIdx.x == 0 && blockIdx.x < a.num_rows)
    PrefetchRowOperandsToL2<T, kResidual, kNorm, kOut>(a, blockIdx.x);
  waitForPrecedingGrid();
  extern __shared__ uint4 row_stages[];
  constexpr int kArrays = kResidual ? 2 : 1;
  const int num_vecs = a.hidden >> 3;
  const int stages = a.stages;
  const int array_stride = kVecs * blockDim.x;  // uint4 per array per stage
  const bool has_weight = kNorm && a.weight != nullptr;
  const bool unrounded = kResidual && a.residual_unrounded;
  uint4 w_raw[kVecs];
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = i * blockDim.x + threadIdx.x;
    w_raw[i] = (has_weight && c < num_vecs) ? __ldg(static_cast<const uint4*>(a.weight) + c) : make_uint4(0, 0, 0, 0);
  }
  // Copies this thread's vectors of `row` into stage `stage` (one commit group, maybe empty).
  const auto prefetch = [&](int64_t row, int stage) {
    if (row < a.num_rows) {
      const uint4* x_row = reinterpret_cast<const uint4*>(static_cast<const T*>(a.input) + row * a.input_stride);
      const uint4* r_row = nullptr;
      if constexpr (kResidual) {
        r_row = reinterpret_cast<const uint4*>(static_cast<const T*>(a.residual) + row * a.residual_stride);
      }
      uint4* slot = row_stages + stage * kArrays * array_stride + threadIdx.x;
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int c = i * blockDim.x + threadIdx.x;
        if (c < num_vecs) {
          CpAsync16(slot + i * blockDim.x, x_row + c);
          if constexpr (kResidual) CpAsync16(slot + array_stride + i * blockDim.x, r_row + c);
        }
      }
    }
    CpAsyncCommitGroup();
  };
  // Partial sums of the reductions, double-buffered: a warp can only reach the next row's
  // reduction after every warp passed this row's barrier, i.e. finished reading this buffer.
  __shared__ float sum_partials[2][32];
  __shared__ float max_partials[2][32];

  // Everything after the row's vectors are in registers: residual, reduction(s), outputs.
  const auto process_row = [&](int64_t row, int parity, uint4 (&x)[kVecs], uint4 (&r)[kVecs]) {
    // Residual add (written back at once); x becomes round16(v) unless the unrounded sum is
    // normalized (then v is recomputed from x and r, identically, when needed).
    float sum_sq = 0.0f;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      float v[8];
      Unpack8<T>(x[i], v);
      if constexpr (kResidual) {
        const int c = i * blockDim.x + threadIdx.x;
        float rf[8];
        Unpack8<T>(r[i], rf);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] += rf[j];
        const uint4 z = Pack8<T>(v);
        if (c < num_vecs) {
          reinterpret_cast<uint4*>(static_cast<T*>(a.residual_out) + row * a.residual_out_stride)[c] = z;
        }
        if (!unrounded) {
          x[i] = z;
          Unpack8<T>(z, v);
        }
      }
      if constexpr (kNorm) {
#pragma unroll
        for (int j = 0; j < 8; ++j) sum_sq += v[j] * v[j];
      }
    }
    float inv = 1.0f;
    if constexpr (kNorm) {
      sum_sq = BlockAllReduce(sum_sq, sum_partials[parity], SumOp());
      inv = rsqrtf(sum_sq / static_cast<float>(a.hidden) + a.epsilon);
      // Keep the row packed across the reduction (unpack again below) rather than as floats.
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        OpaqueRegisters(x[i]);
        if (unrounded) OpaqueRegisters(r[i]);
      }
    }
    // n of vector i, packed D16 (exact: every n is a D16 value).
    const auto normalized = [&](int i) -> uint4 {
      if constexpr (!kNorm) {
        return x[i];
      } else {
        float s8[8];
        Unpack8<T>(x[i], s8);
        if (unrounded) {
          float rf[8];
          Unpack8<T>(r[i], rf);
#pragma unroll
          for (int j = 0; j < 8; ++j) s8[j] += rf[j];
        }
        return has_weight ? NormalizeWeighted8<T>(s8, inv, w_raw[i]) : NormalizeUnweighted8<T>(s8, inv);
      }
    };

    if constexpr (kOut == RowOutput::kD16) {
      uint4* o_row = reinterpret_cast<uint4*>(static_cast<T*>(a.output) + row * a.output_stride);
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int c = i * blockDim.x + threadIdx.x;
        const uint4 n = normalized(i);
        if (c < num_vecs) o_row[c] = n;
      }
    } else if constexpr (kOut == RowOutput::kTensorAbsMax) {
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < kVecs; ++i) amax = fmaxf(amax, AbsMax8<T>(normalized(i)));
      amax = BlockAllReduce(amax, max_partials[parity], MaxOp());
      if (threadIdx.x == 0) RaiseTensorScale(a.scale, DynamicScaleFromAbsMax(amax, a.min_abs, a.min_scale));
    } else {
      uint2* o_row = reinterpret_cast<uint2*>(static_cast<uint8_t*>(a.output) + row * a.output_stride);
      if constexpr (kOut == RowOutput::kFp8PerGroup) {
        const int lanes_per_group = a.group_size >> 3;
#pragma unroll
        for (int i = 0; i < kVecs; ++i) {
          const int c = i * blockDim.x + threadIdx.x;
          const uint4 n = normalized(i);
          const float gmax = LaneGroupAllReduce(AbsMax8<T>(n), lanes_per_group, MaxOp());
          const float scale = DynamicScaleFromAbsMax(gmax, a.min_abs, a.min_scale);
          if (c < num_vecs) {
            if ((c & (lanes_per_group - 1)) == 0) {
              a.scale[row * a.scale_token_stride + (c / lanes_per_group) * a.scale_group_stride] = scale;
            }
            o_row[c] = QuantizePackedToFp8x8<T>(n, ScaleOp::Make(scale, a.divide));
          }
        }
      } else if constexpr (kOut == RowOutput::kFp8Static) {
        const ScaleOp op = ScaleOp::Make(__ldg(a.scale), a.divide);
#pragma unroll
        for (int i = 0; i < kVecs; ++i) {
          const int c = i * blockDim.x + threadIdx.x;
          const uint4 n = normalized(i);
          if (c < num_vecs) o_row[c] = QuantizePackedToFp8x8<T>(n, op);
        }
      } else {
        static_assert(kOut == RowOutput::kFp8PerToken, "unhandled RowOutput");
        // Pass 1: n (kept packed in x) and its absolute maximum.
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < kVecs; ++i) {
          x[i] = normalized(i);
          amax = fmaxf(amax, AbsMax8<T>(x[i]));
        }
        amax = BlockAllReduce(amax, max_partials[parity], MaxOp());
        if (a.scale_upper_bound != nullptr) amax = fminf(amax, __ldg(a.scale_upper_bound));
        const float scale = DynamicScaleFromAbsMax(amax, a.min_abs, a.min_scale);
        if (threadIdx.x == 0) a.scale[row * a.scale_token_stride] = scale;
        const ScaleOp op = ScaleOp::Make(scale, a.divide);
        // Pass 2: quantize n.
#pragma unroll
        for (int i = 0; i < kVecs; ++i) {
          const int c = i * blockDim.x + threadIdx.x;
          if (c < num_vecs) o_row[c] = QuantizePackedToFp8x8<T>(x[i], op);
        }
      }
    }
  };

  if (stages == 0) {
    // Direct path: one row per CTA (grid = T), 16-byte loads straight into registers.
    const int64_t row = blockIdx.x;
    const uint4* x_row = reinterpret_cast<const uint4*>(static_cast<const T*>(a.input) + row * a.input_stride);
    const uint4* r_row = nullptr;
    if constexpr (kResidual) {
      r_row = reinterpret_cast<const uint4*>(static_cast<const T*>(a.residual) + row * a.residual_stride);
    }
    uint4 x[kVecs], r[kVecs];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int c = i * blockDim.x + threadIdx.x;
      x[i] = r[i] = make_uint4(0, 0, 0, 0);
      if (c < num_vecs) {
        x[i] = x_row[c];
        if constexpr (kResidual) r[i] = r_row[c];
      }
    }
    process_row(row, 0, x, r);
    return;
  }

  // Pipelined path: persistent CTAs, rows copied into shared memory `stages - 1` rows ahead.
  for (int k = 0; k < stages - 1; ++k) prefetch(blockIdx.x + static_cast<int64_t>(k) * gridDim.x, k);
  int stage = 0;
  int parity = 0;
  for (int64_t row = blockIdx.x; row < a.num_rows; row += gridDim.x, parity ^= 1) {
    // Refill the slot the previous row used (its values are in registers already), then wait
    // for this row's copies.
    prefetch(row + static_cast<int64_t>(stages - 1) * gridDim.x, (stage + stages - 1) % stages);
    CpAsyncWaitGroups(stages - 1);
    uint4 x[kVecs], r[kVecs];
    {
      const uint4* slot = row_stages + stage * kArrays * array_stride + threadIdx.x;
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int c = i * blockDim.x + threadIdx.x;
        x[i] = r[i] = make_uint4(0, 0, 0, 0);
        if (c < num_vecs) {
          x[i] = slot[i * blockDim.x];
          if constexpr (kResidual) r[i] = slot[array_stride + i * blockDim.x];
        }
      }
    }
    stage = stage + 1 == stages ? 0 : stage + 1;
    process_row(row, parity, x, r);
  }
}

// Row kernel, scalar path: same math and rounding points as RowKernelVectorized for any H and
// alignment. Element j of the row is handled by thread j % blockDim.x in every pass (per-group:
// by warp-strided groups in the last pass), so in-place outputs and the residual write are
// read-before-write within one thread.
template <typename T, bool kResidual, bool kNorm, RowOutput kOut>
__global__ void __launch_bounds__(1024) RowKernelScalar(const RowKernelArgs a) {
  static_assert(kNorm || !kResidual, "a residual add is only fused with a normalization");
  allowDependentGrids();
  waitForPrecedingGrid();
  using Num = D16<T>;
  const int64_t row = blockIdx.x;
  const int hidden = a.hidden;
  const T* x_row = static_cast<const T*>(a.input) + row * a.input_stride;
  const T* r_row = nullptr;
  T* r_out_row = nullptr;
  if constexpr (kResidual) {
    r_row = static_cast<const T*>(a.residual) + row * a.residual_stride;
    r_out_row = static_cast<T*>(a.residual_out) + row * a.residual_out_stride;
  }
  const T* w = static_cast<const T*>(a.weight);

  // Source value s of element j; `sum` receives the unrounded residual sum (or x).
  const auto source = [&](int j, float& sum) -> float {
    const float x = Num::ToFloat(x_row[j]);
    if constexpr (kResidual) {
      sum = x + Num::ToFloat(r_row[j]);
      return a.residual_unrounded ? sum : Round16<T>(sum);
    } else {
      sum = x;
      return x;
    }
  };

  float inv = 1.0f;
  if constexpr (kNorm) {
    float sum_sq = 0.0f;
    for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
      float sum;
      const float v = source(j, sum);
      sum_sq += v * v;
    }
    __shared__ float sum_partials[32];
    sum_sq = BlockAllReduce(sum_sq, sum_partials, SumOp());
    inv = rsqrtf(sum_sq / static_cast<float>(hidden) + a.epsilon);
  }
  // Normalized value n of element j from its source value.
  const auto normalized = [&](int j, float v) -> float {
    if constexpr (kNorm) {
      const float scaled = Round16<T>(v * inv);
      return w != nullptr ? Round16<T>(scaled * Num::ToFloat(w[j])) : scaled;
    } else {
      return v;
    }
  };

  if constexpr (kOut == RowOutput::kFp8PerGroup) {
    uint8_t* o_row = static_cast<uint8_t*>(a.output) + row * a.output_stride;
    const int lane = threadIdx.x & 31;
    const int num_warps = blockDim.x >> 5;
    const int num_groups = hidden / a.group_size;
    for (int k = threadIdx.x >> 5; k < num_groups; k += num_warps) {
      const int begin = k * a.group_size;
      const int end = begin + a.group_size;
      float gmax = 0.0f;
      for (int j = begin + lane; j < end; j += 32) {
        float sum;
        gmax = fmaxf(gmax, fabsf(normalized(j, source(j, sum))));
      }
      gmax = WarpAllReduce(gmax, MaxOp());
      const float scale = DynamicScaleFromAbsMax(gmax, a.min_abs, a.min_scale);
      if (lane == 0) a.scale[row * a.scale_token_stride + k * a.scale_group_stride] = scale;
      const ScaleOp op = ScaleOp::Make(scale, a.divide);
      for (int j = begin + lane; j < end; j += 32) {
        float sum;
        const float v = source(j, sum);
        if constexpr (kResidual) r_out_row[j] = Num::FromFloat(sum);
        o_row[j] = QuantizeToFp8(normalized(j, v), op);
      }
    }
  } else if constexpr (kOut == RowOutput::kTensorAbsMax) {
    float amax = 0.0f;
    for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
      float sum;
      amax = fmaxf(amax, fabsf(normalized(j, source(j, sum))));
    }
    __shared__ float max_partials[32];
    amax = BlockAllReduce(amax, max_partials, MaxOp());
    if (threadIdx.x == 0) {
      RaiseTensorScale(a.scale, DynamicScaleFromAbsMax(amax, a.min_abs, a.min_scale));
    }
  } else {
    ScaleOp op{false, 1.0f};
    if constexpr (kOut == RowOutput::kFp8Static) {
      op = ScaleOp::Make(__ldg(a.scale), a.divide);
    } else if constexpr (kOut == RowOutput::kFp8PerToken) {
      float amax = 0.0f;
      for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
        float sum;
        amax = fmaxf(amax, fabsf(normalized(j, source(j, sum))));
      }
      __shared__ float max_partials[32];
      amax = BlockAllReduce(amax, max_partials, MaxOp());
      if (a.scale_upper_bound != nullptr) amax = fminf(amax, __ldg(a.scale_upper_bound));
      const float scale = DynamicScaleFromAbsMax(amax, a.min_abs, a.min_scale);
      if (threadIdx.x == 0) a.scale[row * a.scale_token_stride] = scale;
      op = ScaleOp::Make(scale, a.divide);
    }
    for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
      float sum;
      const float v = source(j, sum);
      if constexpr (kResidual) r_out_row[j] = Num::FromFloat(sum);
      const float n = normalized(j, v);
      if constexpr (kOut == RowOutput::kD16) {
        static_cast<T*>(a.output)[row * a.output_stride + j] = Num::FromFloat(n);
      } else {
        static_cast<uint8_t*>(a.output)[row * a.output_stride + j] = QuantizeToFp8(n, op);
      }
    }
  }
}

// Host: a launch error (bad configuration, or an earlier asynchronous fault) as a Status.
// A launch's own error as a Status (the caller's CheckLaunch names the kernel).
inline Status LaunchStatus(cudaError_t err) {
  return err == cudaSuccess ? Status::Ok() : Status::CudaError(std::string("launch: ") + cudaGetErrorString(err));
}

inline Status CheckLaunch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    return Status::CudaError(std::string(kernel) + ": " + cudaGetErrorName(err) + ": " +
                             cudaGetErrorString(err));
  }
  return Status::Ok();
}

// Host: CTAs of `kernel` with `threads` threads and `smem_bytes` of dynamic shared memory that
// fit on one multiprocessor (cached per kernel and block size, which determines the shared
// memory; every device of a process is assumed to be the same model).
template <typename Kernel>
Status ResidentCtasPerSm(Kernel kernel, int threads, int smem_bytes, std::atomic<int> (&cache)[33], int* per_sm) {
  const int slot = threads / 32;
  int value = cache[slot].load(std::memory_order_relaxed);
  if (value == 0) {
    const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&value, kernel, threads, smem_bytes);
    if (err != cudaSuccess) {
      return Status::CudaError(std::string("cudaOccupancyMaxActiveBlocksPerMultiprocessor: ") +
                               cudaGetErrorString(err));
    }
    value = value < 1 ? 1 : value;
    cache[slot].store(value, std::memory_order_relaxed);
  }
  *per_sm = value;
  return Status::Ok();
}

// Host: grid of a persistent row kernel: one CTA per row while the rows fit on the device at
// once, else as many CTAs as are resident, each taking an equal share of the rows.
template <typename Kernel>
Status PersistentGrid(Kernel kernel, int64_t num_rows, int threads, int smem_bytes, int sm_count,
                      std::atomic<int> (&cache)[33], unsigned int* grid) {
  if (num_rows <= sm_count) {
    *grid = static_cast<unsigned int>(num_rows);
    return Status::Ok();
  }
  int per_sm = 0;
  FXFUSE_KERNELS_RETURN_IF_ERROR(ResidentCtasPerSm(kernel, threads, smem_bytes, cache, &per_sm));
  const int64_t resident = static_cast<int64_t>(per_sm) * sm_count;
  const int64_t rows_per_cta = (num_rows + resident - 1) / resident;
  *grid = static_cast<unsigned int>((num_rows + rows_per_cta - 1) / rows_per_cta);
  return Status::Ok();
}

// Host: pipeline depth of the 16-byte row kernel: the requested rows in shared memory, fewer if
// a CTA would exceed about half the multiprocessor's shared memory (so two CTAs fit), at least 1.
inline int RowStages(int requested, int64_t stage_bytes) {
  constexpr int64_t kBudget = 110 * 1024;
  int stages = static_cast<int>(kBudget / stage_bytes);
  if (stages > requested) stages = requested;
  if (stages < 1) stages = 1;
  return stages;
}

template <typename T, int kVecs, bool kResidual, bool kNorm, RowOutput kOut>
Status LaunchRowKernelVectorized(RowKernelArgs args, int threads, int requested_stages, int sm_count,
                                 cudaStream_t stream) {
  static std::atomic<int> occupancy_cache[33] = {};
  static std::atomic<bool> attributes_set{false};
  const auto kernel = RowKernelVectorized<T, kVecs, kResidual, kNorm, kOut>;
  args.l2_prefetch = RowL2Prefetch();
  if (requested_stages == 0) {  // one row per CTA
    args.stages = 0;
    return LaunchStatus(LaunchProgrammatic(kernel, dim3(static_cast<unsigned int>(args.num_rows)), dim3(threads), 0,
                                           stream, args));
  }
  const int64_t stage_bytes = RowStageBytes(kVecs, threads, kResidual);
  args.stages = RowStages(requested_stages, stage_bytes);
  const int64_t smem = stage_bytes * args.stages;
  if (!attributes_set.load(std::memory_order_relaxed)) {
    // Allow the largest stage buffers any launch of this kernel may use, and prefer shared
    // memory over L1 so the occupancy the grid is sized for is the one the driver picks.
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    if (err == cudaSuccess) {
      err = cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
    }
    if (err != cudaSuccess) {
      return Status::CudaError(std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(err));
    }
    attributes_set.store(true, std::memory_order_relaxed);
  }
  unsigned int grid = 0;
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      PersistentGrid(kernel, args.num_rows, threads, static_cast<int>(smem), sm_count, occupancy_cache, &grid));
  return LaunchStatus(LaunchProgrammatic(kernel, dim3(grid), dim3(threads), static_cast<size_t>(smem), stream, args));
}

// Host: launches the row kernel variant chosen by `config` over `num_tokens` rows.
template <typename T, bool kResidual, bool kNorm, RowOutput kOut>
Status LaunchRowKernel(const char* name, int64_t num_tokens, const internal::RowLaunchConfig& config,
                       const RowKernelArgs& in_args, cudaStream_t stream) {
  RowKernelArgs args = in_args;
  args.num_rows = num_tokens;
  const int threads = config.threads;
  const int stages = config.pipeline_stages;
  if (!config.vectorized) {
    FXFUSE_KERNELS_RETURN_IF_ERROR(LaunchStatus(LaunchProgrammatic(RowKernelScalar<T, kResidual, kNorm, kOut>,
                                                                   dim3(static_cast<unsigned int>(num_tokens)),
                                                                   dim3(threads), 0, stream, args)));
  } else {
    const Status status = [&]() -> Status {
      switch (config.vecs_per_thread) {
        case 1:
          return LaunchRowKernelVectorized<T, 1, kResidual, kNorm, kOut>(args, threads, stages, config.sm_count, stream);
        case 2:
          return LaunchRowKernelVectorized<T, 2, kResidual, kNorm, kOut>(args, threads, stages, config.sm_count, stream);
        case 4:
          return LaunchRowKernelVectorized<T, 4, kResidual, kNorm, kOut>(args, threads, stages, config.sm_count, stream);
        case 8:
          return LaunchRowKernelVectorized<T, 8, kResidual, kNorm, kOut>(args, threads, stages, config.sm_count, stream);
        default:
          return Status::InvalidArgument(std::string(name) + ": unsupported vecs_per_thread " +
                                         std::to_string(config.vecs_per_thread));
      }
    }();
    if (!status.ok()) return status.code() == StatusCode::kInvalidArgument
                                 ? status
                                 : Status::CudaError(std::string(name) + ": " + status.message());
  }
  return CheckLaunch(name);
}

template <bool kResidual, bool kNorm, RowOutput kOut>
Status LaunchRowKernelForDType(const char* name, DType dtype, int64_t num_tokens,
                               const internal::RowLaunchConfig& config, const RowKernelArgs& args,
                               cudaStream_t stream) {
  switch (dtype) {
    case DType::BF16:
      return LaunchRowKernel<__nv_bfloat16, kResidual, kNorm, kOut>(name, num_tokens, config, args,
                                                                    stream);
    case DType::F16:
      return LaunchRowKernel<__half, kResidual, kNorm, kOut>(name, num_tokens, config, args, stream);
    default:
      return Status::InvalidArgument(std::string(name) + ": unsupported dtype " + DTypeName(dtype));
  }
}

// Host: rows of `elem_bytes` elements usable with 16-byte (D16) / 8-byte (FP8) vectors.
inline bool RowsVectorizable(const void* ptr, int64_t stride, int elem_bytes) {
  return internal::IsAligned(ptr, 8 * elem_bytes) && stride % 8 == 0;
}

}  // namespace fxfuse::kernels::device

#endif  // FXFUSE_KERNELS_DEVICE_ROW_KERNELS_CUH_
