// Subcommands of the `fxfuse` CLI. Each register function adds one subcommand to the app
// and sets its callback; callbacks throw FxError on bad input (exit code 2) and return
// the process exit code through `exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace fxfuse::cli {

void registerInspect(CLI::App& app, int& exit_code);
void registerConvert(CLI::App& app, int& exit_code);
// Further commands (compile, explain, verify, ...) live next to the code they drive and
// are declared in their own headers; see main.cc.

}  // namespace fxfuse::cli
