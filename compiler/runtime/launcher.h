// One process per rank for `fxfuse run/bench --world-size N`: the launcher fork+execs the same
// command once per rank (with `--rank r --rendezvous DIR` appended, NCCL_NVLS_ENABLE=0 and
// FXFUSE_RANK=r in the environment), then supervises them:
//
//   launcher ─┬─ rank 0 ─┐
//             ├─ rank 1 ─┼─ rendezvous DIR (NCCL id, IPC handles) ─ run ─ exit 0 | 1 | 2
//             └─ ...    ─┘
//
// A rank that dies (exit code other than 0/1, or a signal) or a run that outlives the timeout
// stops every other rank (SIGKILL, plus DIR/abort so ranks still in the rendezvous fail at
// once) and fails with one line naming the rank. Children die with the launcher
// (PR_SET_PDEATHSIG), so an interrupted run leaves nothing behind on the GPUs.
#pragma once

#include <string>
#include <vector>
#include "ir/world_size.h"

namespace fxfuse::runtime {

struct LaunchOptions {
  int world_size = kDefaultWorldSize;
  double timeout_s = 120;
  std::string rendezvous_dir;                     // empty: a fresh temporary directory (removed after)
  std::vector<std::string> extra_env;             // "NAME=value" for every child
  // Forward each child's stdout/stderr line by line to ours with "[rank r] " in front (false:
  // the children write to ours directly).
  bool prefix_output = true;
};

// Runs `argv` (argv[0] is the executable path) as world_size ranks. Returns 0 when every rank
// exits 0, 1 when some rank exits 1 (a mismatch) and none failed; throws FxError otherwise.
int runRanks(const std::vector<std::string>& argv, const LaunchOptions& opts);

// This process's own command line (/proc/self/cmdline), argv[0] replaced by /proc/self/exe.
std::vector<std::string> selfCommandLine();

}  // namespace fxfuse::runtime
