// Host side of the fused all-reduce + RMSNorm API (no device code): algorithm names, Check(),
// workspace size, and which algorithm a call resolves to.
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/all_reduce_rms_norm.h"
#include "kernels/allreduce/workspace_layout.h"
#include "kernels/internal/launch_config.h"

namespace fxfuse::kernels {
namespace {

constexpr const char* kOp = "all_reduce_rms_norm";

Status Invalid(const std::string& what) { return Status::InvalidArgument(std::string(kOp) + ": " + what); }

}  // namespace

const char* AllReduceAlgorithmName(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kAuto:
      return "auto";
    case AllReduceAlgorithm::kOneShot:
      return "one_shot";
    case AllReduceAlgorithm::kTwoShot:
      return "two_shot";
    case AllReduceAlgorithm::kNcclFallback:
      return "nccl_fallback";
  }
  return "unknown";
}

int64_t AllReduceWorkspaceBytes(int world_size, int64_t max_tokens, int64_t hidden_size) {
  return allreduce::WorkspaceLayout::For(world_size, max_tokens, hidden_size).total_bytes;
}

Status AllReduceRmsNormParams::Check() const {
  const AllReduceWorkspace& w = workspace;
  if (w.world_size < 1 || w.world_size > kMaxAllReduceRanks) {
    return Invalid("workspace.world_size must be in [1, " + std::to_string(kMaxAllReduceRanks) + "], got " +
                   std::to_string(w.world_size));
  }
  if (w.rank < 0 || w.rank >= w.world_size) {
    return Invalid("workspace.rank must be in [0, world_size), got " + std::to_string(w.rank));
  }
  if (num_tokens < 0 || num_tokens > INT32_MAX) {
    return Invalid("num_tokens must be in [0, 2^31-1], got " + std::to_string(num_tokens));
  }
  if (hidden_size < 1 || hidden_size > (int64_t{1} << 30)) {
    return Invalid("hidden_size must be in [1, 2^30], got " + std::to_string(hidden_size));
  }
  if (!IsD16(dtype)) return Invalid(std::string("dtype must be bfloat16 or float16, got ") + DTypeName(dtype));
  if (num_tokens > 0 && input == nullptr) return Invalid("input is null");
  if (quant_out != nullptr && scale == nullptr) return Invalid("quant_out needs scale");
  if (!(epsilon >= 0.0f) || !std::isfinite(epsilon)) {
    return Invalid("epsilon must be finite and >= 0, got " + std::to_string(epsilon));
  }
  if (max_ctas < 0) return Invalid("max_ctas must be >= 0, got " + std::to_string(max_ctas));
  if (residual != nullptr && (residual == input || residual == allreduce_out || residual == norm_out)) {
    return Invalid("residual must not alias input, allreduce_out or norm_out");
  }
  if (quant_out != nullptr && (quant_out == input || quant_out == residual)) {
    return Invalid("quant_out must not alias input or residual");
  }
  if (algorithm != AllReduceAlgorithm::kAuto && algorithm != AllReduceAlgorithm::kOneShot &&
      algorithm != AllReduceAlgorithm::kTwoShot && algorithm != AllReduceAlgorithm::kNcclFallback) {
    return Invalid("algorithm out of range");
  }
  if (w.world_size > 1) {
    for (int r = 0; r < w.world_size; ++r) {
      if (w.peers[r] == nullptr) return Invalid("workspace.peers[" + std::to_string(r) + "] is null");
      if (!internal::IsAligned(w.peers[r], 16)) {
        return Invalid("workspace.peers[" + std::to_string(r) + "] is not 16-byte aligned");
      }
    }
    if (w.max_tokens < 0 || w.hidden_size < 1) {
      return Invalid("workspace.max_tokens must be >= 0 and workspace.hidden_size >= 1");
    }
    const int64_t need = AllReduceWorkspaceBytes(w.world_size, w.max_tokens, w.hidden_size);
    if (w.bytes < need) {
      return Invalid("workspace.bytes (" + std::to_string(w.bytes) + ") is below AllReduceWorkspaceBytes (" +
                     std::to_string(need) + ")");
    }
  }
  return Status::Ok();
}

AllReduceAlgorithm ResolveAllReduceAlgorithm(const AllReduceRmsNormParams& p) {
  const AllReduceWorkspace& w = p.workspace;
  AllReduceAlgorithm algorithm = p.algorithm;
  if (algorithm == AllReduceAlgorithm::kAuto) {
    algorithm = ChooseAllReduceAlgorithm(w.world_size, p.num_tokens, p.hidden_size, p.dtype);
  }
  if (algorithm == AllReduceAlgorithm::kNcclFallback) return algorithm;
  // The fused kernels move 16-byte vectors: H a multiple of 8, every tensor 16-byte aligned
  // (8 for the FP8 output).
  const auto aligned = [](const void* ptr, int bytes) { return ptr == nullptr || internal::IsAligned(ptr, bytes); };
  if (p.hidden_size % 8 != 0 || p.hidden_size > allreduce::kMaxFusedHidden || !aligned(p.input, 16) ||
      !aligned(p.residual, 16) || !aligned(p.allreduce_out, 16) || !aligned(p.weight, 16) ||
      !aligned(p.norm_out, 16) || !aligned(p.quant_out, 8)) {
    return AllReduceAlgorithm::kNcclFallback;
  }
  if (w.world_size == 1) return AllReduceAlgorithm::kOneShot;
  const allreduce::WorkspaceLayout layout = allreduce::WorkspaceLayout::For(w.world_size, w.max_tokens, w.hidden_size);
  if (algorithm == AllReduceAlgorithm::kOneShot && !layout.FitsOneShot(p.num_tokens, p.hidden_size)) {
    // The table's one-shot bound is below the one-shot region; a larger workspace row count
    // than the table assumed still fits the two-shot path.
    return p.algorithm == AllReduceAlgorithm::kAuto && layout.FitsTwoShot(p.num_tokens, p.hidden_size)
               ? AllReduceAlgorithm::kTwoShot
               : AllReduceAlgorithm::kNcclFallback;
  }
  if (algorithm == AllReduceAlgorithm::kTwoShot && !layout.FitsTwoShot(p.num_tokens, p.hidden_size)) {
    return AllReduceAlgorithm::kNcclFallback;
  }
  return algorithm;
}

}  // namespace fxfuse::kernels
