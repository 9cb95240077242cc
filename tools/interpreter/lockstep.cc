#include "tools/interpreter/lockstep.h"

#include <chrono>
#include <exception>
#include <thread>

#include <fmt/format.h>

#include "tools/interpreter/interpreter.h"
#include "tools/interpreter/numerics.h"
#include "tools/interpreter/ops_common.h"
#include "ir/status.h"

namespace fxfuse::interp {

namespace {
constexpr const char* kAbortNote = "another rank failed";
}  // namespace

RankGroup::RankGroup(int world_size, double timeout_s) : world_size_(world_size), timeout_s_(timeout_s) {
  if (world_size < 1) fail("world size must be >= 1, got {}", world_size);
  parts_.resize(static_cast<size_t>(world_size));
}

Tensor sumRanksF32(const std::vector<Tensor>& parts) {
  if (parts.empty()) fail("all-reduce of no ranks");
  const Tensor& x0 = parts[0];
  DType acc = x0.dtype == DType::F64 ? DType::F64 : DType::F32;
  std::vector<double> sum = x0.values();
  for (double& e : sum) e = roundTo(e, acc);
  for (size_t r = 1; r < parts.size(); ++r) {
    std::vector<double> v = parts[r].values();
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = roundTo(sum[i] + roundTo(v[i], acc), acc);
  }
  Tensor out = Tensor::empty(x0.shape, x0.dtype, 0.0);
  ops::writeValues(out, sum);  // the one rounding to the dtype
  return out;
}

Tensor RankGroup::allReduceSum(int rank, const Tensor& x, const std::string& where) {
  if (rank < 0 || rank >= world_size_) fail("{}: rank {} outside world size {}", where, rank, world_size_);
  std::unique_lock<std::mutex> lock(mu_);
  if (!aborted_.empty()) fail("{}: {}", where, aborted_);
  const uint64_t gen = generation_;
  parts_[static_cast<size_t>(rank)] = x;
  if (++arrived_ == world_size_) {
    error_.clear();
    for (int r = 1; r < world_size_; ++r) {
      const Tensor& p = parts_[static_cast<size_t>(r)];
      if (p.shape != parts_[0].shape || p.dtype != parts_[0].dtype)
        error_ = fmt::format("{}: rank {} gives {}, rank 0 gives {}", where, r, p.describe(), parts_[0].describe());
    }
    if (error_.empty()) result_ = sumRanksF32(parts_);
    for (auto& p : parts_) p = Tensor();
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  } else {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
    bool ok = cv_.wait_until(lock, deadline, [&] { return generation_ != gen || !aborted_.empty(); });
    if (!aborted_.empty() && generation_ == gen) fail("{}: {}", where, aborted_);
    if (!ok) fail("{}: rank {} waited {} s for the other ranks' all-reduce", where, rank, timeout_s_);
  }
  if (!error_.empty()) fail("{}", error_);
  return clonePreserve(result_);
}

void RankGroup::abort(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.empty()) aborted_ = why;
  cv_.notify_all();
}

std::vector<std::vector<RValue>> runLockstep(const std::vector<Interpreter*>& ranks,
                                             const std::vector<std::vector<RValue>>& inputs) {
  const size_t n = ranks.size();
  if (inputs.size() != n) fail("lockstep run: {} ranks but {} input sets", n, inputs.size());
  std::vector<std::vector<RValue>> outs(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (size_t r = 0; r < n; ++r) {
    RankGroup* g = ranks[r]->options().collective.get();
    if (!g || g->worldSize() != static_cast<int>(n) || ranks[r]->options().rank != static_cast<int>(r))
      fail("lockstep run: rank {} is not set up for a group of {} ranks", r, n);
    threads.emplace_back([&, r, g] {
      try {
        outs[r] = ranks[r]->run(inputs[r]);
      } catch (...) {
        errors[r] = std::current_exception();
        g->abort(fmt::format("{} (rank {})", kAbortNote, r));
      }
    });
  }
  for (auto& t : threads) t.join();
  // The root cause: the first error that is not another rank's abort.
  std::exception_ptr first, any;
  for (size_t r = 0; r < n; ++r) {
    if (!errors[r]) continue;
    if (!any) any = errors[r];
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      if (!first && std::string(e.what()).find(kAbortNote) == std::string::npos) first = errors[r];
    } catch (...) {
      if (!first) first = errors[r];
    }
  }
  if (!first) first = any;
  if (first) std::rethrow_exception(first);
  return outs;
}

}  // namespace fxfuse::interp
