// Launch-shape heuristics of the row kernels.
#include "kernels/internal/launch_config.h"

#include <algorithm>
#include <string>

namespace fxfuse::kernels::internal {

Status ChooseRowLaunchConfig(int64_t num_tokens, int64_t hidden_size, bool vectorizable,
                             int sm_count, const LaunchTuning& tuning, RowLaunchConfig* config,
                             RowWork work) {
  *config = RowLaunchConfig();
  config->sm_count = sm_count;
  const int v = tuning.vecs_per_thread;
  if (v != 0 && v != 1 && v != 2 && v != 4 && v != 8) {
    return Status::InvalidArgument("tuning.vecs_per_thread must be 0, 1, 2, 4 or 8, got " +
                                   std::to_string(v));
  }
  if (tuning.row_pipeline_stages < -1 || tuning.row_pipeline_stages > 3) {
    return Status::InvalidArgument("tuning.row_pipeline_stages must be -1..3, got " +
                                   std::to_string(tuning.row_pipeline_stages));
  }
  const auto round_up_32 = [](int64_t n) { return static_cast<int>((n + 31) / 32 * 32); };
  if (vectorizable && !tuning.force_scalar_path && hidden_size % 8 == 0 &&
      hidden_size <= kMaxVectorizedHidden) {
    const int64_t vecs = hidden_size / 8;
    int per_thread = v;
    int stages = 0;
    if (num_tokens < sm_count) {
      per_thread = 1;
    } else {
      switch (work) {
        case RowWork::kNormNoResidual:
          per_thread = hidden_size >= 8192 ? 8 : 4;
          break;
        case RowWork::kQuantPerToken:
          per_thread = 4;
          break;
        case RowWork::kSiluAndMul:
          per_thread = 1;
          stages = 1;
          break;
        case RowWork::kDefault:
          per_thread = 2;
          break;
      }
    }
    if (v != 0) per_thread = v;
    const auto threads_for = [vecs](int per) { return (vecs + per - 1) / per; };
    while (per_thread < 8 && threads_for(per_thread) > MaxThreadsForVecsPerThread(per_thread)) {
      per_thread *= 2;
    }
    if (threads_for(per_thread) <= MaxThreadsForVecsPerThread(per_thread)) {
      config->vectorized = true;
      config->vecs_per_thread = per_thread;
      config->pipeline_stages = tuning.row_pipeline_stages >= 0 ? tuning.row_pipeline_stages : stages;
      config->threads = std::max(32, round_up_32(threads_for(per_thread)));
      if (work == RowWork::kSiluAndMul && num_tokens < sm_count && v == 0 && config->pipeline_stages == 0) {
        const int64_t splits = (2 * int64_t{sm_count} + num_tokens - 1) / std::max<int64_t>(num_tokens, 1);
        config->vecs_per_thread = 1;
        config->threads = std::min(1024, std::max(32, round_up_32((vecs + splits - 1) / splits)));
        config->column_splits = static_cast<int>((vecs + config->threads - 1) / config->threads);
      }
      return Status::Ok();
    }
  }
  // Scalar path: the row is streamed through the CTA (two or three passes, the later ones
  // mostly from L2), about four elements per thread per pass.
  config->vectorized = false;
  config->sm_count = sm_count;
  config->threads = static_cast<int>(std::clamp<int64_t>(round_up_32((hidden_size + 3) / 4), 32, 1024));
  return Status::Ok();
}

}  // namespace fxfuse::kernels::internal
