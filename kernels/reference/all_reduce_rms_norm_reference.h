// CPU reference of the fused all-reduce + (residual) + RMSNorm (+ FP8) with the all-reduce
// simulated: N ranks' inputs in, one rank's outputs out (host pointers throughout).
#ifndef FXFUSE_KERNELS_REFERENCE_ALL_REDUCE_RMS_NORM_REFERENCE_H_
#define FXFUSE_KERNELS_REFERENCE_ALL_REDUCE_RMS_NORM_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "kernels/all_reduce_rms_norm.h"

namespace fxfuse::kernels::reference {

// a = round16(x_0 + x_1 + ... + x_{N-1}) per element, the sum in fp32 from rank 0's value in
// rank order (N = rank_inputs.size(), each a [T, H] D16 host array).
std::vector<uint16_t> AllReduceSum(const std::vector<const uint16_t*>& rank_inputs, int64_t num_elements, DType dtype);

// The outputs of one rank for `params` (host pointers; params.input and params.workspace are
// ignored: the inputs are `rank_inputs`): allreduce_out <- a, then exactly reference::RmsNorm
// with the residual (kRoundedSum) on a, norm_out <- n, quant_out <- fp8(clamp(n * (1/scale))).
Status AllReduceRmsNorm(const AllReduceRmsNormParams& params, const std::vector<const uint16_t*>& rank_inputs);

}  // namespace fxfuse::kernels::reference

#endif  // FXFUSE_KERNELS_REFERENCE_ALL_REDUCE_RMS_NORM_REFERENCE_H_
