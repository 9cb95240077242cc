// Lowering's side of tests/interpreter/argument_kinds_test.cc: every op of the built-in schema
// registry with a number, a list of numbers or None in each tensor slot, a tensor, a list or a
// string in each other slot, and bf16 tensors of edge and symbolic shapes (tests/op_sweep.h),
// lowered as read and after the default pass pipeline — as `fxfuse compile --emit=plan` does —
// must give a plan or an FxError (one line naming the node), never a crash.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <set>
#include <string>
#include <vector>

#include "compiler/lowering/lowering.h"
#include "ir/fxg.h"
#include "ir/status.h"
#include "passes/pipeline/pipeline.h"
#include "tests/op_sweep.h"

namespace {

// Parses and lowers one case, with the pass pipeline first when `compile`; true when a plan
// came out, false on an FxError.
bool lowers(const fxfuse::test::SweepCase& c, bool compile) {
  try {
    auto m = fxfuse::ir::parseFxg("fxfuse.module {\n" + c.header + c.graph + "\n}\n", "<sweep>");
    if (compile) fxfuse::compiler::compileModule(*m, fxfuse::compiler::CompileOptions{});
    fxfuse::lowering::lowerModule(*m, fxfuse::lowering::LowerOptions{});
    return true;
  } catch (const fxfuse::FxError&) {
    return false;
  }
}

}  // namespace

TEST_CASE("lowering refuses a value of the wrong kind in any slot, without crashing", "[lowering][robustness]") {
  auto cases = fxfuse::test::schemaCases([](const fxfuse::ir::OpSchema&) { return true; });
  for (auto& c : fxfuse::test::schemaCases([](const fxfuse::ir::OpSchema&) { return true; }, /*other_slots=*/true))
    cases.push_back(std::move(c));
  // Edge and symbolic shapes in bf16 (dtype_sweep_codegen_test lowers them in f32, with NVRTC).
  for (auto& c : fxfuse::test::shapeCases([](const fxfuse::ir::OpSchema&) { return true; }, {"bf16"}))
    cases.push_back(std::move(c));
  for (auto& c : fxfuse::test::symbolicCases([](const fxfuse::ir::OpSchema&) { return true; }, {"bf16"}))
    cases.push_back(std::move(c));
  int plans = 0;
  for (const auto& c : cases) {
    INFO(c.line);
    for (bool compile : {false, true}) plans += lowers(c, compile);
  }
  INFO(fmt::format("{} cases, {} lowered to a plan", cases.size(), plans));
  CHECK(cases.size() > 600);
  CHECK(plans > 0);  // some ops take a number there (torch wraps it): the sweep reaches lowering
}

// A graph file without schemas (FX text dumps, .fxg) loads only ops of the built-in registry,
// and the sweeps above reach only those: every aten and prims op lowering has a rule for needs one.
TEST_CASE("every aten and prims op lowering has a rule for has a built-in schema", "[lowering][ops]") {
  std::set<std::string> with_schema, missing;
  for (const auto& [name, schema] : fxfuse::ir::OpRegistry::builtin().all()) with_schema.insert(schema.target());
  const std::vector<std::string> targets = fxfuse::lowering::LoweredTargets();
  for (const std::string& target : targets)
    if ((fxfuse::test::startsWith(target, "aten.") || fxfuse::test::startsWith(target, "prims.")) &&
        !with_schema.count(target))
      missing.insert(target);
  INFO(fmt::format("without a built-in schema: {}", fmt::join(missing, " ")));
  CHECK(targets.size() > 150);
  CHECK(missing.empty());
}
