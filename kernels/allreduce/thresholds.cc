// The thresholds table of the fused all-reduce + RMSNorm: which algorithm a call of T rows of
// H 16-bit values takes, per world size. The only place these numbers live.
//
// Message = T * H * 2 bytes (one rank's input). Per world size:
//   one_shot_max: largest message of the one-shot kernel (every rank reads all N inputs: its
//     traffic grows with N * message, its latency is one hop);
//   fused_max: largest message of any fused kernel (two-shot above one_shot_max); above it
//     NCCL's ring/tree all-reduce + our single-GPU add + RMSNorm (+ quant) kernel.
//
// Where the numbers come from:
//   * World size 2: measured on two H200s linked by NV18 (2026-11-29,
//     docs/benchmarks/allreduce_multigpu.md). one_shot_max = 4 MiB: one-shot beat two-shot at
//     every size where both ran (T=512, H=4096, 4 MiB: 27.15 vs 30.55 us; T=128, H=8192:
//     15.73 vs 17.08 us); 4 MiB is also the workspace's one-shot region
//     (allreduce::kOneShotCapacityBytes), so no crossover exists below it and none was
//     measurable above it. fused_max = 128 MiB: two-shot beat NCCL + our add-norm at every size
//     above 4 MiB up to the largest measured, T=8192, H=8192 (128 MiB: 507.96 vs 593.13 us), where vLLM's
//     64 MB bound had sent the call to NCCL. Above 128 MiB nothing was measured. Two-shot still
//     needs the rows in the workspace: ResolveAllReduceAlgorithm falls back to NCCL when a call
//     exceeds the workspace's max_tokens.
//   * World sizes 3 to 8: NOT measured on GPUs (no 4- or 8-GPU machine has been available).
//     fused_max = vLLM's FI_ALLREDUCE_FUSION_MAX_SIZE_MB for Hopper (SM 9.0: 2 MB at 4 ranks,
//     0.5 MB at 8; vllm/compilation/passes/fusion/allreduce_rms_fusion.py), the sizes up to
//     which vLLM found FlashInfer's fused kernel faster than NCCL + norm on H100/H200.
//     one_shot_max: the crossover of our one-shot and two-shot kernels measured on one H200
//     with simulated ranks (docs/benchmarks/allreduce.md, run of 2026-11-29), corrected for
//     NVLink traffic. Simulated: at 8 ranks the two-shot kernel wins from 256 KiB (T=32,
//     H=4096: 23.8 vs 26.7 us) and loses at 128 KiB (T=8, H=8192: 22.9 vs 19.5 us); at 4 ranks
//     the two are even at 1 MiB (T=128, H=4096: 25.2 vs 24.6 us) and two-shot wins at 2 MiB
//     (35.5 vs 38.7 us). Over NVLink a rank's one-shot kernel sends (N-1) x message, the
//     two-shot kernel 2 (N-1)/N x message: twice as much at N = 4 (one-shot up to 512 KiB,
//     half the simulated crossover), four times at N = 8 (128 KiB, the largest size one-shot
//     still won simulated). World sizes 3, 5, 6, 7 are interpolated. The multi-GPU benchmark
//     (kernels/allreduce/bench/run_multigpu.sh N) on 4/8 H200s replaces these when it runs.
#include <cstdint>

#include "kernels/all_reduce_rms_norm.h"

namespace fxfuse::kernels {
namespace {

struct Thresholds {
  int world_size;
  int64_t one_shot_max_bytes;
  int64_t fused_max_bytes;
};

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * kKiB;

constexpr Thresholds kTable[] = {
    {2, 4 * kMiB, 128 * kMiB},  // measured (2 x H200, NV18)
    {3, kMiB, 2 * kMiB},  // 3..8: not measured on GPUs
    {4, 512 * kKiB, 2 * kMiB},
    {5, 256 * kKiB, kMiB / 2},
    {6, 256 * kKiB, kMiB / 2},
    {7, 128 * kKiB, kMiB / 2},
    {8, 128 * kKiB, kMiB / 2},
};

}  // namespace

AllReduceAlgorithm ChooseAllReduceAlgorithm(int world_size, int64_t num_tokens, int64_t hidden_size,
                                            DType dtype) {
  if (world_size <= 1) return AllReduceAlgorithm::kOneShot;  // add + norm + quant, no communication
  const int64_t message = num_tokens * hidden_size * DTypeSize(dtype);
  for (const Thresholds& t : kTable) {
    if (t.world_size != world_size) continue;
    if (message <= t.one_shot_max_bytes) return AllReduceAlgorithm::kOneShot;
    if (message <= t.fused_max_bytes) return AllReduceAlgorithm::kTwoShot;
    return AllReduceAlgorithm::kNcclFallback;
  }
  return AllReduceAlgorithm::kNcclFallback;  // world size above kMaxAllReduceRanks
}

}  // namespace fxfuse::kernels
