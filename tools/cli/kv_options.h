// Serving-batch options shared by `fxfuse verify` and `fxfuse run` for graphs and plans with
// paged KV-cache attention (the kv-cache pass, docs/interpreter.md "Serving batches"): the
// --kv-batch/--kv-context/--kv-query-len flags and the reference graph both commands compare
// against.
#pragma once

#include <CLI/CLI.hpp>

#include "ir/graph.h"
#include "passes/toolkit/options.h"
#include "tools/interpreter/kv_batch.h"

namespace fxfuse::cli {

// --kv-batch, --kv-context, --kv-query-len into `o`.
void addKvBatchFlags(CLI::App* cmd, interp::KvBatchOptions& o);

// With --kv-cache the compiled graph reads a paged cache and new batch inputs, which the
// input lacks: the reference becomes the input with the same passes minus the fusions (so it
// has the same paged attention and inputs, and the fusions are still checked).
void compileKvReference(ir::Module& ref, const compiler::CompileOptions& co);

}  // namespace fxfuse::cli
