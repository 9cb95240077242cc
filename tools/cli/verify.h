// `fxfuse verify` (tools/cli/verify.cc, docs/interpreter.md):
//
//   fxfuse verify IN [--passes=...] [--world-size=N] [--bind s0=37] [--seed N]
//   fxfuse verify A --against B
//
// Runs a graph before and after compilation (or two graphs) in the CPU reference
// interpreter on the same seeded inputs and compares every output. Exit code 0 when all
// outputs match, 1 on a mismatch, 2 on bad input.
#pragma once

#include <CLI/CLI.hpp>

namespace fxfuse::cli {

void registerVerify(CLI::App& app, int& exit_code);

}  // namespace fxfuse::cli
