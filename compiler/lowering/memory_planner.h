// Liveness-based arena planning for launch plans.
//
// Every intermediate tensor of a plan lives in one device arena at a byte offset. Two buffers
// whose live ranges (inclusive step intervals) overlap get disjoint byte ranges; buffers whose
// ranges do not overlap may share space. Sizes are symbolic (they depend on the token count),
// so offsets are symbolic too: a buffer is placed above the buffers below it, at a polynomial
// that bounds all their ends from above for every value of the symbols (coefficient-wise
// maximum; sizes are polynomials in non-negative sizes), and a lower gap between placed
// buffers is taken only when the coefficients prove it fits for every value. Sizes are
// rounded up coefficient by coefficient to the alignment.
//
// Order: largest buffer first (at the symbols' hints), ties by first use. With constant sizes
// this is the classic greedy-by-size first-fit.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/symexpr.h"

namespace fxfuse::lowering {

struct PlannerBuffer {
  ir::SymExpr size_bytes;
  int first = 0;  // first step that writes it
  int last = 0;   // last step that reads it (inclusive)
};

struct MemoryPlan {
  std::vector<ir::SymExpr> offsets;  // one per buffer, multiples of the alignment
  ir::SymExpr peak_bytes;            // Max(offset + aligned size)
  ir::SymExpr no_reuse_bytes;        // sum of aligned sizes
  int64_t peak_at_hint = 0;
  int64_t no_reuse_at_hint = 0;
};

// `env` gives each symbol a representative value (its hint) for ordering and reports.
MemoryPlan planMemory(const std::vector<PlannerBuffer>& buffers, const ir::SymbolTable& symbols,
                      const std::map<std::string, int64_t>& env, int64_t alignment = 256);

// Representative symbol values: hint, else max, else min, else 64 (never below 1).
std::map<std::string, int64_t> hintEnv(const ir::SymbolTable& symbols);

// True when two inclusive step ranges overlap.
inline bool livesOverlap(const PlannerBuffer& a, const PlannerBuffer& b) {
  return a.first <= b.last && b.first <= a.last;
}

}  // namespace fxfuse::lowering
