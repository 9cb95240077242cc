// The progress ticker of progress.h: one background thread, started by the first stage()
// once it is known that stderr is a terminal and progress is wanted.
#include "tools/cli/progress.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace fxfuse::cli::progress {

namespace {

using Clock = std::chrono::steady_clock;

struct State {
  std::mutex mu;
  std::condition_variable wake;
  std::string command, stage;
  Clock::time_point start = Clock::now();
  double after_s = 2.0;
  bool quiet = false, stopping = false, shown = false;
  std::thread ticker;
};

// Never destroyed: a process that exits without end() must not meet a joinable thread in a
// static destructor.
State& state() {
  static State* s = new State;
  return *s;
}

double delaySeconds() {
  const char* env = std::getenv("FXFUSE_PROGRESS_AFTER_S");
  if (!env || !*env) return 2.0;
  char* end = nullptr;
  double v = std::strtod(env, &end);
  return end && *end == '\0' && v >= 0 ? v : 2.0;
}

// Called with the lock held.
void draw(State& s) {
  double elapsed = std::chrono::duration<double>(Clock::now() - s.start).count();
  if (s.quiet || elapsed < s.after_s) return;
  std::fprintf(stderr, "\r\033[Kfxfuse %s: %s, %.0f s", s.command.c_str(), s.stage.c_str(), elapsed);
  std::fflush(stderr);
  s.shown = true;
}

void tick() {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mu);
  while (!s.stopping) {
    draw(s);
    s.wake.wait_for(lock, std::chrono::milliseconds(250));
  }
}

}  // namespace

void begin(const std::string& command) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.command = command;
  s.stage = "working";
  s.start = Clock::now();
  s.after_s = delaySeconds();
}

void stage(const std::string& what) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.stage = what;
  if (s.quiet || s.stopping || !isatty(STDERR_FILENO)) return;
  draw(s);
  if (!s.ticker.joinable()) s.ticker = std::thread(tick);
}

void clear() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.shown) std::fputs("\r\033[K", stderr);
  s.shown = false;
}

void setQuiet(bool quiet) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.quiet = quiet;
}

void end() {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stopping = true;
    s.wake.notify_all();
  }
  if (s.ticker.joinable()) s.ticker.join();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.shown) std::fputs("\r\033[K", stderr);
  s.shown = false;
}

}  // namespace fxfuse::cli::progress
