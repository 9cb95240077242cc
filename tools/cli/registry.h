// Hook for subcommands implemented outside tools/cli (compile, explain, verify, run,
// diff, ...). registry.cc calls each module's register function.
#pragma once

#include <CLI/CLI.hpp>

namespace fxfuse::cli {

void registerExtraCommands(CLI::App& app, int& exit_code);

}  // namespace fxfuse::cli
