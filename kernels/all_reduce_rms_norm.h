// Fused all-reduce + (residual add) + RMSNorm (+ static FP8 quant) across the GPUs of one
// host, over peer-visible memory (vLLM's AllReduceFusionPass target, FlashInfer/TRT-LLM
// `trtllm_allreduce_fusion`; ../shared/docs/vllm-fusion-semantics.md §5.5).
//
//   rank r:  input_r ─┐
//   rank s:  input_s ─┼─ all_reduce(sum) ─ a ─(+ residual)─ z ─ rms_norm(w) ─ n ─ quant_fp8(scale) ─ q
//   ...             ─┘                                     └─ residual_out   └─ norm_out          └─ quant_out
//
// Every rank calls AllReduceRmsNorm with its own partial sums and the same shapes; each rank
// computes the identical result (the rank sum is taken in fp32 in rank order 0..N-1, so all
// ranks round the same value). The peer workspace is allocated and mapped once at start-up by
// the caller (the multi-process runtime through CUDA IPC, a single process through peer
// access, or the simulated-rank harness through N buffers on one device). No NVLink
// multicast is used.
#ifndef FXFUSE_KERNELS_ALL_REDUCE_RMS_NORM_H_
#define FXFUSE_KERNELS_ALL_REDUCE_RMS_NORM_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/status.h"
#include "kernels/types.h"

namespace fxfuse::kernels {

inline constexpr int kMaxAllReduceRanks = 8;

// How the reduction is carried out.
enum class AllReduceAlgorithm : uint8_t {
  kAuto,          // ChooseAllReduceAlgorithm (the thresholds table)
  kOneShot,       // every rank reads every peer's whole input (Lamport flags, one kernel)
  kTwoShot,       // reduce-scatter by token ranges, norm (+ quant) on owned rows, all-gather
  kNcclFallback,  // NCCL all-reduce, then the single-GPU fused add + RMSNorm (+ quant) kernel
};
const char* AllReduceAlgorithmName(AllReduceAlgorithm algorithm);

// The thresholds table (kernels/allreduce/thresholds.cc, from benchmarks per world size):
// never returns kAuto. World size 1 returns kOneShot (the fused op is add + norm + quant).
AllReduceAlgorithm ChooseAllReduceAlgorithm(int world_size, int64_t num_tokens, int64_t hidden_size,
                                            DType dtype);

// One rank's view of the peer workspace. Each rank owns one device allocation of
// AllReduceWorkspaceBytes(...) bytes, initialized once with InitAllReduceWorkspace before
// any rank launches; `peers[r]` is rank r's allocation as mapped in this rank's address
// space (`peers[rank]` is its own). The layout inside (data slots, flags, launch counters) is
// private to the kernels. Capacity: at most `max_tokens` rows of `hidden_size` 16-bit values
// per call; larger calls must take kNcclFallback.
struct AllReduceWorkspace {
  int world_size = 1;  // 1..kMaxAllReduceRanks
  int rank = 0;        // 0..world_size-1
  void* peers[kMaxAllReduceRanks] = {};
  int64_t bytes = 0;   // every rank's allocation size (identical on all ranks)
  int64_t max_tokens = 0;
  int64_t hidden_size = 0;
};

int64_t AllReduceWorkspaceBytes(int world_size, int64_t max_tokens, int64_t hidden_size);
// Writes the initial state (flags, sentinels) into this rank's own allocation.
Status InitAllReduceWorkspace(const AllReduceWorkspace& workspace, cudaStream_t stream);

// Per rank (T = num_tokens, H = hidden_size, all [T, H] tensors contiguous rows):
//   a = round16(Σ_{r=0..N-1} float(input_r))            (fp32 sum in rank order)
//   residual given:   z = round16(float(a) + float(residual));  residual <- z
//   no residual:      z = a;  allreduce_out <- a (when given)
//   (allreduce_out is written whenever it is given, with or without a residual; the residual
//   must not alias input, allreduce_out or norm_out)
//   n = the RmsNorm of z with weight and epsilon, rounded exactly as kernels/rms_norm.h's
//       kRoundedSum path; norm_out <- n (when given)
//   quant_out <- fp8(clamp(float(n) * (1 / *scale), ±448)) (when given; static per-tensor)
// The result on every rank equals the unfused chain all_reduce -> RmsNorm -> QuantFp8 of this
// library whenever the all-reduce delivers the same rounded sum.
struct AllReduceRmsNormParams {
  int64_t num_tokens = 0;
  int64_t hidden_size = 0;
  DType dtype = DType::BF16;  // input, residual, weight, allreduce_out, norm_out: bf16 or fp16
  const void* input = nullptr;     // [T, H] this rank's partial sums (not written)
  void* residual = nullptr;        // optional [T, H], read, then overwritten with z
  void* allreduce_out = nullptr;   // optional [T, H] a (may equal input: written after every read)
  const void* weight = nullptr;    // optional [H]
  float epsilon = 1e-6f;
  void* norm_out = nullptr;        // optional [T, H] n (may equal input)
  void* quant_out = nullptr;       // optional [T, H] float8_e4m3fn
  const float* scale = nullptr;    // [1] fp32 on the device; required with quant_out
  AllReduceWorkspace workspace;
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto;
  // (Added, optional.) Most CTAs this rank's launch may use; 0 = automatic (all CTAs resident
  // on the device at once). The simulated-rank harness lowers it so that the kernels of all
  // ranks sharing one GPU are resident together (kernels/allreduce/testing/sim_ranks.h). Every
  // rank of one call must pass the same value.
  int max_ctas = 0;

  Status Check() const;
};

// (Added.) The algorithm AllReduceRmsNorm runs for `params` (which must pass Check()): kAuto
// resolved through the table; kNcclFallback when the call does not fit the fused kernels
// (more rows than the workspace holds, H not a multiple of 8, H > 32768, or a tensor not
// 16-byte aligned). Never kAuto. An explicit kOneShot/kTwoShot that does not fit resolves to
// kNcclFallback too (and AllReduceRmsNorm rejects it). World size 1 needs no workspace.
AllReduceAlgorithm ResolveAllReduceAlgorithm(const AllReduceRmsNormParams& params);

// Enqueues the fused kernel(s) on `stream` (one-shot or two-shot; kAuto resolves through the
// table). Returns InvalidArgument when the resolved algorithm is kNcclFallback: the caller,
// who owns the NCCL communicator, runs the all-reduce and then RmsNorm / RmsNormQuantFp8.
Status AllReduceRmsNorm(const AllReduceRmsNormParams& params, cudaStream_t stream);

}  // namespace fxfuse::kernels

#endif  // FXFUSE_KERNELS_ALL_REDUCE_RMS_NORM_H_
