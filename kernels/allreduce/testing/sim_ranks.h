// Simulated ranks: N all-reduce workspaces on ONE device standing in for N GPUs, so the
// one-shot/two-shot kernels, their flag protocol and their epilogues can be tested and timed
// on a single H200. Rank r's workspace is one cudaMalloc; every rank's `peers[]` lists all N
// (plain device pointers: same address space). Rank r launches on its own non-blocking stream,
// so the N kernels of one call run concurrently, as on N GPUs.
//
// Co-residency bound: the ranks' kernels wait on each other inside the kernel, so all N grids
// must be resident on the device at once. MaxCtasPerRank() returns
//   floor(multiprocessors x resident CTAs per multiprocessor (occupancy API) / N)
// and Launch() passes it as params.max_ctas (e.g. H = 8192, T < 132: 1024-thread CTAs, 2 per
// SM, 132 SMs -> 33 CTAs per rank at N = 8). The one-shot/two-shot kernels on real GPUs have no
// such bound beyond their own device.
#ifndef FXFUSE_KERNELS_ALLREDUCE_TESTING_SIM_RANKS_H_
#define FXFUSE_KERNELS_ALLREDUCE_TESTING_SIM_RANKS_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "kernels/all_reduce_rms_norm.h"

namespace fxfuse::kernels::allreduce::testing {

class SimulatedRanks {
 public:
  // Allocates and initializes N workspaces for calls of up to `max_tokens` rows of
  // `hidden_size` on the current device; creates one non-blocking stream per rank.
  static Status Create(int world_size, int64_t max_tokens, int64_t hidden_size, std::unique_ptr<SimulatedRanks>* out);
  ~SimulatedRanks();
  SimulatedRanks(const SimulatedRanks&) = delete;
  SimulatedRanks& operator=(const SimulatedRanks&) = delete;

  int world_size() const { return static_cast<int>(workspaces_.size()); }
  const AllReduceWorkspace& workspace(int rank) const { return workspaces_[rank]; }
  cudaStream_t stream(int rank) const { return streams_[rank]; }

  // The co-residency bound above for the call `params` (any rank's).
  Status MaxCtasPerRank(const AllReduceRmsNormParams& params, int* max_ctas) const;
  // per_rank[r] with workspace(r) and max_ctas (the bound, unless smaller and non-zero) filled
  // in, launched on stream(r), for every rank. Does not synchronize.
  Status Launch(std::vector<AllReduceRmsNormParams> per_rank) const;
  // The same launches captured into one CUDA graph per rank (each rank's own stream, as each
  // rank of a real job captures its own graph); replay with LaunchGraphs.
  Status Capture(std::vector<AllReduceRmsNormParams> per_rank, std::vector<cudaGraphExec_t>* graphs) const;
  Status LaunchGraphs(const std::vector<cudaGraphExec_t>& graphs) const;
  Status Synchronize() const;

 private:
  SimulatedRanks() = default;
  Status Prepare(std::vector<AllReduceRmsNormParams>* per_rank) const;

  std::vector<AllReduceWorkspace> workspaces_;
  std::vector<void*> buffers_;
  std::vector<cudaStream_t> streams_;
};

}  // namespace fxfuse::kernels::allreduce::testing

#endif  // FXFUSE_KERNELS_ALLREDUCE_TESTING_SIM_RANKS_H_
