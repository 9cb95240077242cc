// The ranks of one tensor-parallel run as the runtime sees them: rank, world size, CUDA
// device, the NCCL communicator (Collective steps, the fused steps' fallback) and the peer
// workspace of the fused all-reduce + RMSNorm kernels (kernels/all_reduce_rms_norm.h),
// mapped through CUDA IPC:
//
//   each rank: cudaMalloc(workspace) ─ cudaIpcGetMemHandle ─┐
//                                                          ├─ exchanged once ─ cudaIpcOpenMemHandle(peers)
//   all ranks' handles ◄───────────────────────────────────┘   ─ InitAllReduceWorkspace ─ barrier
//
// Three ways to make one:
//   * bootstrap(): our own start-up over a shared directory (FileRendezvous): rank 0 creates
//     the NCCL unique id, every rank joins with ncclCommInitRank; IPC handles go through the
//     same directory. What `fxfuse run --world-size N` uses.
//   * fromNccl(): the user's own ncclComm_t (not owned, not destroyed); IPC handles travel
//     through an ncclAllGather on that communicator.
//   * single(): world size 1, no NCCL (the fused op is add + norm + quant).
// Every call that maps the workspace is collective: all ranks call it with the same sizes.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/all_reduce_rms_norm.h"

namespace fxfuse::runtime {

class Communicator {
 public:
  static std::unique_ptr<Communicator> bootstrap(int rank, int world_size, int device, const std::string& rendezvous_dir,
                                                 double timeout_s = 120);
  static std::unique_ptr<Communicator> fromNccl(ncclComm_t comm, int device);
  static std::unique_ptr<Communicator> single(int device = 0);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int worldSize() const { return world_size_; }
  int device() const { return device_; }
  ncclComm_t nccl() const { return nccl_; }  // null at world size 1

  // The peer workspace for calls of at most `max_tokens` rows of `hidden_size` (allocated,
  // exchanged and initialized on the first call; a later call with larger sizes remaps it).
  // Collective. Throws when peers cannot be mapped (no peer access between the devices).
  const kernels::AllReduceWorkspace& workspace(int64_t max_tokens, int64_t hidden_size);
  // The workspace as last mapped (null before the first workspace() call). Not collective.
  const kernels::AllReduceWorkspace* mappedWorkspace() const { return own_ ? &ws_ : nullptr; }
  // Whether this build has the fused kernels (kernels/allreduce); without them every fused
  // step takes the NCCL fallback.
  static bool fusedKernelsAvailable();

  // All ranks meet (an NCCL all-reduce of one value on `stream`, then a synchronize).
  void barrier(cudaStream_t stream);

  // Every rank's host blob `mine` (this rank's at [rank]): through the rendezvous directory
  // (bootstrap(); waits at most its timeout) or an NCCL all-gather (fromNccl(); small blobs).
  // Collective: all ranks call it with the same `tag`, once per tag. For checks, not hot paths.
  std::vector<std::string> allGatherHost(const std::string& tag, const std::string& mine);

 private:
  Communicator() = default;
  void releaseWorkspace();
  // All ranks' blobs (this rank's at [rank]): the rendezvous or NCCL, depending on the origin.
  std::function<std::vector<std::string>(const std::string& tag, const std::string& mine)> all_gather_;

  int rank_ = 0;
  int world_size_ = 1;
  int device_ = 0;
  ncclComm_t nccl_ = nullptr;
  bool owns_nccl_ = false;
  int exchanges_ = 0;
  kernels::AllReduceWorkspace ws_;
  void* own_ = nullptr;                 // this rank's allocation
  std::vector<void*> opened_;           // peers' allocations opened through IPC
};

}  // namespace fxfuse::runtime
