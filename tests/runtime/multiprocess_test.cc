// Multi-process start-up without a GPU: ranks forked from this test meet in a shared directory
// (compiler/runtime/rendezvous.h) and exchange ids; a missing rank times out with its number;
// an aborted run releases the waiters; the launcher (compiler/runtime/launcher.h) reports a
// rank that dies or hangs, stops the others, and never hangs itself.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "compiler/runtime/launcher.h"
#include "compiler/runtime/rendezvous.h"
#include "ir/io.h"
#include "ir/status.h"

using fxfuse::runtime::FileRendezvous;
using fxfuse::runtime::LaunchOptions;
using fxfuse::runtime::runRanks;

namespace {

std::string freshDir() {
  std::string t = (std::filesystem::temp_directory_path() / "fxfuse-rdv-test-XXXXXX").string();
  REQUIRE(mkdtemp(t.data()) != nullptr);
  FileRendezvous::startRun(t);
  return t;
}

// Forks `n - 1` ranks running `body(rank)` (exit code = its return value); runs rank 0 here.
template <typename F>
std::vector<int> forkRanks(int n, F body) {
  std::vector<pid_t> pids;
  for (int r = 1; r < n; ++r) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 3;
      try {
        code = body(r);
      } catch (...) {
        code = 4;
      }
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes{body(0)};
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    codes.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  }
  return codes;
}

}  // namespace

TEST_CASE("rendezvous: forked ranks exchange an id from rank 0 and every rank's blob") {
  const std::string dir = freshDir();
  const int n = 4;
  auto codes = forkRanks(n, [&](int rank) {
    FileRendezvous rdv(dir, rank, n, 20.0);
    std::string id = rdv.broadcast("nccl_id", 0, rank == 0 ? std::string("unique-id\0x", 11) : "");
    if (id != std::string("unique-id\0x", 11)) return 10;
    auto all = rdv.allGather("ipc0", "handle-of-" + std::to_string(rank));
    if (static_cast<int>(all.size()) != n) return 11;
    for (int r = 0; r < n; ++r)
      if (all[static_cast<size_t>(r)] != "handle-of-" + std::to_string(r)) return 12;
    rdv.barrier("ready");
    return 0;
  });
  CHECK(codes == std::vector<int>(n, 0));
  std::filesystem::remove_all(dir);
}

TEST_CASE("rendezvous: a missing rank times out with its number") {
  const std::string dir = freshDir();
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // rank 2 arrives; rank 1 never does
    try {
      FileRendezvous(dir, 2, 3, 0.5).allGather("ipc0", "x");
    } catch (...) {
      _exit(4);
    }
    _exit(0);
  }
  FileRendezvous rdv(dir, 0, 3, 0.5);
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(rdv.allGather("ipc0", "y"),
                      Catch::Contains("rank 1 did not arrive at 'ipc0' within 0.5 s") && !Catch::Contains("ranks"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WEXITSTATUS(st) == 4);  // rank 2 timed out too
  std::filesystem::remove_all(dir);
}

