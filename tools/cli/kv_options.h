// Serving-batch options shared by `fxfuse verify`, `run` and `bench` for graphs and plans with
// paged KV-cache attention (the kv-cache pass, docs/interpreter.md "Serving batches"): the
// --kv-batch/--kv-context/--kv-query-len flags, the reference graph `verify` and `run` compare
// against, and the batch `bench` sets up from the plan alone (no interpreter, no host copy of
// the weights).
#pragma once

#include <map>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "ir/graph.h"
#include "passes/toolkit/options.h"
#include "proto/fxfuse_plan.pb.h"
#include "tools/interpreter/kv_batch.h"

namespace fxfuse::cli {

// --kv-batch, --kv-context, --kv-query-len into `o`.
void addKvBatchFlags(CLI::App* cmd, interp::KvBatchOptions& o);

// With --kv-cache the compiled graph reads a paged cache and new batch inputs, which the
// input lacks: the reference becomes the input with the same passes minus the fusions (so it
// has the same paged attention and inputs, and the fusions are still checked).
void compileKvReference(ir::Module& ref, const compiler::CompileOptions& co);

// Where a kv-cache plan reads its batch: the plan input of each argument of its paged steps
// (slot_mapping, block_table, seq_lens, query_start_loc, key_cache). Empty for other plans.
std::map<std::string, int> pagedPlanInputs(const plan::v1::Plan& plan);

// The serving batch of a kv-cache plan, chosen as the interpreter chooses it
// (Interpreter::planKvBatch): the token count is --bind's, else batch x --kv-query-len, else
// the token symbol's hint; then kv_num_seqs, kv_max_blocks and kv_num_blocks are bound to fit
// the batch's contexts (a symbol given with --bind keeps its value). `binds` gains those
// values; the result is empty for plans without paged steps.
std::optional<interp::KvBatchPlan> planKvBatchOfPlan(const plan::v1::Plan& plan, std::map<std::string, int64_t>& binds,
                                                     const interp::KvBatchOptions& o, uint64_t seed);

}  // namespace fxfuse::cli
