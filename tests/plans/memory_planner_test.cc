// Memory planner: liveness reuse, symbolic sizes, alignment, validity for every symbol value.
#include <catch2/catch.hpp>

#include <map>
#include <random>

#include "compiler/lowering/memory_planner.h"

using fxfuse::ir::SymExpr;
using fxfuse::ir::SymbolTable;
using fxfuse::lowering::MemoryPlan;
using fxfuse::lowering::planMemory;
using fxfuse::lowering::PlannerBuffer;

namespace {

SymExpr I(int64_t v) { return SymExpr::integer(v); }
SymExpr S(const char* n) { return SymExpr::symbol(n); }

// Every pair of buffers with overlapping lives is disjoint in bytes, at the given symbols.
void checkValid(const std::vector<PlannerBuffer>& b, const MemoryPlan& p, const std::map<std::string, int64_t>& env) {
  int64_t peak = *p.peak_bytes.evaluate(env);
  for (size_t i = 0; i < b.size(); ++i) {
    int64_t oi = *p.offsets[i].evaluate(env), si = *b[i].size_bytes.evaluate(env);
    REQUIRE(oi % 256 == 0);
    REQUIRE(oi + si <= peak);
    for (size_t j = i + 1; j < b.size(); ++j) {
      if (!fxfuse::lowering::livesOverlap(b[i], b[j])) continue;
      int64_t oj = *p.offsets[j].evaluate(env), sj = *b[j].size_bytes.evaluate(env);
      INFO("buffers " << i << " and " << j);
      REQUIRE((oi + si <= oj || oj + sj <= oi));
    }
  }
}

}  // namespace

TEST_CASE("buffers with disjoint lives share space; the peak is below the no-reuse total") {
  // A chain: each buffer is read by the next step only.
  std::vector<PlannerBuffer> b;
  for (int i = 0; i < 6; ++i) b.push_back({I(1000), i, i + 1});
  SymbolTable st;
  MemoryPlan p = planMemory(b, st, {}, 256);
  CHECK(p.no_reuse_at_hint == 6 * 1024);
  CHECK(p.peak_at_hint == 2 * 1024);  // two live at a time
  checkValid(b, p, {});
}

TEST_CASE("overlapping lives never overlap in memory, for random constant problems") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<PlannerBuffer> b;
    int n = 2 + static_cast<int>(rng() % 30);
    for (int i = 0; i < n; ++i) {
      int first = static_cast<int>(rng() % 40);
      b.push_back({I(1 + static_cast<int64_t>(rng() % 5000)), first, first + static_cast<int>(rng() % 10)});
    }
    SymbolTable st;
    MemoryPlan p = planMemory(b, st, {}, 256);
    checkValid(b, p, {});
    CHECK(p.peak_at_hint <= p.no_reuse_at_hint);
  }
}

TEST_CASE("symbolic sizes: offsets are valid for every token count, not only the hint") {
  SymbolTable st;
  st.getOrAdd("s0").min = 1;
  std::mt19937 rng(11);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<PlannerBuffer> b;
    int n = 2 + static_cast<int>(rng() % 20);
    for (int i = 0; i < n; ++i) {
      int first = static_cast<int>(rng() % 30);
      // Mix of token-proportional activations and constant-size buffers.
      SymExpr size = rng() % 3 ? I(static_cast<int64_t>(1 + rng() % 64) * 512) * S("s0") : I(1 + static_cast<int64_t>(rng() % 100000));
      b.push_back({size, first, first + static_cast<int>(rng() % 6)});
    }
    MemoryPlan p = planMemory(b, st, {{"s0", 16}}, 256);
    for (int64_t t : {1, 2, 7, 16, 100, 4096})
      checkValid(b, p, {{"s0", t}});
  }
}

TEST_CASE("a decoder-like activation chain reuses by liveness with symbolic sizes") {
  SymbolTable st;
  SymExpr T = S("s0");
  std::vector<PlannerBuffer> b = {
      {I(8192) * T, 0, 1},   // normed (fp8 [T, 4096] + pad)
      {I(12288) * T, 1, 3},  // qkv bf16 [T, 6144]
      {I(8192) * T, 2, 3},   // rotary q
      {I(4096) * T, 3, 4},   // attention fp8 out
      {I(8192) * T, 4, 5},   // o_proj bf16
      {I(57344) * T, 6, 7},  // gate_up bf16 [T, 28672]
      {I(14336) * T, 7, 8},  // act fp8
  };
  MemoryPlan p = planMemory(b, st, {{"s0", 64}}, 256);
  CHECK(p.peak_at_hint < p.no_reuse_at_hint);
  CHECK(p.peak_bytes.str().find("s0") != std::string::npos);
  for (int64_t t : {1, 8, 64, 512, 4096}) checkValid(b, p, {{"s0", t}});
  // The largest buffer alone bounds the peak from below.
  CHECK(p.peak_at_hint >= 57344 * 64);
}

TEST_CASE("sizes are aligned up") {
  SymbolTable st;
  MemoryPlan p = planMemory({{I(1), 0, 0}, {I(300), 0, 0}}, st, {}, 256);
  CHECK(p.no_reuse_at_hint == 256 + 512);
  CHECK(p.peak_at_hint == 768);
}
