// The collective half of the node-by-node proof at world size > 1 (node_check.h has the
// argument; docs/runtime.md "Parity at world size > 1"). Every rank checks its own
// non-collective nodes on its own GPU inputs, as at world size 1. A collective node
// (all_reduce, the fused all-reduce + RMSNorm steps) needs every rank's GPU input of that
// node: before the stepwise interpreter runs, each rank gathers, for every collective node in
// graph order, all ranks' GPU values of the node's all-reduce operand; a RankGroup fed by one
// thread per other rank then hands the rank's interpreter the sum of those values (fp32 in
// rank order, rounded once: lockstep.h), and the interpreter does residual/norm/quant from it.
//
//   rank r: GPU x_r ─┐                         interpreter of rank r:
//   rank s: GPU x_s ─┼─ all-gather (host) ──►   Σ_rank-order(x_0..x_N-1) → residual, norm, quant
//   ...             ─┘                           compared with rank r's GPU value of the node
//
// All ranks gather the same nodes in the same order (the graph is the same), so the gathers
// match; a rank without a GPU value of an operand sends an empty blob and every rank fails
// that node check the same way (no rank waits for another).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tools/cli/node_check.h"
#include "tools/interpreter/lockstep.h"
#include "ir/world_size.h"

namespace fxfuse::cli {

// How one rank reaches the others during the proof.
struct RankLink {
  int rank = 0;
  int world_size = kDefaultWorldSize;
  // Every rank's blob of `tag`, in rank order (this rank's own at [rank]). Collective: all
  // ranks call it with the same tags in the same order.
  std::function<std::vector<std::string>(const std::string& tag, const std::string& mine)> all_gather;
  // This rank's outputs of the lockstep CPU reference of `m` (all ranks simulated here).
  std::function<std::vector<interp::RValue>(ir::Module& m)> reference;
};

// The operand a collective node all-reduces (sum), or null when `n` is not such a node.
const ir::Value* allReduceOperand(const ir::Node& n);

// A host tensor as bytes and back (shape, dtype, values); decode fails naming `where`.
std::string encodeTensor(const interp::Tensor& t);
interp::Tensor decodeTensor(const std::string& bytes, const std::string& where);

// Further absolute difference allowed on an all-reduce result beyond one rounding step: 0 for
// the fp32 sum rounded once (the fused kernels; NCCL at world size 2, one addition); at world
// size N > 2 NCCL's ring rounds to the dtype after each of its N-1 additions, so N-2 more
// rounding steps of the largest partial sum along the way, per element.
std::vector<double> allReduceAllowance(const std::vector<interp::Tensor>& rank_inputs);

// A plain all-reduce result checked on host data: the reference is the fp32 sum of
// `rank_inputs` in rank order rounded once (sumRanksF32); `got` must be within one rounding
// step of it (plus allReduceAllowance).
StepDiff checkAllReduce(const std::vector<interp::Tensor>& rank_inputs, const interp::Tensor& got);

// For one rank's stepwise interpreter: gathers every collective node's operand from all ranks
// (constructor; collective), then feeds the other ranks' values into group() while the
// interpreter (Options::collective = group(), Options::rank = link.rank) runs the graph.
class CollectiveFeed {
 public:
  // `gpu_value`: this rank's GPU value of a graph value (null: none).
  CollectiveFeed(const ir::Graph& g, const RankLink& link,
                 const std::function<const interp::Tensor*(const ir::Value*)>& gpu_value, double timeout_s = 600);
  ~CollectiveFeed();  // wakes and joins the feeding threads
  CollectiveFeed(const CollectiveFeed&) = delete;
  CollectiveFeed& operator=(const CollectiveFeed&) = delete;

  std::shared_ptr<interp::RankGroup> group() const { return group_; }
  // Every rank's GPU input of collective node `n` (rank order), or null when `n` is not one.
  const std::vector<interp::Tensor>* inputsOf(const ir::Node& n) const;
  int collectives() const { return static_cast<int>(nodes_.size()); }

 private:
  std::shared_ptr<interp::RankGroup> group_;
  std::vector<const ir::Node*> nodes_;                // collective nodes, graph order
  std::vector<std::vector<interp::Tensor>> inputs_;   // [node][rank]
  std::vector<std::thread> feeders_;
};

}  // namespace fxfuse::cli
