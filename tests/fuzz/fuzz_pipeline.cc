// Fuzz target: the whole pipeline past the readers. A `.fxg` text goes through import ->
// verifier -> every pass (default pipeline, verifier after each) -> the CPU interpreter on
// small shapes (before and after compilation) -> lowering to a launch plan -> plan text
// round trip. Any stage may reject the input with FxError; anything else (a crash, a
// sanitizer report, another exception, a plan whose text form does not parse back to the
// same plan) is a finding.
//
// LLVMFuzzerCustomMutator (fxg_mutator.h) mutates the text structurally: op targets from the
// built-in op schema table, dimensions, symbols, dtypes, operands and attribute nesting.
#include <cstdint>
#include <memory>
#include <string>

#include "tools/interpreter/interpreter.h"
#include "compiler/lowering/lowering.h"
#include "passes/pipeline/pipeline.h"
#include "ir/fxg.h"
#include "ir/status.h"
#include "ir/validate.h"
#include "ir/verifier.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fxg_mutator.h"

namespace {

using fxfuse::FxError;
namespace ir = fxfuse::ir;
namespace interp = fxfuse::interp;

// Interpreter work cap: every tensor of the graph, evaluated at the bound sizes, must have at
// most this many elements, else the graph is not interpreted (passes and lowering still run).
constexpr int64_t kMaxElements = 1 << 14;
constexpr int64_t kSmallSymbol = 4;

bool smallTensor(interp::Interpreter& in, const ir::Value* v) {
  if (!v || !v->isTensor()) return true;
  interp::Shape s = in.evalShape(v->type.shape, "fuzz");
  int64_t numel = 1;
  for (int64_t d : s) {
    if (d < 0 || d > kMaxElements) return false;
    numel *= d == 0 ? 1 : d;
    if (numel > kMaxElements) return false;
  }
  return true;
}

bool smallEnough(interp::Interpreter& in, const ir::Graph& g) {
  for (const auto& input : g.inputs())
    if (!smallTensor(in, input.value)) return false;
  for (const auto& n : g.nodes())
    for (const auto* v : n->outputs())
      if (!smallTensor(in, v)) return false;
  return true;
}

// Runs the entry graph on seeded inputs with every symbol bound small. FxError is a clean
// rejection (an op the interpreter does not support, a shape it cannot evaluate).
void interpretSmall(ir::Module& m) {
  interp::Options o;
  o.default_symbol_size = kSmallSymbol;
  o.world_size = 2;
  for (const auto& [name, info] : m.symbols.all()) {
    int64_t v = kSmallSymbol;
    if (info.min && v < *info.min) v = *info.min;
    if (info.max && v > *info.max) v = *info.max;
    o.bind[name] = v;
  }
  try {
    interp::Interpreter in(m, o);
    if (!smallEnough(in, in.entry())) return;
    auto inputs = in.makeInputs(1);
    (void)in.run(inputs);
  } catch (const FxError&) {
  } catch (const std::bad_alloc&) {
    // the CLI reports this as "out of memory", exit 2: a clean rejection here too
  }
}

void lowerAndRoundTrip(ir::Module& m) {
  fxfuse::lowering::LowerOptions lo;
  lo.source = "fuzz.fxg";
  fxfuse::plan::v1::Plan plan;
  try {
    plan = fxfuse::lowering::lowerModule(m, lo);
  } catch (const FxError&) {
    return;
  }
  std::string text = fxfuse::lowering::planToText(plan);
  fxfuse::plan::v1::Plan again;
  try {
    again = fxfuse::lowering::parsePlan(text, /*text=*/true, "plan.txt");
  } catch (const FxError& e) {
    fxfuse::fuzz::finding("lowered plan's text form does not parse back", std::string(e.what()) + "\n" + text);
  }
  if (fxfuse::lowering::planToText(again) != text) fxfuse::fuzz::finding("plan text round trip differs", text);
  (void)fxfuse::lowering::describePlan(again);
}

void pipeline(std::string_view text) {
  std::unique_ptr<ir::Module> m;
  try {
    // What the CLI's compute commands do after import (ir::loadModuleForCompute): validation
    // at the door, the verifier, every op node against its schema.
    m = ir::parseFxg(text, "fuzz.fxg");
    ir::validateModule(*m, "fuzz.fxg");
    ir::verifyOrThrow(*m, "fuzz.fxg");
    ir::validateNodesAgainstSchemas(*m, "fuzz.fxg");
  } catch (const FxError&) {
    return;
  }
  interpretSmall(*m);
  try {
    fxfuse::compiler::CompileOptions co;
    co.world_size = 2;
    co.verify_each_pass = co.check_change_flags = true;
    (void)fxfuse::compiler::compileModule(*m, co);
  } catch (const FxError&) {
    return;
  }
  interpretSmall(*m);
  (void)ir::printFxg(*m);
  lowerAndRoundTrip(*m);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  return fxfuse::fuzz::runStages("the pipeline", [&] { pipeline(text); });
}
