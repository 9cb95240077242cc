// `fxfuse run/bench --world-size N` (N > 1): one process per GPU. The command the user typed
// becomes the launcher (compiler/runtime/launcher.h): it checks that N GPUs with peer access
// are visible, starts itself once per rank with hidden `--rank r --rendezvous DIR` flags and
// supervises the ranks (a dead or hung rank: a one-line error naming it, exit code 2). Each
// rank runs the same plan on GPU r through a Communicator bootstrapped over DIR; with
// --compare-cpu it checks its own outputs against the lockstep CPU reference of all N ranks
// (tools/interpreter/lockstep.h). docs/runtime.md, "Multi-GPU".
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "tools/interpreter/interpreter.h"
#include "compiler/runtime/communicator.h"
#include "kernels/all_reduce_rms_norm.h"

namespace fxfuse::cli {

struct MultiGpuFlags {
  int rank = -1;              // hidden, set by the launcher: this process is rank `rank`
  std::string rendezvous;     // hidden, set by the launcher: the shared start-up directory
  double timeout_s = 120;     // the whole run, per launch (and each rendezvous wait)
  std::string allreduce = "auto";  // fused all-reduce steps: auto | oneshot | twoshot | nccl
};

void addMultiGpuFlags(CLI::App* cmd, MultiGpuFlags& f);

// The world size a run uses: --world-size for graphs; a plan's own (which --world-size, when
// given as more than 1, must equal).
int runWorldSize(const std::string& input, bool is_plan, int world_size_flag);

// In the user's process with world size > 1: checks the GPUs, runs the ranks, sets
// `exit_code` (0 all passed, 1 a rank reported a mismatch) and returns true. In a rank, or at
// world size 1: false (the caller goes on).
bool launchRanks(const MultiGpuFlags& f, int world_size, int& exit_code);

// This rank's communicator (rank r on GPU r); null outside a multi-rank launch.
std::unique_ptr<runtime::Communicator> rankCommunicator(const MultiGpuFlags& f, int world_size);
kernels::AllReduceAlgorithm allReduceAlgorithm(const MultiGpuFlags& f);

// Every rank's outputs of the lockstep CPU reference: rank r runs `m` on the inputs
// Interpreter::makeInputs(seed) gives it as rank r of `world_size` (`base` for the rest).
std::vector<std::vector<interp::RValue>> lockstepReference(ir::Module& m, const interp::Options& base, int world_size,
                                                           uint64_t seed);

}  // namespace fxfuse::cli
