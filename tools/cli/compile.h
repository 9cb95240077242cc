// `fxfuse compile` and `fxfuse explain` (tools/cli/compile.cc).
#pragma once

#include <CLI/CLI.hpp>

namespace fxfuse::cli {

void registerCompile(CLI::App& app, int& exit_code);
void registerExplain(CLI::App& app, int& exit_code);

}  // namespace fxfuse::cli
