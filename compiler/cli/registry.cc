#include "compiler/cli/registry.h"

namespace fxfuse::cli {

void registerExtraCommands(CLI::App& app, int& exit_code) {
  (void)app;
  (void)exit_code;
}

}  // namespace fxfuse::cli
