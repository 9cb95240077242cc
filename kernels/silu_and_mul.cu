// SiluAndMul entry point and kernels: silu_and_mul (D16 out) and silu_and_mul_quant (static FP8).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "kernels/device/numeric.cuh"
#include "kernels/device/row_kernels.cuh"
#include "kernels/internal/semantics.h"
#include "kernels/silu_and_mul.h"

namespace fxfuse::kernels {
namespace device {

struct SiluAndMulArgs {
  int64_t num_rows = 0;         // T
  int d = 0;                    // output width; input rows are [gate (d) | up (d)]
  const void* input = nullptr;  // [T, 2d] D16
  int64_t input_stride = 0;
  void* output = nullptr;  // [T, d] D16 or e4m3fn bytes
  int64_t output_stride = 0;
  const float* scale = nullptr;  // FP8 output: [1]
  bool divide = false;
  bool persistent = false;  // vectorized: walk rows with a stride of gridDim.x, next row prefetched
  int column_vecs = 0;      // vectorized, one row per CTA: vectors per CTA of its row (blockIdx.y); 0: all
};

// The vectors [begin, end) of a row that this CTA handles.
__device__ __forceinline__ int2 ColumnRange(const SiluAndMulArgs& a, int num_vecs) {
  if (a.column_vecs == 0) return make_int2(0, num_vecs);
  const int begin = static_cast<int>(blockIdx.y) * a.column_vecs;
  return make_int2(begin, min(num_vecs, begin + a.column_vecs));
}

template <typename T, int kVecs>
__device__ __forceinline__ void LoadGateUp(const SiluAndMulArgs& a, int64_t row, int2 cols, uint4 (&g)[kVecs],
                                           uint4 (&u)[kVecs]) {
  const bool valid_row = row < a.num_rows;
  const T* in_row = static_cast<const T*>(a.input) + row * a.input_stride;
  const uint4* gate = reinterpret_cast<const uint4*>(in_row);
  const uint4* up = reinterpret_cast<const uint4*>(in_row + a.d);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = cols.x + i * blockDim.x + threadIdx.x;
    g[i] = u[i] = make_uint4(0, 0, 0, 0);
    if (valid_row && c < cols.y) {
      g[i] = gate[c];
      u[i] = up[c];
    }
  }
}

// SiLU-and-mul, 16-byte path. One row per CTA (or per blockIdx.y-th column_vecs vectors of it),
// or (persistent) each CTA walks rows blockIdx.x, blockIdx.x + gridDim.x, ... and loads the next
// row's gate and up while it computes and stores the current one; thread t handles vectors
// c = begin + i * blockDim.x + t. Rounding: h as above; kFp8: q = fp8(clamp(h op s)).
template <typename T, int kVecs, bool kFp8>
__global__ void __launch_bounds__(internal::MaxThreadsForVecsPerThread(kVecs))
    SiluAndMulVectorized(const SiluAndMulArgs a) {
  allowDependentGrids();
  waitForPrecedingGrid();
  const int2 cols = ColumnRange(a, a.d >> 3);
  ScaleOp op{false, 1.0f};
  if constexpr (kFp8) op = ScaleOp::Make(__ldg(a.scale), a.divide);
  uint4 g_next[kVecs], u_next[kVecs];
  int64_t row = blockIdx.x;
  LoadGateUp<T, kVecs>(a, row, cols, g_next, u_next);
  const int64_t row_step = a.persistent ? gridDim.x : a.num_rows;  // one row per CTA otherwise
  for (; row < a.num_rows; row += row_step) {
    uint4 g_raw[kVecs], u_raw[kVecs];
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      g_raw[i] = g_next[i];
      u_raw[i] = u_next[i];
    }
    LoadGateUp<T, kVecs>(a, row + row_step, cols, g_next, u_next);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int c = cols.x + i * blockDim.x + threadIdx.x;
      if (c >= cols.y) continue;
      const uint4 h_packed = SiluMulPacked8<T>(g_raw[i], u_raw[i]);
      if constexpr (kFp8) {
        reinterpret_cast<uint2*>(static_cast<uint8_t*>(a.output) + row * a.output_stride)[c] =
            QuantizePackedToFp8x8<T>(h_packed, op);
      } else {
        reinterpret_cast<uint4*>(static_cast<T*>(a.output) + row * a.output_stride)[c] = h_packed;
      }
    }
  }
}

// SiLU-and-mul, scalar path (any d, any alignment): one row per CTA, element loads.
template <typename T, bool kFp8>
__global__ void __launch_bounds__(1024) SiluAndMulScalar(const SiluAndMulArgs a) {
  allowDependentGrids();
  waitForPrecedingGrid();
  using Num = D16<T>;
  const int64_t row = blockIdx.x;
  const T* in_row = static_cast<const T*>(a.input) + row * a.input_stride;
  ScaleOp op{false, 1.0f};
  if constexpr (kFp8) op = ScaleOp::Make(__ldg(a.scale), a.divide);
  for (int j = threadIdx.x; j < a.d; j += blockDim.x) {
    const float h = SiluMul<T>(Num::ToFloat(in_row[j]), Num::ToFloat(in_row[a.d + j]));
    if constexpr (kFp8) {
      static_cast<uint8_t*>(a.output)[row * a.output_stride + j] = QuantizeToFp8(h, op);
    } else {
      static_cast<T*>(a.output)[row * a.output_stride + j] = Num::FromFloat(h);
    }
  }
}

