#include "compiler/lowering/memory_planner.h"

#include <algorithm>
#include <numeric>
#include <set>

#include "ir/status.h"

namespace fxfuse::lowering {

using ir::SymExpr;

std::map<std::string, int64_t> hintEnv(const ir::SymbolTable& symbols) {
  std::map<std::string, int64_t> env;
  for (const auto& [name, info] : symbols.all()) {
    int64_t v = info.hint ? *info.hint : info.max ? *info.max : info.min ? *info.min : 64;
    env[name] = std::max<int64_t>(v, 1);
  }
  return env;
}

namespace {

int64_t evalOr(const SymExpr& e, const std::map<std::string, int64_t>& env, const std::string& what) {
  std::set<std::string> syms;
  e.collectSymbols(syms);
  std::map<std::string, int64_t> full = env;
  for (const auto& s : syms)
    if (!full.count(s)) full[s] = 64;
  auto v = e.evaluate(full);
  if (!v) fail("memory planner: cannot evaluate the size of {} ({})", what, e.str());
  return *v;
}

SymExpr alignUp(const SymExpr& e, int64_t alignment) {
  if (e.isInt()) return SymExpr::integer((e.intValue() + alignment - 1) / alignment * alignment);
  return SymExpr::apply(SymExpr::Kind::CeilDiv, {e, SymExpr::integer(alignment)}) * SymExpr::integer(alignment);
}

SymExpr maxOf(const std::vector<SymExpr>& v) {
  if (v.empty()) return SymExpr::integer(0);
  if (v.size() == 1) return v[0];
  return SymExpr::apply(SymExpr::Kind::Max, v);
}

// Proves a >= b for every value of the symbols.
bool provablyGe(const ir::SymbolTable& symbols, const SymExpr& a, const SymExpr& b) {
  SymExpr d = a - b;
  if (d.isInt()) return d.intValue() >= 0;
  auto r = symbols.range(d);
  return r.lo && *r.lo >= 0;
}

}  // namespace

MemoryPlan planMemory(const std::vector<PlannerBuffer>& buffers, const ir::SymbolTable& symbols,
                      const std::map<std::string, int64_t>& env, int64_t alignment) {
  if (alignment <= 0) fail("memory planner: alignment must be positive");
  const size_t n = buffers.size();
  MemoryPlan plan;
  plan.offsets.assign(n, SymExpr::integer(0));
  std::vector<SymExpr> size(n);
  std::vector<int64_t> size_hint(n);
  for (size_t i = 0; i < n; ++i) {
    if (buffers[i].first > buffers[i].last) fail("memory planner: buffer {} has an empty live range", i);
    size[i] = alignUp(buffers[i].size_bytes, alignment);
    size_hint[i] = evalOr(size[i], env, "buffer " + std::to_string(i));
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (size_hint[a] != size_hint[b]) return size_hint[a] > size_hint[b];
    return buffers[a].first < buffers[b].first;
  });

  std::vector<size_t> placed;
  std::vector<SymExpr> end(n);
  std::vector<int64_t> off_hint(n, 0), end_hint(n, 0);
  for (size_t b : order) {
    std::vector<size_t> conflicts;
    for (size_t q : placed)
      if (livesOverlap(buffers[b], buffers[q])) conflicts.push_back(q);
    // Candidates: offset 0, or just above a conflicting buffer. Below-set = conflicts that end
    // at or below that point (at the hint); the rest must provably lie above b.
    std::vector<int64_t> cand_points{0};
    for (size_t q : conflicts) cand_points.push_back(end_hint[q]);
    std::sort(cand_points.begin(), cand_points.end());
    cand_points.erase(std::unique(cand_points.begin(), cand_points.end()), cand_points.end());
    bool done = false;
    for (int64_t point : cand_points) {
      std::vector<SymExpr> below;
      std::vector<size_t> above;
      for (size_t q : conflicts) {
        if (end_hint[q] <= point)
          below.push_back(end[q]);
        else
          above.push_back(q);
      }
      SymExpr off = maxOf(below);
      SymExpr top = off + size[b];
      bool ok = true;
      for (size_t q : above)
        if (!provablyGe(symbols, plan.offsets[q], top)) {
          ok = false;
          break;
        }
      if (!ok) continue;
      plan.offsets[b] = off;
      done = true;
      break;
    }
    if (!done) {  // Always valid: above everything it overlaps.
      std::vector<SymExpr> ends;
      for (size_t q : conflicts) ends.push_back(end[q]);
      plan.offsets[b] = maxOf(ends);
    }
    end[b] = plan.offsets[b] + size[b];
    off_hint[b] = evalOr(plan.offsets[b], env, "an offset");
    end_hint[b] = off_hint[b] + size_hint[b];
    placed.push_back(b);
  }
  std::vector<SymExpr> ends;
  SymExpr total = SymExpr::integer(0);
  for (size_t i = 0; i < n; ++i) {
    ends.push_back(end[i]);
    total = total + size[i];
  }
  // Drop ends that are provably dominated by another to keep the peak expression short.
  std::vector<SymExpr> keep;
  for (size_t i = 0; i < ends.size(); ++i) {
    bool dominated = false;
    for (size_t j = 0; j < ends.size() && !dominated; ++j)
      if (i != j && !(ends[i] == ends[j] && j > i) && provablyGe(symbols, ends[j], ends[i]) &&
          !(provablyGe(symbols, ends[i], ends[j]) && j > i))
        dominated = true;
    if (!dominated) keep.push_back(ends[i]);
  }
  plan.peak_bytes = maxOf(keep);
  plan.no_reuse_bytes = total;
  plan.peak_at_hint = evalOr(plan.peak_bytes, env, "the arena peak");
  plan.no_reuse_at_hint = evalOr(plan.no_reuse_bytes, env, "the no-reuse total");
  return plan;
}

}  // namespace fxfuse::lowering
