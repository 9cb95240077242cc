// CPU reference of the fused all-reduce + RMSNorm: the simulated all-reduce, then the RmsNorm
// and FP8 references.
#include "kernels/reference/all_reduce_rms_norm_reference.h"

#include <cstring>

#include "kernels/reference/numerics.h"
#include "kernels/reference/reference_kernels.h"

namespace fxfuse::kernels::reference {

std::vector<uint16_t> AllReduceSum(const std::vector<const uint16_t*>& rank_inputs, int64_t num_elements,
                                   DType dtype) {
  std::vector<uint16_t> a(num_elements);
  for (int64_t i = 0; i < num_elements; ++i) {
    float sum = D16BitsToFloat(rank_inputs[0][i], dtype);
    for (size_t r = 1; r < rank_inputs.size(); ++r) sum += D16BitsToFloat(rank_inputs[r][i], dtype);
    a[i] = FloatToD16Bits(sum, dtype);
  }
  return a;
}

Status AllReduceRmsNorm(const AllReduceRmsNormParams& p, const std::vector<const uint16_t*>& rank_inputs) {
  AllReduceRmsNormParams checked = p;
  checked.workspace = AllReduceWorkspace();  // world size 1: no peers to check
  checked.input = rank_inputs.empty() ? nullptr : rank_inputs[0];
  FXFUSE_KERNELS_RETURN_IF_ERROR(checked.Check());
  if (rank_inputs.empty() || static_cast<int>(rank_inputs.size()) > kMaxAllReduceRanks) {
    return Status::InvalidArgument("all_reduce_rms_norm reference: 1..8 rank inputs expected");
  }
  const int64_t count = p.num_tokens * p.hidden_size;
  const std::vector<uint16_t> a = AllReduceSum(rank_inputs, count, p.dtype);
  if (p.allreduce_out != nullptr) std::memcpy(p.allreduce_out, a.data(), count * sizeof(uint16_t));

  std::vector<uint16_t> n(count);
  RmsNormParams norm;
  norm.num_tokens = p.num_tokens;
  norm.hidden_size = p.hidden_size;
  norm.dtype = p.dtype;
  norm.weight_dtype = p.dtype;
  norm.input = a.data();
  norm.weight = p.weight;
  norm.output = n.data();
  norm.residual = p.residual;
  norm.residual_variance = ResidualVariance::kRoundedSum;
  norm.epsilon = p.epsilon;
  FXFUSE_KERNELS_RETURN_IF_ERROR(RmsNorm(norm));
  if (p.norm_out != nullptr) std::memcpy(p.norm_out, n.data(), count * sizeof(uint16_t));
  if (p.quant_out != nullptr) {
    uint8_t* q = static_cast<uint8_t*>(p.quant_out);
    for (int64_t i = 0; i < count; ++i) {
      q[i] = QuantizeToE4m3(D16BitsToFloat(n[i], p.dtype), *p.scale, /*divide=*/false);
    }
  }
  return Status::Ok();
}

}  // namespace fxfuse::kernels::reference
