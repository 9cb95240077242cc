#include "compiler/lowering/memory_planner.h"

#include <algorithm>
#include <limits>
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

// Sizes and offsets as polynomials over non-negative "atoms" (symbols, or any non-polynomial
// subexpression such as FloorDiv(s0, 2), which is a size and so >= 0). With every atom
// >= 0, the coefficient-wise maximum of several polynomials bounds each of them from above:
// that bound is used for Max(...) so offsets stay short whatever the number of buffers.
struct Poly {
  std::map<std::string, std::pair<SymExpr, int64_t>> terms;  // monomial text -> (monomial, coeff)
  int64_t constant = 0;
};

void addTerm(Poly& p, const SymExpr& mono, int64_t c) {
  if (c == 0) return;
  auto& t = p.terms[mono.str()];
  t.first = mono;
  t.second += c;
}

Poly toPoly(const SymExpr& e) {
  Poly p;
  if (e.isInt()) {
    p.constant = e.intValue();
    return p;
  }
  if (e.kind() == SymExpr::Kind::Add) {
    for (const auto& a : e.args()) {
      Poly q = toPoly(a);
      p.constant += q.constant;
      for (const auto& [k, t] : q.terms) addTerm(p, t.first, t.second);
    }
    return p;
  }
  if (e.kind() == SymExpr::Kind::Mul) {
    int64_t c = 1;
    std::vector<SymExpr> rest;
    for (const auto& a : e.args()) {
      if (a.isInt())
        c *= a.intValue();
      else
        rest.push_back(a);
    }
    SymExpr mono = rest.size() == 1 ? rest[0] : SymExpr::apply(SymExpr::Kind::Mul, rest);
    if (rest.empty()) {
      p.constant = c;
      return p;
    }
    addTerm(p, mono, c);
    return p;
  }
  addTerm(p, e, 1);
  return p;
}

SymExpr fromPoly(const Poly& p) {
  SymExpr e = SymExpr::integer(p.constant);
  for (const auto& [k, t] : p.terms)
    if (t.second != 0) e = e + SymExpr::integer(t.second) * t.first;
  return e;
}

Poly plus(const Poly& a, const Poly& b) {
  Poly r = a;
  r.constant += b.constant;
  for (const auto& [k, t] : b.terms) addTerm(r, t.first, t.second);
  return r;
}

Poly upper(const std::vector<Poly>& v) {
  Poly r;
  if (v.empty()) return r;
  r.constant = v[0].constant;
  for (const auto& p : v) r.constant = std::max(r.constant, p.constant);
  std::set<std::string> keys;
  for (const auto& p : v)
    for (const auto& [k, t] : p.terms) keys.insert(k);
  for (const auto& k : keys) {
    bool first = true;
    int64_t c = 0;
    SymExpr mono;
    for (const auto& p : v) {
      auto it = p.terms.find(k);
      int64_t ck = it == p.terms.end() ? 0 : it->second.second;
      if (it != p.terms.end()) mono = it->second.first;
      c = first ? ck : std::max(c, ck);
      first = false;
    }
    if (c != 0) r.terms[k] = {mono, c};
  }
  return r;
}

// a >= b for every non-negative value of the atoms (sufficient: every coefficient of a - b >= 0).
bool provablyGe(const Poly& a, const Poly& b) {
  if (a.constant < b.constant) return false;
  for (const auto& [k, t] : b.terms) {
    auto it = a.terms.find(k);
    int64_t ca = it == a.terms.end() ? 0 : it->second.second;
    if (ca < t.second) return false;
  }
  for (const auto& [k, t] : a.terms)
    if (!b.terms.count(k) && t.second < 0) return false;
  return true;
}

