// CLI subcommands of the inspection tools, registered from tools/cli/registry.cc:
//   fxfuse diff A [B] [--after-passes=LIST] [--json] [--color=auto|always|never]
//   fxfuse draw IN -o OUT.svg|.png|.dot [--shapes] [--after-passes=LIST] [--side-by-side]
// See docs/inspection.md.
#pragma once

#include <CLI/CLI.hpp>

namespace fxfuse::inspect {

void registerDiff(CLI::App& app, int& exit_code);
void registerDraw(CLI::App& app, int& exit_code);

}  // namespace fxfuse::inspect
