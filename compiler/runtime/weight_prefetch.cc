#include "compiler/runtime/weight_prefetch.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "compiler/lowering/lowering.h"

namespace fxfuse::runtime {

namespace pb = fxfuse::plan::v1;

namespace {

// A weight: a parameter or constant input that no step writes.
bool isWeight(const pb::Plan& plan, int id) {
  if (!lowering::readOnlyInPlan(plan, id)) return false;
  const pb::IoRole role = plan.inputs(plan.buffers(plan.tensors(id).buffer()).input()).role();
  return role == pb::PARAMETER || role == pb::CONSTANT;
}

}  // namespace

std::vector<WeightPrefetch> PlanWeightPrefetches(const pb::Plan& plan, PrefetchFork how) {
  std::vector<WeightPrefetch> out;
  int fork = 0;  // the previous matmul, or the first step after it
  for (int i = 0; i < plan.steps_size(); ++i) {
    if (!plan.steps(i).has_matmul()) continue;
    const pb::Matmul& mm = plan.steps(i).matmul();
    if (fork < i) {
      if (isWeight(plan, mm.b())) out.push_back({fork, i, mm.b()});
      if (isWeight(plan, mm.a())) out.push_back({fork, i, mm.a()});
    }
    fork = how == PrefetchFork::kWithPreviousMatmul ? i : i + 1;
  }
  return out;
}

int64_t PrefetchBytes(int64_t weight_bytes, int64_t cap) {
  if (cap <= 0 || weight_bytes <= 0) return 0;
  return std::min(weight_bytes, cap);
}

int64_t PrefetchCapBytes(int64_t l2_bytes) {
  const char* v = std::getenv("FXFUSE_PREFETCH_MB");
  if (!v) return 0;  // off by default: measured slower (docs/runtime.md "Weight prefetch")
  if (std::string(v) == "l2") return std::max<int64_t>(l2_bytes, 0) / 2;
  char* end = nullptr;
  const double mb = std::strtod(v, &end);
  if (end != v && *end == '\0' && mb >= 0 && mb <= 1e6) return static_cast<int64_t>(mb * 1024 * 1024);
  return 0;
}

PrefetchFork PrefetchForkFromEnv() {
  const char* v = std::getenv("FXFUSE_PREFETCH_FORK");
  return v && std::string(v) == "with_previous" ? PrefetchFork::kWithPreviousMatmul : PrefetchFork::kAfterPreviousMatmul;
}

bool PrefetchEvictLastFromEnv() {
  const char* v = std::getenv("FXFUSE_PREFETCH_EVICT_LAST");
  return v && std::string(v) == "1";
}

}  // namespace fxfuse::runtime
