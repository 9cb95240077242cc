// `fxfuse diff A [B] [--after-passes=LIST] [--json] [--color=auto|always|never]`: structural
// diff of two graphs (entry graphs), or of one graph before and after compiler passes.
// Exit code: 0 no differences, 1 differences, 2 bad input (like diff(1)).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "tools/inspect/commands.h"
#include "tools/inspect/diff_format.h"
#include "tools/inspect/graph_diff.h"
#include "tools/inspect/html_report.h"
#include "tools/inspect/module_util.h"
#include "passes/pipeline/pipeline.h"
#include "ir/io.h"
#include "ir/status.h"
#include "ir/world_size.h"
#include "tools/cli/flag_checks.h"

namespace fxfuse::inspect {

namespace {

struct DiffArgs {
  std::string a, b;
  std::string after_passes;
  bool json = false;
  std::string color = "auto";
  bool no_locations = false;
  int world_size = kDefaultWorldSize;
};

bool useColor(const std::string& mode) {
  if (mode == "always") return true;
  if (mode == "never") return false;
  const char* no_color = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  if (no_color && *no_color) return false;
  if (term && std::string(term) == "dumb") return false;
  return isatty(fileno(stdout)) != 0;
}

}  // namespace

void registerDiff(CLI::App& app, int& exit_code) {
  static DiffArgs args;
  auto* cmd = app.add_subcommand("diff", "Structural diff of two graphs, or of one graph before/after compiler passes");
  cmd->add_option("a", args.a, "first graph (before)")->required();
  cmd->add_option("b", args.b, "second graph (after); omit with --after-passes to diff IN against IN compiled");
  cmd->add_option("--after-passes", args.after_passes,
                  "run these passes (comma-separated, or 'default') on a copy of A and diff against it; with two "
                  "inputs, run them on both");
  cmd->add_flag("--json", args.json, "print one JSON object");
  cmd->add_option("--color", args.color, "colour the text output: auto (terminal only), always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}));
  cmd->add_flag("--no-locations", args.no_locations, "do not use source locations to pair equal candidates");
  cmd->add_option("--world-size", args.world_size, "tensor-parallel world size for --after-passes")
      ->check(cli::WorldSizeRange());
  cmd->callback([&exit_code] {
    if (args.b.empty() && args.after_passes.empty())
      fail("diff: give two graphs, or one graph and --after-passes=LIST");
    compiler::CompileOptions copts;
    copts.world_size = args.world_size;
    if (!args.after_passes.empty()) copts.passes = passList(args.after_passes);
    auto ma = ir::loadModule(args.a);
    std::unique_ptr<ir::Module> mb;
    std::string name_a = args.a, name_b;
    if (args.b.empty()) {
      mb = cloneModule(*ma);
      compiler::compileModule(*mb, copts);
      name_b = fmt::format("{} after {}", args.a, args.after_passes);
    } else {
      mb = ir::loadModule(args.b);
      name_b = args.b;
      if (!args.after_passes.empty()) {
        compiler::compileModule(*ma, copts);
        compiler::compileModule(*mb, copts);
        name_a += " after " + args.after_passes;
        name_b += " after " + args.after_passes;
      }
    }
    DiffOptions dopts;
    dopts.use_locations = !args.no_locations;
    GraphDiff d = diffGraphs(ma->entry(), mb->entry(), dopts);
    if (args.json) {
      fmt::print("{}\n", diffJson(d, name_a, name_b).dump(2));
    } else {
      DiffTextOptions topts;
      topts.color = useColor(args.color);
      topts.name_a = name_a;
      topts.name_b = name_b;
      fmt::print("{}", diffText(d, topts));
    }
    std::fflush(stdout);
    exit_code = d.identical() ? 0 : 1;
  });
}

}  // namespace fxfuse::inspect
