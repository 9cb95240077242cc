#include "compiler/runtime/rendezvous.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "compiler/runtime/private_files.h"
#include "ir/io.h"
#include "ir/status.h"

namespace fxfuse::runtime {

namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

const char* const kDirWhat = "rendezvous directory";
const char* const kRunIdFile = "run-id";

// The current run's id, written by startRun(); empty when missing or not private.
std::string readRunId(const std::string& dir) {
  auto id = readPrivateFile(dir + "/" + kRunIdFile);
  if (!id || id->size() != 32 || id->find_first_not_of("0123456789abcdef") != std::string::npos) return {};
  return *id;
}

std::string joinRanks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

std::string FileRendezvous::startRun(const std::string& dir) {
  checkPrivateDirectory(dir, kDirWhat);
  std::string id = randomHex(16);
  ir::writeFileAtomic(dir + "/" + kRunIdFile, id, 0600);
  return id;
}

FileRendezvous::FileRendezvous(std::string dir, int rank, int world_size, double timeout_s)
    : dir_(std::move(dir)), rank_(rank), world_size_(world_size), timeout_s_(timeout_s) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    fail("rendezvous: rank {} is outside world size {}", rank, world_size);
  checkPrivateDirectory(dir_, kDirWhat);
  run_id_ = readRunId(dir_);
  if (run_id_.empty()) fail("rendezvous directory {} has no private run id (ranks are started by the launcher)", dir_);
}

std::string FileRendezvous::blobPath(const std::string& tag, int rank) const {
  return fmt::format("{}/{}.{}.{}", dir_, run_id_, tag, rank);
}

std::string FileRendezvous::blobHeader(const std::string& tag, int rank) const {
  return fmt::format("fxfuse-rendezvous {} {} {}\n", run_id_, tag, rank);
}

void FileRendezvous::abortRun(const std::string& dir, const std::string& why) {
  try {
    std::string id = readRunId(dir);
    if (!id.empty()) ir::writeFileAtomic(fmt::format("{}/{}.abort", dir, id), why, 0600);
  } catch (const std::exception&) {
    // best effort: the waiters still time out
  }
}

void FileRendezvous::publish(const std::string& tag, const std::string& data) {
  ir::writeFileAtomic(blobPath(tag, rank_), blobHeader(tag, rank_) + data, 0600);
}

std::vector<std::string> FileRendezvous::await(const std::string& tag, const std::vector<int>& ranks) {
  const auto start = std::chrono::steady_clock::now();
  const std::string abort_path = fmt::format("{}/{}.abort", dir_, run_id_);
  auto sleep = std::chrono::microseconds(200);
  while (true) {
    std::vector<int> missing;
    for (int r : ranks)
      if (!exists(blobPath(tag, r))) missing.push_back(r);
    if (missing.empty()) break;
    if (exists(abort_path))
      fail("rank {}: the run was aborted: {}", rank_, readPrivateFile(abort_path).value_or("(unreadable reason)"));
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_s_)
      fail("rank {}: rank{} {} did not arrive at '{}' within {} s", rank_, missing.size() > 1 ? "s" : "",
           joinRanks(missing), tag, timeout_s_);
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
  }
  std::vector<std::string> out;
  for (int r : ranks) {
    // Only a private blob of this run with the right header is taken (never a stale or
    // planted file).
    std::optional<std::string> blob = readPrivateFile(blobPath(tag, r));
    const std::string header = blobHeader(tag, r);
    if (!blob || blob->compare(0, header.size(), header) != 0)
      fail("rank {}: rank {}'s '{}' blob in {} is not from this run; refusing it", rank_, r, tag, dir_);
    out.push_back(blob->substr(header.size()));
  }
  return out;
}

std::vector<std::string> FileRendezvous::allGather(const std::string& tag, const std::string& mine) {
  publish(tag, mine);
  std::vector<int> all;
  for (int r = 0; r < world_size_; ++r) all.push_back(r);
  return await(tag, all);
}

std::string FileRendezvous::broadcast(const std::string& tag, int root, const std::string& data) {
  if (rank_ == root) {
    publish(tag, data);
    return data;
  }
  return await(tag, {root}).at(0);
}

void FileRendezvous::barrier(const std::string& tag) { allGather(tag, ""); }

}  // namespace fxfuse::runtime
