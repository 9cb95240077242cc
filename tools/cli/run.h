// `fxfuse run` and `fxfuse bench` (tools/cli/run.cc).
#pragma once

#include <CLI/CLI.hpp>

namespace fxfuse::cli {

void registerRun(CLI::App& app, int& exit_code);
void registerBench(CLI::App& app, int& exit_code);
// `fxfuse embed`: plan + kernels as C++/CUDA sources (tools/fxfuse_plan.bzl).
void registerEmbed(CLI::App& app, int& exit_code);

}  // namespace fxfuse::cli
