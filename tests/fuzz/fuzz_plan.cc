// Fuzz target: launch plans, the way `fxfuse run`, `bench` and `embed` load them
// (compiler/lowering/plan_io.cc parsePlan: protobuf text or binary, told apart by content,
// then the structural checks), then everything that reads a loaded plan without a GPU:
// describePlan, the weight-prefetch placement, and every symbolic size the runtime evaluates
// when it binds (lowering's ForEachPlanSymExpr, and the guards) with each symbol at its hint,
// minimum or 1: parsePlan has read each expression, so reading one again may not throw. A plan that
// loads must print to text and binary forms that load back to the same plan. FxError is a
// clean rejection; anything else (a crash, a sanitizer report, another exception) is a finding.
#include <cstdint>
#include <map>
#include <string>

#include "compiler/lowering/lowering.h"
#include "compiler/runtime/weight_prefetch.h"
#include "ir/graph.h"
#include "ir/proto_io.h"
#include "ir/sniff.h"
#include "ir/status.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

using fxfuse::FxError;
namespace ir = fxfuse::ir;
namespace pb = fxfuse::plan::v1;
using Env = std::map<std::string, int64_t>;

void evaluateSizes(const pb::Plan& p) {
  Env env;
  for (const auto& s : p.symbols())
    env[s.name()] = s.has_hint() ? s.hint() : s.has_min() ? s.min() : 1;
  fxfuse::lowering::ForEachPlanSymExpr(p, [&](const fxfuse::ir::v1::SymExpr& e, const char*, int) {
    const ir::SymExpr x = ir::symExprFromProto(e, "fuzz plan");  // read at load: may not throw
    try {
      (void)x.evaluate(env);
    } catch (const FxError&) {
      // an overflow at these sizes: the runtime refuses the binding in one line
    }
  });
  try {
    ir::checkGuards(ir::guardsFromProto(p.guards(), "fuzz plan"), env, "fuzz plan");
  } catch (const FxError&) {
    // a guard the hints violate: the runtime refuses such a binding the same way
  }
}

void roundTrip(const pb::Plan& p) {
  const std::string text = fxfuse::lowering::planToText(p), binary = fxfuse::lowering::planToBinary(p);
  pb::Plan from_text, from_binary;
  try {
    from_text = fxfuse::lowering::parsePlan(text, /*text=*/true, "reprint.plan.txt");
    from_binary = fxfuse::lowering::parsePlan(binary, /*text=*/false, "reprint.plan.pb");
  } catch (const FxError& e) {
    fxfuse::fuzz::finding("a loaded plan's printed form does not load back", std::string(e.what()) + "\n" + text);
  }
  if (fxfuse::lowering::planToBinary(from_text) != binary)
    fxfuse::fuzz::finding("plan text round trip differs", text);
  if (fxfuse::lowering::planToBinary(from_binary) != binary)
    fxfuse::fuzz::finding("plan binary round trip differs", text);
}

void loadAndRead(const std::string& bytes) {
  const ir::FileFormat format = ir::sniffFormat(bytes);
  if (format != ir::FileFormat::kPlanText && format != ir::FileFormat::kPlanBinary) return;
  pb::Plan p;
  try {
    p = fxfuse::lowering::parsePlan(bytes, format == ir::FileFormat::kPlanText, "fuzz.plan");
  } catch (const FxError&) {
    return;
  }
  (void)fxfuse::lowering::describePlan(p);
  (void)fxfuse::runtime::PlanWeightPrefetches(p);
  evaluateSizes(p);
  roundTrip(p);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fxfuse::fuzz::runStages("the plan reader", [&] { loadAndRead(std::string(reinterpret_cast<const char*>(data), size)); });
}
