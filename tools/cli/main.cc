// fxfuse: a fusion compiler over PyTorch FX/ATen graphs.
//
// Usage: fxfuse <command> [options]; `fxfuse --help` lists the commands. Errors in the
// input are reported as one line on stderr with exit code 2.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "tools/cli/commands.h"
#include "tools/cli/registry.h"
#include "ir/status.h"

int main(int argc, char** argv) {
  CLI::App app{"fxfuse: a fusion compiler for PyTorch FX/ATen graphs of LLM inference"};
  app.require_subcommand(1);
  int exit_code = 0;
  fxfuse::cli::registerInspect(app, exit_code);
  fxfuse::cli::registerConvert(app, exit_code);
  fxfuse::cli::registerExtraCommands(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other bad input (CLI11's own exit() adds a second "Run with --help").
    std::fprintf(stderr, "fxfuse: error: %s (see --help)\n", e.what());
    return 2;
  } catch (const fxfuse::FxError& e) {
    std::fprintf(stderr, "fxfuse: error: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "fxfuse: error: out of memory\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fxfuse: internal error: %s\n", e.what());
    return 3;
  }
  return exit_code;
}
