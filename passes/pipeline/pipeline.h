// The compiler as a library: run a pipeline of passes over a Module and collect the
// report (timings, match counts, canonical ops found, fusions made, decisions).
//
//   fxfuse::compiler::CompileOptions opts;
//   opts.world_size = 2;
//   auto result = fxfuse::compiler::compileModule(module, opts);
//   result.fusions["all_reduce_rms_norm"]
//
// Used by `fxfuse compile`, `fxfuse explain` and `fxfuse verify`.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "passes/toolkit/options.h"
#include "passes/toolkit/pass.h"
#include "ir/graph.h"

namespace fxfuse::compiler {

struct PassRecord {
  std::string name;
  bool changed = false;
  int64_t matches = 0;
  double ms = 0;
  std::map<std::string, int64_t> counters;  // matches by pattern
};

struct CompileResult {
  double compile_ms = 0;  // passes only; the CLI adds load/write time in the report
  size_t nodes_before = 0;
  size_t nodes_after = 0;
  std::vector<PassRecord> passes;
  // Canonical ops present right after canonicalization, by name: rms_norm,
  // fused_add_rms_norm, quant_fp8, silu_and_mul, attention, all_reduce.
  std::map<std::string, int64_t> canonical;
  // Fusions made, by name: rms_norm_quant, fused_add_rms_norm_quant, silu_and_mul_quant,
  // attention_quant, all_reduce_rms_norm, all_reduce_rms_norm_quant.
  std::map<std::string, int64_t> fusions;
  std::vector<Decision> decisions;
  // Lifted scalar inputs of the entry graph (0-d CPU tensors) and the value each had (the
  // recorded or --const value; nullopt: unknown, so no match could rely on it).
  std::vector<std::pair<std::string, std::optional<double>>> lifted_scalars;
  // Symbolic assumptions matches relied on (the module's guards after the passes).
  std::vector<ir::Guard> guards;
};

// The default pass order.
const std::vector<std::string>& defaultPipeline();
// The pipeline a compile with `opts` runs when it names no passes: the default, plus the
// opt-in passes its options turn on (`kv-cache` after the fusions, before cleanup).
std::vector<std::string> defaultPipelineFor(const CompileOptions& opts);

// Runs the pipeline on the module's entry graph (and every nested graph). Throws FxError
// on an unknown pass name and on a verifier failure (naming the pass).
CompileResult compileModule(ir::Module& m, const CompileOptions& opts);

// For each node some pass looked at and left alone, the first reason recorded, as
// "pass: reason" (what lowering says when it cannot lower a node the passes left).
std::map<std::string, std::string> firstReasonLeftByNode(const CompileResult& r);

// Canonical and fused op counts of a graph (by short name, e.g. "rms_norm").
std::map<std::string, int64_t> countCanonicalOps(const ir::Graph& g);
std::map<std::string, int64_t> countFusedOps(const ir::Graph& g);

}  // namespace fxfuse::compiler
