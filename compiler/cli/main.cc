// fxfuse: a fusion compiler over PyTorch FX/ATen graphs.
//
// Usage: fxfuse <command> [options]; `fxfuse --help` lists the commands. Errors in the
// input are reported as one line on stderr with exit code 2; the command's output files are
// all-or-nothing (ir/output_set.h).
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "compiler/cli/commands.h"
#include "compiler/cli/registry.h"
#include "ir/output_set.h"
#include "ir/status.h"

int main(int argc, char** argv) {
  CLI::App app{"fxfuse: a fusion compiler for PyTorch FX/ATen graphs of LLM inference"};
  app.require_subcommand(1);
  int exit_code = 0;
  fxfuse::cli::registerInspect(app, exit_code);
  fxfuse::cli::registerConvert(app, exit_code);
  fxfuse::cli::registerExtraCommands(app, exit_code);
  // Every file the command writes (-o, --report, --html, --dump-dir, ...) is staged here and
  // moved into place only when the command finishes with 0 or 1; on any failure none is left.
  fxfuse::ir::OutputSet outputs;
  try {
    app.parse(argc, argv);
    if (exit_code == 0 || exit_code == 1) outputs.commit();
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
