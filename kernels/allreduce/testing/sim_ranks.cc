// Simulated ranks on one device (see sim_ranks.h).
#include "kernels/allreduce/testing/sim_ranks.h"

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/allreduce/launch_info.h"

namespace fxfuse::kernels::allreduce::testing {
namespace {

Status Cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return Status::CudaError(std::string("simulated ranks: ") + what + ": " + cudaGetErrorString(err));
}

}  // namespace

Status SimulatedRanks::Create(int world_size, int64_t max_tokens, int64_t hidden_size,
                              std::unique_ptr<SimulatedRanks>* out) {
  if (world_size < 1 || world_size > kMaxAllReduceRanks) {
    return Status::InvalidArgument("simulated ranks: world size must be in [1, 8]");
  }
  std::unique_ptr<SimulatedRanks> sim(new SimulatedRanks());
  const int64_t bytes = AllReduceWorkspaceBytes(world_size, max_tokens, hidden_size);
  sim->workspaces_.resize(world_size);
  sim->buffers_.assign(world_size, nullptr);
  sim->streams_.assign(world_size, nullptr);
  for (int r = 0; r < world_size; ++r) {
    FXFUSE_KERNELS_RETURN_IF_ERROR(Cuda(cudaMalloc(&sim->buffers_[r], bytes), "cudaMalloc workspace"));
    FXFUSE_KERNELS_RETURN_IF_ERROR(
        Cuda(cudaStreamCreateWithFlags(&sim->streams_[r], cudaStreamNonBlocking), "cudaStreamCreate"));
  }
  for (int r = 0; r < world_size; ++r) {
    AllReduceWorkspace& w = sim->workspaces_[r];
    w.world_size = world_size;
    w.rank = r;
    for (int p = 0; p < world_size; ++p) w.peers[p] = sim->buffers_[p];
    w.bytes = bytes;
    w.max_tokens = max_tokens;
    w.hidden_size = hidden_size;
    FXFUSE_KERNELS_RETURN_IF_ERROR(InitAllReduceWorkspace(w, sim->streams_[r]));
  }
  // Every workspace is initialized before any rank launches.
  FXFUSE_KERNELS_RETURN_IF_ERROR(sim->Synchronize());
  *out = std::move(sim);
  return Status::Ok();
}

SimulatedRanks::~SimulatedRanks() {
  for (cudaStream_t s : streams_) {
    if (s != nullptr) cudaStreamDestroy(s);
  }
  for (void* b : buffers_) {
    if (b != nullptr) cudaFree(b);
  }
}

Status SimulatedRanks::MaxCtasPerRank(const AllReduceRmsNormParams& params, int* max_ctas) const {
  AllReduceRmsNormParams p = params;
  p.workspace = workspaces_[0];
  int threads = 0, per_sm = 0, sms = 0;
  FXFUSE_KERNELS_RETURN_IF_ERROR(FusedLaunchShape(p, &threads, &per_sm, &sms));
  *max_ctas = per_sm * sms / world_size();
  if (*max_ctas < 1) {
    return Status::InvalidArgument("simulated ranks: " + std::to_string(world_size()) + " ranks of " +
                                   std::to_string(threads) + "-thread CTAs cannot all be resident (" +
                                   std::to_string(per_sm) + " per SM x " + std::to_string(sms) + " SMs)");
  }
  return Status::Ok();
}

Status SimulatedRanks::Prepare(std::vector<AllReduceRmsNormParams>* per_rank) const {
  if (static_cast<int>(per_rank->size()) != world_size()) {
    return Status::InvalidArgument("simulated ranks: one params struct per rank expected");
  }
  int bound = 0;
  for (int r = 0; r < world_size(); ++r) {
    AllReduceRmsNormParams& p = (*per_rank)[r];
    p.workspace = workspaces_[r];
    if (r == 0 && p.num_tokens > 0) FXFUSE_KERNELS_RETURN_IF_ERROR(MaxCtasPerRank(p, &bound));
    if (bound > 0 && (p.max_ctas == 0 || p.max_ctas > bound)) p.max_ctas = bound;
  }
  return Status::Ok();
}

Status SimulatedRanks::Launch(std::vector<AllReduceRmsNormParams> per_rank) const {
  FXFUSE_KERNELS_RETURN_IF_ERROR(Prepare(&per_rank));
  for (int r = 0; r < world_size(); ++r) FXFUSE_KERNELS_RETURN_IF_ERROR(AllReduceRmsNorm(per_rank[r], streams_[r]));
  return Status::Ok();
}

Status SimulatedRanks::Capture(std::vector<AllReduceRmsNormParams> per_rank,
                               std::vector<cudaGraphExec_t>* graphs) const {
  FXFUSE_KERNELS_RETURN_IF_ERROR(Prepare(&per_rank));
  graphs->assign(world_size(), nullptr);
  for (int r = 0; r < world_size(); ++r) {
    cudaGraph_t graph = nullptr;
    FXFUSE_KERNELS_RETURN_IF_ERROR(
        Cuda(cudaStreamBeginCapture(streams_[r], cudaStreamCaptureModeThreadLocal), "begin capture"));
    const Status launched = AllReduceRmsNorm(per_rank[r], streams_[r]);
    const cudaError_t ended = cudaStreamEndCapture(streams_[r], &graph);
    FXFUSE_KERNELS_RETURN_IF_ERROR(launched);
    FXFUSE_KERNELS_RETURN_IF_ERROR(Cuda(ended, "end capture"));
    const cudaError_t inst = cudaGraphInstantiate(&(*graphs)[r], graph, 0);
    cudaGraphDestroy(graph);
    FXFUSE_KERNELS_RETURN_IF_ERROR(Cuda(inst, "instantiate graph"));
  }
  return Status::Ok();
}

Status SimulatedRanks::LaunchGraphs(const std::vector<cudaGraphExec_t>& graphs) const {
  for (int r = 0; r < world_size(); ++r) FXFUSE_KERNELS_RETURN_IF_ERROR(Cuda(cudaGraphLaunch(graphs[r], streams_[r]), "graph launch"));
  return Status::Ok();
}

Status SimulatedRanks::Synchronize() const {
  for (cudaStream_t s : streams_) FXFUSE_KERNELS_RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(s), "synchronize"));
  return Status::Ok();
}

}  // namespace fxfuse::kernels::allreduce::testing
