#include "compiler/runtime/rendezvous.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "ir/io.h"
#include "ir/status.h"

namespace fxfuse::runtime {

namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string joinRanks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

FileRendezvous::FileRendezvous(std::string dir, int rank, int world_size, double timeout_s)
    : dir_(std::move(dir)), rank_(rank), world_size_(world_size), timeout_s_(timeout_s) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    fail("rendezvous: rank {} is outside world size {}", rank, world_size);
  struct stat st;
  if (::stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail("rendezvous directory {} does not exist", dir_);
}

void FileRendezvous::abortRun(const std::string& dir, const std::string& why) {
  try {
    ir::writeFileAtomic(dir + "/abort", why);
  } catch (const std::exception&) {
    // best effort: the waiters still time out
  }
}

void FileRendezvous::publish(const std::string& tag, const std::string& data) {
  ir::writeFileAtomic(fmt::format("{}/{}.{}", dir_, tag, rank_), data);
}

std::vector<std::string> FileRendezvous::await(const std::string& tag, const std::vector<int>& ranks) {
  const auto start = std::chrono::steady_clock::now();
  const std::string abort_path = dir_ + "/abort";
  auto sleep = std::chrono::microseconds(200);
  while (true) {
    std::vector<int> missing;
    for (int r : ranks)
      if (!exists(fmt::format("{}/{}.{}", dir_, tag, r))) missing.push_back(r);
    if (missing.empty()) break;
    if (exists(abort_path)) fail("rank {}: the run was aborted: {}", rank_, ir::readFile(abort_path));
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_s_)
      fail("rank {}: rank{} {} did not arrive at '{}' within {} s", rank_, missing.size() > 1 ? "s" : "",
           joinRanks(missing), tag, timeout_s_);
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
  }
  std::vector<std::string> out;
  for (int r : ranks) out.push_back(ir::readFile(fmt::format("{}/{}.{}", dir_, tag, r)));
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
