// Row kernels: one CTA per row of [T, H] for RMSNorm (with optional residual add) and FP8
// quantization, fused or not. Two paths compute the same math:
//   RowKernelVectorized: 16-byte loads/stores, the whole row kept in registers between the
//     reduction(s) and the output pass (each input byte read once);
//   RowKernelScalar: element loads, any H and alignment; the row is streamed two or three times
//     (the later passes mostly hit L2).
// Included only by the .cu files that instantiate the variants they launch.
#ifndef FXFUSE_KERNELS_DEVICE_ROW_KERNELS_CUH_
#define FXFUSE_KERNELS_DEVICE_ROW_KERNELS_CUH_

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/device/numeric.cuh"
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
  int hidden = 0;
  const void* input = nullptr;  // [T, H] D16
  int64_t input_stride = 0;
  void* residual = nullptr;     // [T, H] D16, in/out (kResidual only)
  int64_t residual_stride = 0;
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
};

// Dynamic per-tensor, pass 1: raise *scale (zeroed before) to this row's dynamic scale. Scales
// are >= 0, so their bit patterns order like the values; reading first skips most atomics.
__device__ __forceinline__ void RaiseTensorScale(float* scale, float row_scale) {
  unsigned int* target = reinterpret_cast<unsigned int*>(scale);
  const unsigned int bits = __float_as_uint(row_scale);
  if (bits > *reinterpret_cast<volatile unsigned int*>(target)) atomicMax(target, bits);
}

// Row kernel, 16-byte path. One row per CTA; thread t owns vectors c = i * blockDim.x + t
// (i < kVecs) of 8 elements each, so a group of g elements is g/8 consecutive lanes.
// Rounding points (s: source value of an element):
//   kResidual: v = float(x) + float(r) (fp32); residual <- round16(v);
//              s = v (residual_unrounded) or round16(v)
//   otherwise: s = float(x)
//   kNorm:     inv = rsqrtf(sum(s^2) / H + eps);  n = round16(round16(s * inv) * float(w))
//              (no weight: n = round16(s * inv))
//   otherwise: n = s
//   kFp8*:     q = fp8(clamp(n * (1/scale) or n / scale, -448, 448)), RNE, NaN kept
template <typename T, int kVecs, bool kResidual, bool kNorm, RowOutput kOut>
__global__ void __launch_bounds__(internal::MaxThreadsForVecsPerThread(kVecs))
    RowKernelVectorized(const RowKernelArgs a) {
  static_assert(kNorm || !kResidual, "a residual add is only fused with a normalization");
  const int64_t row = blockIdx.x;
  const int num_vecs = a.hidden >> 3;
  const uint4* x_row =
      reinterpret_cast<const uint4*>(static_cast<const T*>(a.input) + row * a.input_stride);
  uint4* r_row = nullptr;
  if constexpr (kResidual) {
    r_row = reinterpret_cast<uint4*>(static_cast<T*>(a.residual) + row * a.residual_stride);
  }

  // Issue every load of the row before using any of it.
  uint4 x_raw[kVecs];
  uint4 r_raw[kVecs];
  uint4 w_raw[kVecs];
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int c = i * blockDim.x + threadIdx.x;
    x_raw[i] = r_raw[i] = w_raw[i] = make_uint4(0, 0, 0, 0);
    if (c < num_vecs) {
      x_raw[i] = x_row[c];
      if constexpr (kResidual) r_raw[i] = r_row[c];
      if (kNorm && a.weight != nullptr) w_raw[i] = __ldg(static_cast<const uint4*>(a.weight) + c);
    }
  }

  // Residual add (written back at once) and source values; out-of-row slots hold zeros.
  float s[kVecs][8];
  float sum_sq = 0.0f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    Unpack8<T>(x_raw[i], s[i]);
    if constexpr (kResidual) {
      const int c = i * blockDim.x + threadIdx.x;
      float r[8];
      Unpack8<T>(r_raw[i], r);
#pragma unroll
      for (int j = 0; j < 8; ++j) s[i][j] += r[j];
      if (c < num_vecs) r_row[c] = Pack8<T>(s[i]);
      if (!a.residual_unrounded) {
#pragma unroll
        for (int j = 0; j < 8; ++j) s[i][j] = Round16<T>(s[i][j]);
      }
    }
    if constexpr (kNorm) {
#pragma unroll
      for (int j = 0; j < 8; ++j) sum_sq += s[i][j] * s[i][j];
    }
  }

  if constexpr (kNorm) {
    __shared__ float sum_partials[32];
    sum_sq = BlockAllReduce(sum_sq, sum_partials, SumOp());
    const float inv = rsqrtf(sum_sq / static_cast<float>(a.hidden) + a.epsilon);
    if (a.weight != nullptr) {
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        float w[8];
        Unpack8<T>(w_raw[i], w);
#pragma unroll
        for (int j = 0; j < 8; ++j) s[i][j] = Round16<T>(Round16<T>(s[i][j] * inv) * w[j]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
#pragma unroll
        for (int j = 0; j < 8; ++j) s[i][j] = Round16<T>(s[i][j] * inv);
      }
    }
  }

  if constexpr (kOut == RowOutput::kD16) {
    uint4* o_row = reinterpret_cast<uint4*>(static_cast<T*>(a.output) + row * a.output_stride);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const int c = i * blockDim.x + threadIdx.x;
      if (c < num_vecs) o_row[c] = Pack8<T>(s[i]);
    }
  } else if constexpr (kOut == RowOutput::kTensorAbsMax) {
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(s[i][j]));
    }
    __shared__ float max_partials[32];
    amax = BlockAllReduce(amax, max_partials, MaxOp());
    if (threadIdx.x == 0) RaiseTensorScale(a.scale, DynamicScaleFromAbsMax(amax, a.min_abs, a.min_scale));
  } else {
    uint2* o_row = reinterpret_cast<uint2*>(static_cast<uint8_t*>(a.output) + row * a.output_stride);
    if constexpr (kOut == RowOutput::kFp8PerGroup) {
      const int lanes_per_group = a.group_size >> 3;
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int c = i * blockDim.x + threadIdx.x;
        float gmax = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) gmax = fmaxf(gmax, fabsf(s[i][j]));
        gmax = LaneGroupAllReduce(gmax, lanes_per_group, MaxOp());
        const float scale = DynamicScaleFromAbsMax(gmax, a.min_abs, a.min_scale);
        if (c < num_vecs) {
          if ((c & (lanes_per_group - 1)) == 0) {
            a.scale[row * a.scale_token_stride + (c / lanes_per_group) * a.scale_group_stride] = scale;
          }
          o_row[c] = QuantizeToFp8x8(s[i], ScaleOp::Make(scale, a.divide));
        }
      }
    } else {
      float scale;
      if constexpr (kOut == RowOutput::kFp8Static) {
        scale = __ldg(a.scale);
      } else {
        static_assert(kOut == RowOutput::kFp8PerToken, "unhandled RowOutput");
        float amax = 0.0f;
#pragma unroll
        for (int i = 0; i < kVecs; ++i) {
#pragma unroll
          for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(s[i][j]));
        }
        __shared__ float max_partials[32];
        amax = BlockAllReduce(amax, max_partials, MaxOp());
        if (a.scale_upper_bound != nullptr) amax = fminf(amax, __ldg(a.scale_upper_bound));
        scale = DynamicScaleFromAbsMax(amax, a.min_abs, a.min_scale);
        if (threadIdx.x == 0) a.scale[row * a.scale_token_stride] = scale;
      }
      const ScaleOp op = ScaleOp::Make(scale, a.divide);
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const int c = i * blockDim.x + threadIdx.x;
        if (c < num_vecs) o_row[c] = QuantizeToFp8x8(s[i], op);
      }
    }
  }
}