Poly alignUp(const Poly& p, int64_t alignment) {
  auto up = [&](int64_t c) {
    if (c > std::numeric_limits<int64_t>::max() - (alignment - 1) || c == std::numeric_limits<int64_t>::min())
      fail("memory planner: a buffer size term ({}) does not fit in int64 once aligned", c);
    return c >= 0 ? (c + alignment - 1) / alignment * alignment : -((-c) / alignment * alignment);
  };
  Poly r;
  r.constant = up(p.constant);
  for (const auto& [k, t] : p.terms) r.terms[k] = {t.first, up(t.second)};
  // Negative coefficients rounded toward zero could make the total smaller than needed; keep
  // the bound safe by adding one alignment unit when any term is negative.
  for (const auto& [k, t] : p.terms)
    if (t.second < 0) {
      r.constant += alignment;
      break;
    }
  return r;
}

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

}  // namespace

MemoryPlan planMemory(const std::vector<PlannerBuffer>& buffers, const ir::SymbolTable& symbols,
                      const std::map<std::string, int64_t>& env, int64_t alignment) {
  (void)symbols;
  if (alignment <= 0) fail("memory planner: alignment must be positive");
  const size_t n = buffers.size();
  MemoryPlan plan;
  plan.offsets.assign(n, SymExpr::integer(0));
  std::vector<Poly> size(n), off(n), end(n);
  std::vector<int64_t> size_hint(n);
  for (size_t i = 0; i < n; ++i) {
    if (buffers[i].first > buffers[i].last) fail("memory planner: buffer {} has an empty live range", i);
    size[i] = alignUp(toPoly(buffers[i].size_bytes), alignment);
    size_hint[i] = evalOr(fromPoly(size[i]), env, "buffer " + std::to_string(i));
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (size_hint[a] != size_hint[b]) return size_hint[a] > size_hint[b];
    return buffers[a].first < buffers[b].first;
  });
  std::vector<size_t> placed;
  std::vector<int64_t> off_hint(n, 0), end_hint(n, 0);
  for (size_t b : order) {
    std::vector<size_t> conflicts;
    for (size_t q : placed)
      if (livesOverlap(buffers[b], buffers[q])) conflicts.push_back(q);
    // Candidates: offset 0, or just above a conflicting buffer. The conflicts that end at or
    // below that point (at the hints) form the floor; the rest must provably lie above.
    std::vector<int64_t> points{0};
    for (size_t q : conflicts) points.push_back(end_hint[q]);
    std::sort(points.begin(), points.end());
    points.erase(std::unique(points.begin(), points.end()), points.end());
    bool done = false;
    for (int64_t point : points) {
      std::vector<Poly> below;
      std::vector<size_t> above;
      for (size_t q : conflicts) {
        if (end_hint[q] <= point)
          below.push_back(end[q]);
        else
          above.push_back(q);
      }
      Poly o = upper(below);
      Poly top = plus(o, size[b]);
      bool ok = true;
      for (size_t q : above)
        if (!provablyGe(off[q], top)) {
          ok = false;
          break;
        }
      if (!ok) continue;
      off[b] = o;
      done = true;
      break;
    }
    if (!done) {  // Always valid: above everything it overlaps.
      std::vector<Poly> ends;
      for (size_t q : conflicts) ends.push_back(end[q]);
      off[b] = upper(ends);
    }
    end[b] = plus(off[b], size[b]);
    plan.offsets[b] = fromPoly(off[b]);
    off_hint[b] = evalOr(plan.offsets[b], env, "an offset");
    end_hint[b] = off_hint[b] + size_hint[b];
    placed.push_back(b);
  }
  Poly total;
  for (size_t i = 0; i < n; ++i) total = plus(total, size[i]);
  plan.peak_bytes = fromPoly(upper(end));
  plan.no_reuse_bytes = fromPoly(total);
  plan.peak_at_hint = evalOr(plan.peak_bytes, env, "the arena peak");
  plan.no_reuse_at_hint = evalOr(plan.no_reuse_bytes, env, "the no-reuse total");
  return plan;
}

}  // namespace fxfuse::lowering
