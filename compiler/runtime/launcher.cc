#include "compiler/runtime/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include <fmt/format.h>

#include "compiler/runtime/rendezvous.h"
#include "ir/io.h"
#include "ir/status.h"

namespace fxfuse::runtime {

namespace {

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = strsignal(sig);
    return fmt::format("was killed by signal {} ({})", sig, name ? name : "?");
  }
  return "stopped";
}

std::string joinRanks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

std::vector<std::string> selfCommandLine() {
  // /proc files report size 0: read to the end instead of by size (ir::readFile).
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  size_t start = 0;
  while (start < raw.size()) {
    size_t end = raw.find('\0', start);
    if (end == std::string::npos) end = raw.size();
    argv.push_back(raw.substr(start, end - start));
    start = end + 1;
  }
  if (argv.empty()) fail("cannot read this process's command line");
  argv[0] = std::filesystem::read_symlink("/proc/self/exe").string();
  return argv;
}

namespace {

// One rank's process as the launcher sees it.
struct Child {
  int rank = 0;
  pid_t pid = 0;
  bool done = false;
  int status = 0;
  int fd[2] = {-1, -1};  // read ends of the child's stdout, stderr pipes (prefix_output)
  std::string pending[2];
};

// In the forked child of rank `rank`: dies with the launcher, sends its output into the pipes
// (prefix_output), sets the environment and execs the command; never returns.
[[noreturn]] void execRank(int rank, pid_t parent, const LaunchOptions& opts, const int pout[2], const int perr[2],
                           std::vector<std::string>& env, std::vector<char*>& cargs) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(127);
  if (opts.prefix_output) {
    dup2(pout[1], 1);
    dup2(perr[1], 2);
    for (int fd : {pout[0], pout[1], perr[0], perr[1]}) close(fd);
  }
  for (auto& e : env) putenv(e.data());
  execv(cargs[0], cargs.data());
  std::fprintf(stderr, "fxfuse: error: rank %d: cannot execute %s: %s\n", rank, cargs[0], std::strerror(errno));
  _exit(2);
}

// The rank processes of one runRanks() call: starts them, forwards their output, and waits for
// them, stopping all of them when one dies or the run outlives the timeout.
class RankGroup {
 public:
  RankGroup(const LaunchOptions& opts, const std::string& dir, bool own_dir)
      : opts_(opts), dir_(dir), own_dir_(own_dir) {}

  void start(const std::vector<std::string>& argv, int r, pid_t parent);
  int waitAll();

 private:
  void forward(int wait_ms, bool flush);
  void stopAll(const std::string& why);
  void cleanup();

  const LaunchOptions& opts_;
  const std::string dir_;
  const bool own_dir_;
  std::vector<Child> kids_;
};

// Forks rank r running argv with `--rank r --rendezvous DIR` appended and the rank's
// environment; its output goes into non-blocking pipes read by forward() (prefix_output).
void RankGroup::start(const std::vector<std::string>& argv, int r, pid_t parent) {
  std::vector<std::string> args = argv;
  for (std::string a : {std::string("--rank"), std::to_string(r), std::string("--rendezvous"), dir_}) args.push_back(a);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  std::vector<std::string> env = opts_.extra_env;
  env.push_back("NCCL_NVLS_ENABLE=0");  // no NVLink multicast, ever
  // One host: NCCL's bootstrap over loopback unless the user chose an interface.
  if (!std::getenv("NCCL_SOCKET_IFNAME")) env.push_back("NCCL_SOCKET_IFNAME=lo");
  env.push_back(fmt::format("FXFUSE_RANK={}", r));
  int pout[2] = {-1, -1}, perr[2] = {-1, -1};
  if (opts_.prefix_output && (pipe(pout) != 0 || pipe(perr) != 0)) fail("pipe failed: {}", std::strerror(errno));
  pid_t pid = fork();
  if (pid < 0) {
    for (auto& k : kids_) kill(k.pid, SIGKILL);
    fail("fork failed for rank {}: {}", r, std::strerror(errno));
  }
  if (pid == 0) execRank(r, parent, opts_, pout, perr, env, cargs);
  Child c;
  c.rank = r;
  c.pid = pid;
  if (opts_.prefix_output) {
    close(pout[1]);
    close(perr[1]);
    c.fd[0] = pout[0];
    c.fd[1] = perr[0];
    for (int fd : c.fd) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  kids_.push_back(c);
}

// Waits for every rank, forwarding their output meanwhile. Returns 0 when all exit 0, 1 when
// some exit 1 (a mismatch); a rank that dies otherwise, or the timeout, stops them all and fails.
int RankGroup::waitAll() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(opts_.timeout_s);
  int mismatches = 0;
  size_t finished = 0;
  while (finished < kids_.size()) {
    bool progressed = false;
    for (auto& k : kids_) {
      if (k.done) continue;
      pid_t got = waitpid(k.pid, &k.status, WNOHANG);
      if (got != k.pid) continue;
      k.done = true;
      ++finished;
      progressed = true;
      if (WIFEXITED(k.status) && WEXITSTATUS(k.status) == 0) continue;
      if (WIFEXITED(k.status) && WEXITSTATUS(k.status) == 1) {
        ++mismatches;
        continue;
      }
      std::string why = fmt::format("rank {} {}", k.rank, describeStatus(k.status));
      stopAll(why);
      cleanup();
      fail("{}; stopped the other ranks", why);
    }
    if (progressed) continue;
    forward(10, false);
    if (std::chrono::steady_clock::now() > deadline) {
      std::vector<int> hung;
      for (auto& k : kids_)
        if (!k.done) hung.push_back(k.rank);
      std::string why = fmt::format("rank{} {} did not finish within {} s (--timeout-s)", hung.size() > 1 ? "s" : "",
                                    joinRanks(hung), opts_.timeout_s);
      stopAll(why);
      cleanup();
      fail("{}; stopped {}", why, hung.size() > 1 ? "them" : "it");
    }
  }
  cleanup();
  return mismatches ? 1 : 0;
}

