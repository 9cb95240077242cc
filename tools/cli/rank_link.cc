// One rank's link to the others for the node-by-node proof (rank_link.h).
#include "tools/cli/rank_link.h"

#include <algorithm>

#include "tools/cli/multigpu.h"
#include "ir/status.h"

namespace fxfuse::cli {

bool allRanksPass(runtime::Communicator& comm, bool mine) {
  std::vector<std::string> all = comm.allGatherHost("compare_verdict", mine ? "1" : "0");
  return std::all_of(all.begin(), all.end(), [](const std::string& v) { return v == "1"; });
}

RankLink rankLink(runtime::Communicator* comm, const interp::Options& io, int world_size, uint64_t seed) {
  RankLink link;
  link.rank = comm ? comm->rank() : 0;
  link.world_size = world_size;
  link.all_gather = [comm](const std::string& tag, const std::string& mine) {
    return comm ? comm->allGatherHost(tag, mine) : std::vector<std::string>{mine};
  };
  const int rank = link.rank;
  link.reference = [io, world_size, seed, rank](ir::Module& m) {
    return lockstepReference(m, io, world_size, seed).at(static_cast<size_t>(rank));
  };
  return link;
}

}  // namespace fxfuse::cli
