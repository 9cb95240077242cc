// Host-side launch shapes for the row kernels (one CTA per row). Computed in one place so that
// a fused kernel and its unfused chain reduce in the same order, and so that the launch-plan
// printer can show the real numbers.
#ifndef FXFUSE_KERNELS_INTERNAL_LAUNCH_CONFIG_H_
#define FXFUSE_KERNELS_INTERNAL_LAUNCH_CONFIG_H_

#include <cstdint>

#include "kernels/status.h"
#include "kernels/types.h"

namespace fxfuse::kernels::internal {

inline int64_t ResolveStride(int64_t stride, int64_t width) { return stride == 0 ? width : stride; }

inline bool IsAligned(const void* ptr, int bytes) {
  return reinterpret_cast<uintptr_t>(ptr) % static_cast<uintptr_t>(bytes) == 0;
}

// Most threads a CTA of the 16-byte register path may have when each thread keeps
// `vecs_per_thread` vectors: 1024 for 1 or 2 (64 registers), 512 for 4 or 8 (128 registers).
// The kernels' __launch_bounds__ use the same numbers.
inline constexpr int MaxThreadsForVecsPerThread(int vecs_per_thread) {
  return vecs_per_thread <= 2 ? 1024 : 512;
}
// Largest row the 16-byte register path keeps on chip: 512 threads x 8 vectors x 8 elements.
inline constexpr int64_t kMaxVectorizedHidden = 512 * 8 * 8;

struct RowLaunchConfig {
  bool vectorized = false;   // 16-byte register path; false: scalar path (streams the row)
  int vecs_per_thread = 0;   // vectorized only: 1, 2, 4 or 8 sixteen-byte vectors per thread
  int threads = 0;           // per CTA, a multiple of 32, at most 1024
  int sm_count = 0;          // multiprocessors (vectorized kernels size their grid from it)
  // Vectorized only: 0 = one row per CTA (grid T); 1..3 = persistent CTAs, rows staged in shared
  // memory that deep (the launcher may lower it to fit shared memory).
  int pipeline_stages = 0;
  // Vectorized SiLU-and-mul only (an elementwise row): CTAs per row, each `threads` x
  // `vecs_per_thread` vectors of it. Fewer rows than SMs would otherwise leave most SMs idle.
  int column_splits = 1;
};

// What a row kernel does, for the launch-shape heuristic.
enum class RowWork : uint8_t {
  kDefault,         // residual-add RMSNorm (any output), per-group and per-tensor quant alone
  kNormNoResidual,  // RMSNorm without residual, any output (few bytes per element)
  kQuantPerToken,   // dynamic per-token quantization alone
  kSiluAndMul,
};

// The work class of every RMSNorm kernel, fused or not: it depends on the residual only, so a
// fused RMSNorm + FP8 kernel reduces in the same order as the RmsNorm of its unfused chain.
inline RowWork NormRowWork(bool residual) { return residual ? RowWork::kDefault : RowWork::kNormNoResidual; }

// `vectorizable`: every pointer 16-byte aligned (8 for FP8), every stride and H multiples of 8.
// `sm_count`: multiprocessors of the device. Heuristic (from the H200 sweep, docs/kernels.md):
// fewer rows than SMs: 1 vector per thread (the most threads per row: latency); otherwise
// 2 vectors per thread, except 4 (8 from H = 8192) for kNormNoResidual, 4 for kQuantPerToken,
// and 1 with a persistent, prefetching grid for SiLU-and-mul. One row per CTA otherwise. More
// vectors per thread when the row needs them. SiLU-and-mul with fewer rows than SMs splits each
// row over enough CTAs of one vector per thread for about two CTAs per SM (column_splits).
Status ChooseRowLaunchConfig(int64_t num_tokens, int64_t hidden_size, bool vectorizable,
                             int sm_count, const LaunchTuning& tuning, RowLaunchConfig* config,
                             RowWork work = RowWork::kDefault);

// Multiprocessor count of the current device (cached per device).
Status CurrentDeviceSmCount(int* sm_count);

}  // namespace fxfuse::kernels::internal

#endif  // FXFUSE_KERNELS_INTERNAL_LAUNCH_CONFIG_H_
