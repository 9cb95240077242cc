// fxfuse: a fusion compiler over PyTorch FX/ATen graphs.
//
// Usage: fxfuse <command> [options]; `fxfuse --help` lists the commands. Errors in the
// input are reported as one line on stderr with exit code 2 (docs/architecture.md, "Errors
// and exit codes": 0 ok, 1 a verification or diff result, 2 bad input or environment, 3 a
// bug in fxfuse). Messages are escaped and capped (printableMessage) so they stay one line.
// The command's output files are all-or-nothing (ir/output_set.h).
// Under `bazel run`, relative paths (inputs and outputs) are relative to the directory bazel
// was run from.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "tools/cli/commands.h"
#include "tools/cli/progress.h"
#include "tools/cli/registry.h"
#include "ir/output_set.h"
#include "ir/status.h"

namespace {

// `bazel run` starts the binary inside its runfiles tree and names the user's directory in
// BUILD_WORKING_DIRECTORY: work from there, so `bazel run //:fxfuse -- convert m.pt2 -o m.fxg`
// reads and writes where the user is. False (with the reason printed) when that fails.
bool enterBazelWorkingDirectory() {
  const char* dir = std::getenv("BUILD_WORKING_DIRECTORY");
  if (!dir || !*dir || chdir(dir) == 0) return true;
  std::fprintf(stderr, "fxfuse: error: cannot enter BUILD_WORKING_DIRECTORY %s: %s\n", dir, std::strerror(errno));
  return false;
}

// Every command takes --quiet; commands with their own -q/--quiet turn progress off themselves.
void addQuietFlags(CLI::App& app) {
  for (CLI::App* cmd : app.get_subcommands({})) {
    if (cmd->get_option_no_throw("--quiet")) continue;
    cmd->add_flag_function(
        "--quiet", [](int64_t) { fxfuse::cli::progress::setQuiet(true); }, "no progress line on stderr");
  }
}

// The message of a bad-input error, naming the command's input file ("input" or "plan", the
// positional argument every command but diff has) where the message does not already: errors
// raised past the readers (the interpreter, the runtime) know nodes and ops, not files.
std::string namingTheInput(const CLI::App& app, const std::string& message) {
  for (const CLI::App* cmd : app.get_subcommands()) {
    for (const char* name : {"input", "plan"}) {
      const CLI::Option* option = cmd->get_option_no_throw(name);
      if (!option || option->results().empty()) continue;
      const std::string& path = option->results().front();
      if (path.empty() || message.find(path) != std::string::npos) return message;
      return path + ": " + message;
    }
  }
  return message;
}

// Runs the command; its output files (-o, --report, --html, --dump-dir, ...) are staged in
// `outputs` and moved into place only when it finishes with 0 or 1: on any failure none is left.
int runCommand(CLI::App& app, int argc, char** argv, int& exit_code, fxfuse::ir::OutputSet& outputs) {
  try {
    app.parse(argc, argv);
    if (exit_code == 0 || exit_code == 1) outputs.commit();
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One line, like every other bad input (CLI11's own exit() adds a second "Run with --help").
    fxfuse::cli::progress::end();  // the status line goes before the error line
    std::fprintf(stderr, "fxfuse: error: %s (see --help)\n", fxfuse::printableMessage(e.what()).c_str());
    return 2;
  } catch (const fxfuse::FxError& e) {
    fxfuse::cli::progress::end();  // the status line goes before the error line
    std::fprintf(stderr, "fxfuse: error: %s\n", fxfuse::printableMessage(namingTheInput(app, e.what())).c_str());
    return 2;
  } catch (const std::bad_alloc&) {
    fxfuse::cli::progress::end();  // the status line goes before the error line
    std::fprintf(stderr, "fxfuse: error: out of memory\n");
    return 2;
  } catch (const std::exception& e) {
    fxfuse::cli::progress::end();  // the status line goes before the error line
    std::fprintf(stderr, "fxfuse: internal error: %s\n", fxfuse::printableMessage(e.what()).c_str());
    return 3;
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  if (!enterBazelWorkingDirectory()) return 2;
  CLI::App app{"fxfuse: a fusion compiler for PyTorch FX/ATen graphs of LLM inference"};
  app.require_subcommand(1);
  int exit_code = 0;
  fxfuse::cli::registerInspect(app, exit_code);
  fxfuse::cli::registerConvert(app, exit_code);
  fxfuse::cli::registerExtraCommands(app, exit_code);
  addQuietFlags(app);
  for (CLI::App* cmd : app.get_subcommands({}))
    cmd->preparse_callback([cmd](size_t) { fxfuse::cli::progress::begin(cmd->get_name()); });
  fxfuse::ir::OutputSet outputs;
  int rc = runCommand(app, argc, argv, exit_code, outputs);
  fxfuse::cli::progress::end();
  return rc;
}
