#include "compiler/runtime/communicator.h"

#include <cstring>

#include <fmt/format.h>

#include "compiler/runtime/cuda_libs.h"
#include "compiler/runtime/rendezvous.h"
#include "ir/status.h"

namespace fxfuse::runtime {

namespace k = fxfuse::kernels;

namespace {

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) fail("CUDA error in {}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

void checkNccl(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess) fail("NCCL error in {}: {}", what, runtime::nccl().ncclGetErrorString(r));
}

#ifndef FXFUSE_HAVE_ALLREDUCE_KERNELS
// This build has no fused all-reduce kernels: the workspace is never mapped and every fused
// step takes the NCCL fallback.
int64_t workspaceBytes(int, int64_t, int64_t) { return 0; }
#else
int64_t workspaceBytes(int world, int64_t tokens, int64_t hidden) { return k::AllReduceWorkspaceBytes(world, tokens, hidden); }
#endif

}  // namespace

bool Communicator::fusedKernelsAvailable() {
#ifdef FXFUSE_HAVE_ALLREDUCE_KERNELS
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Communicator> Communicator::single(int device) {
  std::unique_ptr<Communicator> c(new Communicator());
  c->device_ = device;
  c->all_gather_ = [](const std::string&, const std::string& mine) { return std::vector<std::string>{mine}; };
  return c;
}

std::unique_ptr<Communicator> Communicator::bootstrap(int rank, int world_size, int device, const std::string& dir,
                                                      double timeout_s) {
  if (world_size < 1 || world_size > k::kMaxAllReduceRanks)
    fail("world size {} is not supported (1..{})", world_size, k::kMaxAllReduceRanks);
  auto rdv = std::make_shared<FileRendezvous>(dir, rank, world_size, timeout_s);
  std::unique_ptr<Communicator> c(new Communicator());
  c->rank_ = rank;
  c->world_size_ = world_size;
  c->device_ = device;
  check(cudaSetDevice(device), fmt::format("selecting GPU {} for rank {}", device, rank));
  c->all_gather_ = [rdv](const std::string& tag, const std::string& mine) { return rdv->allGather(tag, mine); };
  if (world_size == 1) return c;
  const NcclApi& api = runtime::nccl();
  ncclUniqueId id;
  std::string blob;
  if (rank == 0) {
    checkNccl(api.ncclGetUniqueId(&id), "ncclGetUniqueId");
    blob.assign(reinterpret_cast<const char*>(&id), sizeof id);
  }
  blob = rdv->broadcast("nccl_id", 0, blob);
  if (blob.size() != sizeof id) fail("rank {}: the NCCL id from rank 0 has {} bytes, expected {}", rank, blob.size(), sizeof id);
  std::memcpy(&id, blob.data(), sizeof id);
  checkNccl(api.ncclCommInitRank(&c->nccl_, world_size, id, rank), fmt::format("ncclCommInitRank (rank {})", rank));
  c->owns_nccl_ = true;
  return c;
}

std::unique_ptr<Communicator> Communicator::fromNccl(ncclComm_t comm, int device) {
  if (!comm) fail("Communicator::fromNccl: null NCCL communicator");
  const NcclApi& api = runtime::nccl();
  std::unique_ptr<Communicator> c(new Communicator());
  checkNccl(api.ncclCommCount(comm, &c->world_size_), "ncclCommCount");
  checkNccl(api.ncclCommUserRank(comm, &c->rank_), "ncclCommUserRank");
  if (c->world_size_ > k::kMaxAllReduceRanks)
    fail("world size {} is not supported (at most {})", c->world_size_, k::kMaxAllReduceRanks);
  c->device_ = device;
  c->nccl_ = comm;
  check(cudaSetDevice(device), "selecting the communicator's GPU");
  // Blobs of at most 255 bytes (IPC handles), gathered through the user's communicator: one
  // 256-byte slot per rank, the length in its last byte.
  Communicator* self = c.get();
  c->all_gather_ = [self](const std::string& tag, const std::string& mine) {
    constexpr size_t kSlot = 256;
    if (mine.size() >= kSlot) fail("communicator exchange '{}': {} bytes exceed {}", tag, mine.size(), kSlot - 1);
    const size_t n = static_cast<size_t>(self->world_size_);
    void* dev = nullptr;
    check(cudaMalloc(&dev, kSlot * (n + 1)), "allocating the exchange buffer");
    std::vector<char> host(kSlot * n, 0);
    std::vector<char> slot(kSlot, 0);
    std::memcpy(slot.data(), mine.data(), mine.size());
    slot[kSlot - 1] = static_cast<char>(mine.size());
    cudaStream_t s;
    check(cudaStreamCreate(&s), "creating a stream");
    char* base = static_cast<char*>(dev);
    check(cudaMemcpyAsync(base + kSlot * n, slot.data(), kSlot, cudaMemcpyHostToDevice, s), "exchange upload");
    checkNccl(runtime::nccl().ncclAllGather(base + kSlot * n, base, kSlot, ncclInt8, self->nccl_, s), "ncclAllGather (" + tag + ")");
    check(cudaMemcpyAsync(host.data(), base, kSlot * n, cudaMemcpyDeviceToHost, s), "exchange download");
    check(cudaStreamSynchronize(s), "exchange " + tag);
    cudaStreamDestroy(s);
    cudaFree(dev);
    std::vector<std::string> out;
    for (size_t r = 0; r < n; ++r) {
      const char* p = host.data() + r * kSlot;
      out.emplace_back(p, static_cast<size_t>(static_cast<unsigned char>(p[kSlot - 1])));
    }
    return out;
  };
  return c;
}

Communicator::~Communicator() {
  releaseWorkspace();
  if (nccl_ && owns_nccl_) runtime::nccl().ncclCommDestroy(nccl_);
}

void Communicator::releaseWorkspace() {
  for (void* p : opened_)
    if (p) cudaIpcCloseMemHandle(p);
  opened_.clear();
  if (own_) cudaFree(own_);
  own_ = nullptr;
  ws_ = k::AllReduceWorkspace();
}

const k::AllReduceWorkspace& Communicator::workspace(int64_t max_tokens, int64_t hidden_size) {
  if (own_ && ws_.max_tokens >= max_tokens && ws_.hidden_size == hidden_size) return ws_;
  const int64_t bytes = workspaceBytes(world_size_, max_tokens, hidden_size);
  if (bytes <= 0) fail("the fused all-reduce workspace is not available in this build");
  // Peer access between this rank's device and every other rank's (one device per rank).
  int devices = 0;
  check(cudaGetDeviceCount(&devices), "counting GPUs");
  if (owns_nccl_ && world_size_ > 1 && devices >= world_size_) {  // bootstrap: rank r runs on GPU r
    for (int r = 0; r < world_size_; ++r) {
      if (r == device_) continue;
      int ok = 0;
      check(cudaDeviceCanAccessPeer(&ok, device_, r), "querying peer access");
      if (!ok) fail("rank {}: GPU {} cannot access GPU {} (peer access unavailable)", rank_, device_, r);
    }
  }
  releaseWorkspace();
  check(cudaSetDevice(device_), "selecting the rank's GPU");
  check(cudaMalloc(&own_, static_cast<size_t>(bytes)),
        fmt::format("allocating the {}-byte all-reduce workspace", bytes));
  cudaIpcMemHandle_t mine;
  std::string blob;
  if (world_size_ > 1) {
    check(cudaIpcGetMemHandle(&mine, own_), "cudaIpcGetMemHandle of the workspace");
    blob.assign(reinterpret_cast<const char*>(&mine), sizeof mine);
  }
  std::vector<std::string> all = all_gather_(fmt::format("ipc{}", exchanges_++), blob);
  ws_.world_size = world_size_;
  ws_.rank = rank_;
  ws_.bytes = bytes;
  ws_.max_tokens = max_tokens;
  ws_.hidden_size = hidden_size;
  for (int r = 0; r < world_size_; ++r) {
    if (r == rank_) {
      ws_.peers[r] = own_;
      continue;
    }
    const std::string& h = all.at(static_cast<size_t>(r));
    if (h.size() != sizeof(cudaIpcMemHandle_t)) fail("rank {}: rank {} sent a {}-byte IPC handle", rank_, r, h.size());
    cudaIpcMemHandle_t handle;
    std::memcpy(&handle, h.data(), sizeof handle);
    void* p = nullptr;
    check(cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess),
          fmt::format("rank {}: opening rank {}'s workspace (CUDA IPC; peer access between the GPUs?)", rank_, r));
    opened_.push_back(p);
    ws_.peers[r] = p;
  }
#ifdef FXFUSE_HAVE_ALLREDUCE_KERNELS
  k::Status st = k::InitAllReduceWorkspace(ws_, nullptr);
  if (!st.ok()) fail("rank {}: InitAllReduceWorkspace: {}", rank_, st.ToString());
#endif
  check(cudaDeviceSynchronize(), "initializing the all-reduce workspace");
  if (world_size_ > 1) all_gather_(fmt::format("ipc_ready{}", exchanges_ - 1), "");
  return ws_;
}

void Communicator::barrier(cudaStream_t stream) {
  if (world_size_ == 1 || !nccl_) {
    check(cudaStreamSynchronize(stream), "barrier");
    return;
  }
  void* one = nullptr;
  check(cudaMalloc(&one, sizeof(float)), "barrier buffer");
  check(cudaMemsetAsync(one, 0, sizeof(float), stream), "barrier buffer");
  checkNccl(runtime::nccl().ncclAllReduce(one, one, 1, ncclFloat32, ncclSum, nccl_, stream), "barrier");
  check(cudaStreamSynchronize(stream), "barrier");
  cudaFree(one);
}

std::vector<std::string> Communicator::allGatherHost(const std::string& tag, const std::string& mine) {
  return all_gather_("host_" + tag, mine);  // own prefix: never one of the workspace's tags
}

}  // namespace fxfuse::runtime
