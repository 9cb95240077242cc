#include "tools/cli/registry.h"

#include "tools/cli/compile.h"
#include "tools/cli/run.h"
#include "tools/cli/verify.h"
#include "tools/inspect/commands.h"

namespace fxfuse::cli {

void registerExtraCommands(CLI::App& app, int& exit_code) {
  registerCompile(app, exit_code);
  registerExplain(app, exit_code);
  registerRun(app, exit_code);
  registerBench(app, exit_code);
  registerEmbed(app, exit_code);
  registerVerify(app, exit_code);
  fxfuse::inspect::registerDiff(app, exit_code);
  fxfuse::inspect::registerDraw(app, exit_code);
}

}  // namespace fxfuse::cli
