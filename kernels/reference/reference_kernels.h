// CPU reference of every kernel family: same params structs, host pointers, same semantics
// (rounding points, scale application, residual variance, scale floors) as the CUDA kernels.
// Differences from the GPU are limited to the fp32 reduction order and rsqrtf/expf accuracy:
// the reference computes sum(x^2)/H and 1/sqrt(var + eps) in double, silu with std::exp.
#ifndef FXFUSE_KERNELS_REFERENCE_REFERENCE_KERNELS_H_
#define FXFUSE_KERNELS_REFERENCE_REFERENCE_KERNELS_H_

#include "kernels/quant_fp8.h"
#include "kernels/rms_norm.h"
#include "kernels/rms_norm_quant_fp8.h"
#include "kernels/silu_and_mul.h"
#include "kernels/status.h"

namespace fxfuse::kernels::reference {

// Each runs params.Check() and then the op on host memory (every pointer in params is a host
// pointer). Outputs and in/out buffers are written exactly where the kernel writes them.
Status RmsNorm(const RmsNormParams& params);
Status QuantFp8(const QuantFp8Params& params);
Status RmsNormQuantFp8(const RmsNormQuantFp8Params& params);
Status SiluAndMul(const SiluAndMulParams& params);

// inv = 1 / sqrt(sum(s^2) / n + eps) of n fp32 values, in double, rounded to fp32.
float RmsInverse(const float* values, int64_t n, float epsilon);
// silu(g) = g / (1 + exp(-g)) in fp32.
float Silu(float gate);

}  // namespace fxfuse::kernels::reference

#endif  // FXFUSE_KERNELS_REFERENCE_REFERENCE_KERNELS_H_