// Row kernel, scalar path: same math and rounding points as RowKernelVectorized for any H and
// alignment. Element j of the row is handled by thread j % blockDim.x in every pass (per-group:
// by warp-strided groups in the last pass), so in-place outputs and the residual write are
// read-before-write within one thread.
template <typename T, bool kResidual, bool kNorm, RowOutput kOut>
__global__ void __launch_bounds__(1024) RowKernelScalar(const RowKernelArgs a) {
  static_assert(kNorm || !kResidual, "a residual add is only fused with a normalization");
  using Num = D16<T>;
  const int64_t row = blockIdx.x;
  const int hidden = a.hidden;
  const T* x_row = static_cast<const T*>(a.input) + row * a.input_stride;
  T* r_row = nullptr;
  if constexpr (kResidual) r_row = static_cast<T*>(a.residual) + row * a.residual_stride;
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
        if constexpr (kResidual) r_row[j] = Num::FromFloat(sum);
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
      if constexpr (kResidual) r_row[j] = Num::FromFloat(sum);
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
inline Status CheckLaunch(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    return Status::CudaError(std::string(kernel) + ": " + cudaGetErrorName(err) + ": " +
                             cudaGetErrorString(err));
  }
  return Status::Ok();
}

// Host: launches the row kernel variant chosen by `config` over `num_tokens` rows.
template <typename T, bool kResidual, bool kNorm, RowOutput kOut>
Status LaunchRowKernel(const char* name, int64_t num_tokens, const internal::RowLaunchConfig& config,
                       const RowKernelArgs& args, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned int>(num_tokens));
  const dim3 block(static_cast<unsigned int>(config.threads));
  if (!config.vectorized) {
    RowKernelScalar<T, kResidual, kNorm, kOut><<<grid, block, 0, stream>>>(args);
  } else {
    switch (config.vecs_per_thread) {
      case 1:
        RowKernelVectorized<T, 1, kResidual, kNorm, kOut><<<grid, block, 0, stream>>>(args);
        break;
      case 2:
        RowKernelVectorized<T, 2, kResidual, kNorm, kOut><<<grid, block, 0, stream>>>(args);
        break;
      case 4:
        RowKernelVectorized<T, 4, kResidual, kNorm, kOut><<<grid, block, 0, stream>>>(args);
        break;
      case 8:
        RowKernelVectorized<T, 8, kResidual, kNorm, kOut><<<grid, block, 0, stream>>>(args);
        break;
      default:
        return Status::InvalidArgument(std::string(name) + ": unsupported vecs_per_thread " +
                                       std::to_string(config.vecs_per_thread));
    }
  }
  return CheckLaunch(name);
}

template <bool kResidual, bool kNorm, RowOutput kOut>
Status LaunchRowKernelForDType(const char* name, DType dtype, int64_t num_tokens,
                               const internal::RowLaunchConfig& config, const RowKernelArgs& args,
                               cudaStream_t stream) {
  switch (dtype) {
    case DType::kBFloat16:
      return LaunchRowKernel<__nv_bfloat16, kResidual, kNorm, kOut>(name, num_tokens, config, args,
                                                                    stream);
    case DType::kFloat16:
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