// Forwards complete lines (all of it when `flush`) of every child's output, prefixed.
void RankGroup::forward(int wait_ms, bool flush) {
  std::vector<pollfd> fds;
  std::vector<std::pair<Child*, int>> who;
  for (auto& k : kids_)
    for (int s = 0; s < 2; ++s)
      if (k.fd[s] >= 0) {
        fds.push_back({k.fd[s], POLLIN, 0});
        who.push_back({&k, s});
      }
  if (fds.empty()) {
    if (wait_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
    return;
  }
  poll(fds.data(), fds.size(), wait_ms);
  for (size_t i = 0; i < fds.size(); ++i) {
    auto [k, s] = who[i];
    char buf[4096];
    while (true) {
      ssize_t n = read(k->fd[s], buf, sizeof buf);
      if (n > 0) {
        k->pending[s].append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {  // the child closed it
        close(k->fd[s]);
        k->fd[s] = -1;
      }
      break;
    }
    FILE* to = s == 0 ? stdout : stderr;
    std::string& p = k->pending[s];
    size_t start = 0, nl;
    while ((nl = p.find('\n', start)) != std::string::npos) {
      std::fprintf(to, "[rank %d] %.*s\n", k->rank, static_cast<int>(nl - start), p.data() + start);
      start = nl + 1;
    }
    p.erase(0, start);
    if ((flush || k->fd[s] < 0) && !p.empty()) {
      std::fprintf(to, "[rank %d] %s\n", k->rank, p.c_str());
      p.clear();
    }
    std::fflush(to);
  }
}

// Aborts the rendezvous (ranks still in it fail at once) and kills and reaps every running rank.
void RankGroup::stopAll(const std::string& why) {
  FileRendezvous::abortRun(dir_, why);
  for (auto& k : kids_)
    if (!k.done) kill(k.pid, SIGKILL);
  for (auto& k : kids_)
    if (!k.done) {
      waitpid(k.pid, &k.status, 0);
      k.done = true;
    }
}

// Forwards what is left of the output, closes the pipes, and removes a rendezvous directory
// the launcher made.
void RankGroup::cleanup() {
  forward(0, true);
  for (auto& k : kids_)
    for (int& fd : k.fd)
      if (fd >= 0) {
        close(fd);
        fd = -1;
      }
  if (own_dir_) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

}  // namespace

int runRanks(const std::vector<std::string>& argv, const LaunchOptions& opts) {
  if (argv.empty()) fail("runRanks: empty command");
  if (opts.world_size < 1) fail("world size must be >= 1, got {}", opts.world_size);
  std::string dir = opts.rendezvous_dir;
  bool own_dir = dir.empty();
  if (own_dir) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fxfuse-ranks-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) fail("cannot create a rendezvous directory under {}", tmpl);
    dir = tmpl;
  }
  FileRendezvous::startRun(dir);
  RankGroup ranks(opts, dir, own_dir);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = getpid();
  for (int r = 0; r < opts.world_size; ++r) ranks.start(argv, r, parent);
  return ranks.waitAll();
}

}  // namespace fxfuse::runtime
