// Start-up rendezvous of the ranks of one multi-GPU run through a shared directory (no GPU,
// no network): each rank publishes a small blob per tag as `<dir>/<tag>.<rank>` (written to a
// temporary name and renamed, so readers never see half a file) and waits until every rank's
// blob of that tag exists. Used once per run for the NCCL unique id (rank 0 -> all) and the
// CUDA IPC handles of the peer workspace (all -> all).
//
// Failure is never a hang: waiting longer than the timeout fails with the ranks that did not
// arrive ("rank 1 did not arrive at 'ipc' within 120 s"); a launcher that sees a rank die
// writes `<dir>/abort` with the reason, and every waiting rank fails with it at once.
#pragma once

#include <string>
#include <vector>

namespace fxfuse::runtime {

class FileRendezvous {
 public:
  // `dir` must exist and be shared by all ranks; tags must be unique per run.
  FileRendezvous(std::string dir, int rank, int world_size, double timeout_s);

  int rank() const { return rank_; }
  int worldSize() const { return world_size_; }

  // Every rank's blob of `tag`, in rank order (this rank's own at [rank]).
  std::vector<std::string> allGather(const std::string& tag, const std::string& mine);
  // Rank `root`'s blob (`data` is only read on the root).
  std::string broadcast(const std::string& tag, int root, const std::string& data);
  void barrier(const std::string& tag);

  // Written by whoever sees the run fail (the launcher when a rank dies); waiters fail with it.
  static void abortRun(const std::string& dir, const std::string& why);

 private:
  void publish(const std::string& tag, const std::string& data);
  // Waits for the blobs of `ranks`; returns them in the same order.
  std::vector<std::string> await(const std::string& tag, const std::vector<int>& ranks);

  std::string dir_;
  int rank_;
  int world_size_;
  double timeout_s_;
};

}  // namespace fxfuse::runtime
