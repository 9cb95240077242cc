// The table of fxfuse's own ops: every canonical op (one op per concept, whatever spelling
// the graph used; docs/canonical-ops.md gives the math and rounding points) and every fused
// op (exactly the composition of the canonical ops it replaces). One row per op: its name,
// kind, torch schema string and what a fused op is made of. The schema registry
// (ir/op_schema.cc), the pipeline's counters, the report and inspection all read this table;
// adding an op is adding a row here.
#pragma once

#include <string_view>
#include <vector>

namespace fxfuse::ir {

enum class FxfuseOpKind { Canonical, Fused };

struct FxfuseOpInfo {
  std::string_view name;  // without the "fxfuse." namespace, e.g. "rms_norm_quant"
  FxfuseOpKind kind;
  std::string_view schema;                   // "fxfuse::name(...) -> ..." (torch schema syntax)
  std::vector<std::string_view> fused_from;  // canonical ops a fused op replaces; empty for canonical ops
  // Made only by an opt-in pass (paged_attention: `--kv-cache`): the counters list it only
  // when a graph has it, so compiles without the option report what they always did.
  bool opt_in = false;
};

// Every row, canonical ops first, in a stable order (counters and reports list them in it).
const std::vector<FxfuseOpInfo>& fxfuseOps();

// The row of `name` ("rms_norm" or "fxfuse.rms_norm.default" spellings), or nullptr.
const FxfuseOpInfo* findFxfuseOp(std::string_view name);

inline bool isCanonicalOp(std::string_view name) {
  const FxfuseOpInfo* op = findFxfuseOp(name);
  return op && op->kind == FxfuseOpKind::Canonical;
}

inline bool isFusedOp(std::string_view name) {
  const FxfuseOpInfo* op = findFxfuseOp(name);
  return op && op->kind == FxfuseOpKind::Fused;
}

}  // namespace fxfuse::ir
