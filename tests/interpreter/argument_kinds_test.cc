// Every op the interpreter implements, run with each tensor argument in turn replaced by a value
// of another kind (tests/op_sweep.h: a number, a list of numbers, None; ops without a built-in
// schema through a carried one, with a number): the run must end in a result or an FxError (one
// line naming the node in the CLI), never a crash. The pipeline fuzzer found ops that took the
// tensor of a non-tensor argument (clamp's `self`, stack's items) and read a tensor without
// storage; this test covers the whole op table at once.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <string>

#include "ir/status.h"
#include "tests/interpreter/test_util.h"
#include "tests/op_sweep.h"

using namespace fxfuse::interp;
using namespace fxfuse::interp::test;
using fxfuse::FxError;
using fxfuse::test::SweepCase;

namespace {

// Runs each case on x = f32[4]; returns how many ended in an FxError that is not "unknown op".
int runCases(const std::vector<SweepCase>& cases, int* unknown_ops) {
  const Tensor x = T({4}, fxfuse::DType::F32, {1, 2, 3, 4});
  int refused = 0;
  for (const SweepCase& c : cases) {
    INFO(c.header << c.line);
    try {
      run(c.graph, {x}, {}, c.header);
    } catch (const FxError& e) {
      const bool unknown = std::string(e.what()).find("unknown op") != std::string::npos;
      *unknown_ops += unknown;
      refused += !unknown;
    }
  }
  return refused;
}

}  // namespace

TEST_CASE("every interpreter op refuses a non-tensor where a tensor is expected, without crashing",
          "[ops][robustness]") {
  const auto cases = fxfuse::test::schemaCases(
      [](const fxfuse::ir::OpSchema& s) { return OpTable::get().find(s.target()) != nullptr; });
  int unknown = 0;
  const int refused = runCases(cases, &unknown);
  INFO(fmt::format("{} runs, {} refused", cases.size(), refused));
  CHECK(cases.size() > 300);  // the registry's ops with tensor arguments, three kinds each
  CHECK(refused > static_cast<int>(cases.size()) / 2);
  CHECK(unknown == 0);
}

TEST_CASE("every interpreter op refuses a tensor, list or string in a non-tensor slot, without crashing",
          "[ops][robustness]") {
  const auto cases = fxfuse::test::schemaCases(
      [](const fxfuse::ir::OpSchema& s) { return OpTable::get().find(s.target()) != nullptr; }, /*other_slots=*/true);
  int unknown = 0;
  const int refused = runCases(cases, &unknown);
  INFO(fmt::format("{} runs, {} refused", cases.size(), refused));
  CHECK(cases.size() > 300);
  CHECK(refused > static_cast<int>(cases.size()) / 2);
  CHECK(unknown == 0);
}

TEST_CASE("every interpreter op in every dtype and edge shape gives a result or an FxError, without crashing", "[ops][robustness]") {
  auto implemented = [](const fxfuse::ir::OpSchema& s) { return OpTable::get().find(s.target()) != nullptr; };
  auto cases = fxfuse::test::dtypeCases(implemented);
  for (auto& c : fxfuse::test::shapeCases(implemented)) cases.push_back(std::move(c));
  for (auto& c : fxfuse::test::symbolicCases(implemented)) cases.push_back(std::move(c));
  int unknown = 0;
  const int refused = runCases(cases, &unknown);
  INFO(fmt::format("{} runs, {} refused", cases.size(), refused));
  CHECK(cases.size() > 2000);
  CHECK(refused < static_cast<int>(cases.size()));  // most ops take most dtypes
  CHECK(unknown == 0);
}

TEST_CASE("interpreter ops without a built-in schema refuse numbers in tensor slots, without crashing",
          "[ops][robustness]") {
  std::set<std::string> with_schema;
  for (const auto& [name, schema] : fxfuse::ir::OpRegistry::builtin().all()) {
    const std::string t = schema.target();
    with_schema.insert(t), with_schema.insert(t.substr(0, t.rfind('.')));
  }
  std::vector<SweepCase> cases;
  int ops = 0;
  for (const std::string& op : OpTable::get().names()) {
    // Ops without a built-in schema load only from files that carry one, and such a file may say
    // Tensor for any argument: aten and prims slots then take numbers (torch wraps them).
    if (with_schema.count(op) || !(fxfuse::test::startsWith(op, "aten.") || fxfuse::test::startsWith(op, "prims.")))
      continue;
    ++ops;
    for (SweepCase& c : fxfuse::test::carriedSchemaCases(op)) cases.push_back(std::move(c));
  }
  int unknown = 0;
  runCases(cases, &unknown);
  INFO(fmt::format("{} ops, {} runs", ops, cases.size()));
  CHECK(ops > 0);  // the few the interpreter runs that torch spells without a public schema
  CHECK(unknown == 0);  // the carried schemas load: every run is the op's own
}

// A graph file without schemas loads every op of the built-in registry; `verify` and GPU parity
// then need the interpreter to run it.
TEST_CASE("the interpreter runs every aten and prims op of the built-in schema registry", "[ops]") {
  std::set<std::string> missing;
  for (const auto& [name, schema] : fxfuse::ir::OpRegistry::builtin().all()) {
    const std::string t = schema.target();
    if (!(fxfuse::test::startsWith(t, "aten.") || fxfuse::test::startsWith(t, "prims."))) continue;
    // In-place ops without an op of their own (add_) run as their functional op and a copy back.
    const size_t overload = t.rfind('.');
    const bool in_place = overload != std::string::npos && overload > 0 && t[overload - 1] == '_' &&
                          t.compare(overload - 2, 2, "__") != 0;
    const std::string functional = in_place ? t.substr(0, overload - 1) + t.substr(overload) : t;
    if (!OpTable::get().find(t) && !OpTable::get().find(functional)) missing.insert(t);
  }
  INFO(fmt::format("no interpreter op: {}", fmt::join(missing, " ")));
  CHECK(missing.empty());
}

TEST_CASE("integer arguments are read exactly, and floats outside int64 are refused", "[values]") {
  CHECK(integerOf(RValue::ofInt(INT64_MAX)) == INT64_MAX);  // sys.maxsize: "to the end" of a slice
  CHECK(integerOf(RValue::ofInt(INT64_MIN)) == INT64_MIN);
  CHECK(integerOf(RValue::ofBool(true)) == 1);
  CHECK(integerOf(RValue::ofFloat(-3.0)) == -3);
  CHECK(integerOf(RValue::ofFloat(-9223372036854775808.0)) == INT64_MIN);
  CHECK_FALSE(integerOf(RValue::ofFloat(9223372036854775808.0)));  // 2^63: no int64
  CHECK_FALSE(integerOf(RValue::ofFloat(1e300)));
  CHECK_FALSE(integerOf(RValue::ofFloat(2.5)));
  CHECK_FALSE(integerOf(RValue::ofFloat(std::nan(""))));
  CHECK_FALSE(integerOf(RValue::ofStr("7")));
  CHECK_FALSE(integerOf(RValue{}));
}
