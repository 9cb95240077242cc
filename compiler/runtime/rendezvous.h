// Start-up rendezvous of the ranks of one multi-GPU run through a shared directory (no GPU,
// no network): each rank publishes a small blob per tag as `<dir>/<run id>.<tag>.<rank>`
// (written to an exclusive temporary and renamed, so readers never see half a file) and waits
// until every rank's blob of that tag exists.
//
// Private by default: the directory must be owned by the user with no group/other write
// (the launcher creates it 0700; a caller-supplied one is checked, and refused otherwise).
// startRun() writes a fresh random run id into it (`run-id`); blob names carry the id, so
// they cannot be guessed, and each blob starts with a header naming run, tag and rank:
// blobs of an earlier run in the same directory are never taken. Used once per run for the NCCL unique id (rank 0 -> all) and the
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
  // Starts a run in the private directory `dir`: writes and returns a new run id.
  static std::string startRun(const std::string& dir);
  // `dir` must be private, shared by all ranks and started (startRun); tags must be unique
  // per run.
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
  std::string blobPath(const std::string& tag, int rank) const;
  std::string blobHeader(const std::string& tag, int rank) const;
  // Waits for the blobs of `ranks`; returns them in the same order.
  std::vector<std::string> await(const std::string& tag, const std::vector<int>& ranks);

  std::string dir_;
  std::string run_id_;
  int rank_;
  int world_size_;
  double timeout_s_;
};

}  // namespace fxfuse::runtime
