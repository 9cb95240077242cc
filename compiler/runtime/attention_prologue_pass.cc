// The session's pass that takes rotary steps into the short attentions after them, once every
// step is prepared (attention_prologue.h).
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "compiler/lowering/lowering.h"
#include "compiler/runtime/attention_prologue.h"
#include "compiler/runtime/runtime.h"
#include "ir/status.h"

namespace fxfuse::runtime {

void Session::fuseAttentionPrologues() {
  prologue_lines_.clear();
  if (!AttentionPrologueFromEnv()) return;
  for (size_t si = 0; si + 1 < steps_.size(); ++si) {
    Prepared& rotation = *steps_[si];
    Prepared& attention = *steps_[si + 1];
    if (!rotation.rotation || !attention.attention) continue;
    const AttentionStep& a = *attention.attention;
    if (!lowering::onlyNextStepReads(plan_, static_cast<int>(si), rotation.rotation->output_tensor, a.out_tensor))
      continue;
    const auto fused = RotatedAttentionOf(rotation.rotation->params, a.params);
    if (!fused) continue;
    attention.run = [p = fused->first, r = fused->second, where = attention.where](cudaStream_t s) {
      if (const cudaError_t e = LaunchShortAttention(p, &r, s); e != cudaSuccess)
        fail("CUDA error in {}: {} ({})", where, cudaGetErrorString(e), cudaGetErrorName(e));
    };
    rotation.run = [](cudaStream_t) {};
    launches_--;
    prologue_lines_.push_back(fmt::format("{} into {}", rotation.where, attention.where));
  }
}

}  // namespace fxfuse::runtime