template <typename T, int kVecs, bool kFp8>
Status LaunchSiluVectorized(SiluAndMulArgs args, const internal::RowLaunchConfig& config, cudaStream_t stream) {
  static std::atomic<int> occupancy_cache[33] = {};
  const auto kernel = SiluAndMulVectorized<T, kVecs, kFp8>;
  const int threads = config.threads;
  args.persistent = config.pipeline_stages > 0;
  if (!args.persistent) {
    const int splits = std::max(1, config.column_splits);
    args.column_vecs = splits > 1 ? threads * kVecs : 0;
    return LaunchStatus(LaunchProgrammatic(kernel, dim3(static_cast<unsigned int>(args.num_rows), splits),
                                           dim3(threads), 0, stream, args));
  }
  unsigned int grid = 0;
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      PersistentGrid(kernel, args.num_rows, threads, 0, config.sm_count, occupancy_cache, &grid));
  return LaunchStatus(LaunchProgrammatic(kernel, dim3(grid), dim3(threads), 0, stream, args));
}

template <typename T, bool kFp8>
Status LaunchSiluAndMul(int64_t num_tokens, const internal::RowLaunchConfig& config,
                        const SiluAndMulArgs& args, cudaStream_t stream) {
  const char* name = kFp8 ? "silu_and_mul_quant" : "silu_and_mul";
  const int threads = config.threads;
  if (!config.vectorized) {
    FXFUSE_KERNELS_RETURN_IF_ERROR(LaunchStatus(LaunchProgrammatic(
        SiluAndMulScalar<T, kFp8>, dim3(static_cast<unsigned int>(num_tokens)), dim3(threads), 0, stream, args)));
  } else {
    const Status status = [&]() -> Status {
      switch (config.vecs_per_thread) {
        case 1:
          return LaunchSiluVectorized<T, 1, kFp8>(args, config, stream);
        case 2:
          return LaunchSiluVectorized<T, 2, kFp8>(args, config, stream);
        case 4:
          return LaunchSiluVectorized<T, 4, kFp8>(args, config, stream);
        case 8:
          return LaunchSiluVectorized<T, 8, kFp8>(args, config, stream);
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

template <typename T>
Status LaunchSiluAndMulForOutput(bool fp8, int64_t num_tokens, const internal::RowLaunchConfig& config,
                                 const SiluAndMulArgs& args, cudaStream_t stream) {
  return fp8 ? LaunchSiluAndMul<T, true>(num_tokens, config, args, stream)
             : LaunchSiluAndMul<T, false>(num_tokens, config, args, stream);
}

}  // namespace device

Status SiluAndMul(const SiluAndMulParams& p, cudaStream_t stream) {
  FXFUSE_KERNELS_RETURN_IF_ERROR(p.Check());
  if (p.num_tokens == 0) return Status::Ok();
  const int64_t d = p.hidden_size;
  const bool fp8 = p.output_dtype == DType::F8E4M3FN;
  device::SiluAndMulArgs a;
  a.num_rows = p.num_tokens;
  a.d = static_cast<int>(d);
  a.input = p.input;
  a.input_stride = internal::ResolveStride(p.input_row_stride, 2 * d);
  a.output = p.output;
  a.output_stride = internal::ResolveStride(p.output_row_stride, d);
  a.scale = p.scale;
  a.divide = SiluAndMulScaleDivides(p);
  const bool vectorizable = d % 8 == 0 && device::RowsVectorizable(a.input, a.input_stride, 2) &&
                            device::RowsVectorizable(a.output, a.output_stride, fp8 ? 1 : 2);
  int sm_count = 0;
  FXFUSE_KERNELS_RETURN_IF_ERROR(internal::CurrentDeviceSmCount(&sm_count));
  internal::RowLaunchConfig config;
  FXFUSE_KERNELS_RETURN_IF_ERROR(
      internal::ChooseRowLaunchConfig(p.num_tokens, d, vectorizable, sm_count, p.tuning, &config,
                                      internal::RowWork::kSiluAndMul));
  switch (p.dtype) {
    case DType::BF16:
      return device::LaunchSiluAndMulForOutput<__nv_bfloat16>(fp8, p.num_tokens, config, a, stream);
    case DType::F16:
      return device::LaunchSiluAndMulForOutput<__half>(fp8, p.num_tokens, config, a, stream);
    default:
      return Status::InvalidArgument(std::string("SiluAndMul: unsupported dtype ") + DTypeName(p.dtype));
  }
}

}  // namespace fxfuse::kernels