TEST_CASE("rendezvous: an aborted run releases a waiting rank at once with the reason") {
  const std::string dir = freshDir();
  FileRendezvous::abortRun(dir, "rank 3 was killed by signal 9");
  FileRendezvous rdv(dir, 0, 4, 60.0);
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(rdv.allGather("nccl_id", ""), Catch::Contains("aborted") && Catch::Contains("rank 3 was killed"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  std::filesystem::remove_all(dir);
}

TEST_CASE("rendezvous: a rank outside the world size is an error") {
  const std::string dir = freshDir();
  REQUIRE_THROWS_WITH(FileRendezvous(dir, 2, 2, 1.0), Catch::Contains("rank 2 is outside world size 2"));
  REQUIRE_THROWS_WITH(FileRendezvous(dir + "/missing", 0, 2, 1.0), Catch::Contains("does not exist"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("rendezvous: a directory others can write, or a symlink to one, is refused") {
  const std::string dir = freshDir();
  REQUIRE(chmod(dir.c_str(), 0777) == 0);
  REQUIRE_THROWS_WITH(FileRendezvous(dir, 0, 2, 1.0), Catch::Contains("writable by others") && Catch::Contains(dir));
  REQUIRE_THROWS_WITH(FileRendezvous::startRun(dir), Catch::Contains("writable by others"));
  REQUIRE(chmod(dir.c_str(), 0700) == 0);
  const std::string link = dir + "-link";
  REQUIRE(symlink(dir.c_str(), link.c_str()) == 0);
  REQUIRE_THROWS_WITH(FileRendezvous(link, 0, 2, 1.0), Catch::Contains("symbolic link"));
  std::filesystem::remove(link);
  std::filesystem::remove_all(dir);
}

TEST_CASE("rendezvous: blob names carry a fresh random run id; a previous run's blobs are never taken") {
  const std::string dir = freshDir();
  std::string first, second;
  {
    FileRendezvous rdv(dir, 0, 1, 1.0);
    CHECK(rdv.broadcast("nccl_id", 0, "old-id") == "old-id");
  }
  // the old run's blob is still there; a new run must not read it
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  REQUIRE(names.size() == 2);  // run-id and <old run id>.nccl_id.0
  std::string run1 = FileRendezvous::startRun(dir);
  std::string run2 = FileRendezvous::startRun(dir);
  CHECK(run1.size() == 32);
  CHECK(run1 != run2);
  FileRendezvous rdv(dir, 1, 2, 0.3);
  REQUIRE_THROWS_WITH(rdv.broadcast("nccl_id", 0, ""), Catch::Contains("rank 0 did not arrive at 'nccl_id'"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("rendezvous: a blob of this run's name without this run's header is refused") {
  const std::string dir = freshDir();
  std::string run = FileRendezvous::startRun(dir);
  fxfuse::ir::writeFileAtomic(dir + "/" + run + ".nccl_id.0", "planted");
  FileRendezvous rdv(dir, 1, 2, 1.0);
  REQUIRE_THROWS_WITH(rdv.broadcast("nccl_id", 0, ""), Catch::Contains("not from this run"));
  std::filesystem::remove_all(dir);
}

// The launcher on shell commands standing in for ranks: `sh -c SCRIPT --rank r --rendezvous DIR`
// gives the script $0 = --rank, $1 = r, $2 = --rendezvous, $3 = DIR.
namespace {
int launch(const std::string& script, int n, double timeout_s = 20) {
  LaunchOptions o;
  o.world_size = n;
  o.timeout_s = timeout_s;
  return runRanks({"/bin/sh", "-c", script}, o);
}
}  // namespace

TEST_CASE("launcher: every rank runs with its rank, the rendezvous and NCCL_NVLS_ENABLE=0") {
  CHECK(launch(R"(test "$1" = "$FXFUSE_RANK" && test -d "$3" && test "$NCCL_NVLS_ENABLE" = 0)", 3) == 0);
}

TEST_CASE("launcher: a mismatch (exit 1) on one rank makes the run exit 1") {
  CHECK(launch(R"(test "$1" != 1)", 2) == 1);
}

TEST_CASE("launcher: a dying rank is reported by number and the others are stopped") {
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(launch(R"(if [ "$1" = 1 ]; then kill -9 $$; fi; sleep 30)", 3),
                      Catch::Contains("rank 1 was killed by signal 9") && Catch::Contains("stopped the other ranks"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));  // the sleepers were killed
  REQUIRE_THROWS_WITH(launch(R"(exit $((2 * $1)))", 2), Catch::Contains("rank 1 exited with code 2"));
}

TEST_CASE("launcher: a hung rank times out by number, no hang") {
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(launch(R"(if [ "$1" = 0 ]; then exit 0; fi; sleep 30)", 2, 0.5),
                      Catch::Contains("rank 1 did not finish within 0.5 s") && Catch::Contains("stopped it"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
}

// The launcher re-executes this process once per rank with its own command line. /proc files
// report size 0, so a reader by size gets nothing (every multi-GPU run on the H200s failed with
// "cannot read this process's command line" before this was read to its end).
TEST_CASE("launcher: selfCommandLine returns this process's executable and arguments") {
  std::vector<std::string> argv = fxfuse::runtime::selfCommandLine();
  REQUIRE(!argv.empty());
  CHECK(argv[0] == std::filesystem::read_symlink("/proc/self/exe").string());
  CHECK(std::filesystem::exists(argv[0]));
}
