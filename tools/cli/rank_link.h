// What `fxfuse run --world-size N --compare-cpu` gives the node-by-node proof of one rank
// (node_check_collective.h): the other ranks through the rank's Communicator, and the
// lockstep CPU reference (multigpu.h).
#pragma once

#include <cstdint>

#include "tools/cli/node_check_collective.h"
#include "compiler/runtime/communicator.h"

namespace fxfuse::cli {

// Whether every rank's outputs passed (collective: every rank calls it once, after comparing).
bool allRanksPass(runtime::Communicator& comm, bool mine);

// The link of this rank (`comm` null: world size 1, a link that gathers only its own blob).
// `reference` runs the lockstep reference of a module with `io`'s options and `seed`.
RankLink rankLink(runtime::Communicator* comm, const interp::Options& io, int world_size, uint64_t seed);

}  // namespace fxfuse::cli
