#include "tools/cli/multigpu.h"

#include <cuda_runtime_api.h>

#include <cstdio>

#include <fmt/format.h>

#include "tools/interpreter/lockstep.h"
#include "compiler/lowering/lowering.h"
#include "compiler/runtime/launcher.h"
#include "compiler/runtime/runtime.h"
#include "tools/cli/progress.h"
#include "ir/status.h"
#include "tools/cli/flag_checks.h"

namespace fxfuse::cli {

namespace k = fxfuse::kernels;
namespace rt = fxfuse::runtime;

void addMultiGpuFlags(CLI::App* cmd, MultiGpuFlags& f) {
  cmd->add_option("--timeout-s", f.timeout_s,
                  "world size > 1: stop every rank and fail when the run takes longer (default 120)")
      ->check(FiniteRange(1, 86400));
  cmd->add_option("--allreduce", f.allreduce,
                  "fused all-reduce steps: auto (thresholds table), oneshot, twoshot, nccl (NCCL + fused norm)")
      ->check(CLI::IsMember({"auto", "oneshot", "twoshot", "nccl"}));
  cmd->add_option("--rank", f.rank, "")->group("");         // set by the launcher
  cmd->add_option("--rendezvous", f.rendezvous, "")->group("");
}

static_assert(kMaxWorldSize == k::kMaxAllReduceRanks, "the world size limit is the fused all-reduce kernels' rank limit");

int runWorldSize(const std::string& input, bool is_plan, int world_size_flag) {
  checkWorldSize(world_size_flag, "--world-size");
  if (!is_plan) return world_size_flag;
  int plan_ws = std::max(1, lowering::loadPlan(input).world_size());  // 0: unset; range-checked by loadPlan
  if (world_size_flag > 1 && world_size_flag != plan_ws)
    fail("{}: the plan was lowered for world size {}, not {}", input, plan_ws, world_size_flag);
  return plan_ws;
}

k::AllReduceAlgorithm allReduceAlgorithm(const MultiGpuFlags& f) {
  if (f.allreduce == "oneshot") return k::AllReduceAlgorithm::kOneShot;
  if (f.allreduce == "twoshot") return k::AllReduceAlgorithm::kTwoShot;
  if (f.allreduce == "nccl") return k::AllReduceAlgorithm::kNcclFallback;
  return k::AllReduceAlgorithm::kAuto;
}

bool launchRanks(const MultiGpuFlags& f, int world_size, int& exit_code) {
  if (f.rank >= 0) {
    progress::setQuiet(true);  // the launcher's terminal is not each rank's to draw on
    if (f.rendezvous.empty()) fail("--rank needs --rendezvous (both are set by the launcher)");
    if (f.rank >= world_size) fail("--rank {} is outside world size {}", f.rank, world_size);
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines reach the launcher as they are printed
    return false;
  }
  if (world_size <= 1) return false;
  std::string why = rt::deviceProblem();
  if (!why.empty()) fail("cannot run on the GPU: {}", why);
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (devices < world_size)
    fail("--world-size {} needs {} GPUs (one per rank); {} {} visible", world_size, world_size, devices,
         devices == 1 ? "is" : "are");
  if (f.allreduce != "nccl") {
    for (int a = 0; a < world_size; ++a)
      for (int b = 0; b < world_size; ++b) {
        int ok = 0;
        if (a != b && (cudaDeviceCanAccessPeer(&ok, a, b) != cudaSuccess || !ok))
          fail("GPU {} cannot access GPU {} (no peer access): the fused all-reduce needs it; --allreduce=nccl runs "
               "without",
               a, b);
      }
  }
  rt::LaunchOptions o;
  o.world_size = world_size;
  o.timeout_s = f.timeout_s;
  exit_code = rt::runRanks(rt::selfCommandLine(), o);
  std::printf("world size %d: %s\n", world_size, exit_code == 0 ? "every rank passed" : "a rank reported a mismatch");
  return true;
}

std::unique_ptr<rt::Communicator> rankCommunicator(const MultiGpuFlags& f, int world_size) {
  if (f.rank < 0) return nullptr;
  return rt::Communicator::bootstrap(f.rank, world_size, f.rank, f.rendezvous, f.timeout_s);
}

std::vector<std::vector<interp::RValue>> lockstepReference(ir::Module& m, const interp::Options& base, int world_size,
                                                           uint64_t seed) {
  auto group = std::make_shared<interp::RankGroup>(world_size);
  std::vector<std::unique_ptr<interp::Interpreter>> owned;
  std::vector<interp::Interpreter*> ranks;
  std::vector<std::vector<interp::RValue>> inputs;
  for (int r = 0; r < world_size; ++r) {
    interp::Options o = base;
    o.world_size = world_size;
    o.collective = group;
    o.rank = r;
    owned.push_back(std::make_unique<interp::Interpreter>(m, o));
    ranks.push_back(owned.back().get());
    inputs.push_back(owned.back()->makeInputs(seed));
  }
  return interp::runLockstep(ranks, inputs);
}

}  // namespace fxfuse::cli
