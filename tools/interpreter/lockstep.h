// Lockstep CPU reference for tensor-parallel graphs: N interpreters, one per rank, each with
// its own inputs, run side by side (one thread per rank) and meet at every collective. The
// all-reduce is the one the fused kernels promise (kernels/all_reduce_rms_norm.h): the ranks'
// values summed in fp32 in rank order 0..N-1, then rounded once to the dtype. Without a
// RankGroup the interpreter simulates a collective as N copies of its own tensor.
//
//   rank 0: in0 ─ ... ─ all_reduce ─┐            ┌─ ... ─ out0
//   rank 1: in1 ─ ... ─ all_reduce ─┼─ Σ (fp32) ─┼─ ... ─ out1
//   ...                            ─┘            └─ ...
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tools/interpreter/tensor.h"
#include "tools/interpreter/value.h"

namespace fxfuse::interp {

class Interpreter;

// The meeting point of the ranks' collectives (thread-safe).
class RankGroup {
 public:
  explicit RankGroup(int world_size, double timeout_s = 600);
  int worldSize() const { return world_size_; }

  // Rank `rank`'s part of the next all-reduce (sum). Blocks until every rank has given its
  // tensor; all must agree on shape and dtype (else every rank fails, naming `where`).
  Tensor allReduceSum(int rank, const Tensor& x, const std::string& where);
  // Wakes every waiting rank with an error (a rank failed and will not arrive).
  void abort(const std::string& why);

 private:
  const int world_size_;
  const double timeout_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;
  int arrived_ = 0;
  std::vector<Tensor> parts_;
  Tensor result_;
  std::string error_;
  std::string aborted_;
};

// Sum of `parts` element-wise in fp32, in the order given, rounded once to their dtype.
Tensor sumRanksF32(const std::vector<Tensor>& parts);

// Runs every rank's interpreter on its inputs at the same time (Options::collective must be
// the same RankGroup for all, Options::rank their index). Returns each rank's outputs; the
// first rank's error (other than the abort it caused) is rethrown.
std::vector<std::vector<RValue>> runLockstep(const std::vector<Interpreter*>& ranks,
                                             const std::vector<std::vector<RValue>>& inputs);

}  // namespace fxfuse::interp
