// `fxfuse draw IN -o OUT.svg|.png|.pdf|.dot [--shapes] [--after-passes=LIST] [--side-by-side]`:
// the graph as a Graphviz picture (see draw.h for what is collapsed, coloured and marked).
#include <string>

#include <fmt/format.h>

#include "tools/inspect/commands.h"
#include "tools/inspect/draw.h"
#include "tools/inspect/graph_diff.h"
#include "tools/inspect/html_report.h"
#include "tools/inspect/module_util.h"
#include "passes/pipeline/pipeline.h"
#include "ir/io.h"
#include "ir/output_set.h"
#include "ir/status.h"
#include "ir/world_size.h"
#include "tools/cli/flag_checks.h"

namespace fxfuse::inspect {

namespace {

struct DrawArgs {
  std::string in, out;
  std::string after_passes;
  bool shapes = false;
  bool side_by_side = false;
  bool no_collapse = false;
  bool all = false;
  size_t max_nodes = 2500;
  int world_size = kDefaultWorldSize;
};

std::string extensionOf(const std::string& path) {
  size_t dot = path.rfind('.');
  size_t slash = path.rfind('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return {};
  return path.substr(dot + 1);
}

}  // namespace

void registerDraw(CLI::App& app, int& exit_code) {
  static DrawArgs args;
  auto* cmd = app.add_subcommand("draw", "Draw a graph with Graphviz (repeated layers collapsed, fused ops coloured)");
  cmd->add_option("input", args.in, "graph file")->required();
  cmd->add_option("-o,--output", args.out, "output: .svg, .png, .pdf (rendered with Graphviz dot) or .dot")->required();
  cmd->add_flag("--shapes", args.shapes, "label edges with the value types");
  cmd->add_option("--after-passes", args.after_passes,
                  "draw the graph after these passes (comma-separated, or 'default'), marking sites that did not fuse");
  cmd->add_flag("--side-by-side", args.side_by_side, "draw before and after the passes side by side (default pipeline "
                                                     "unless --after-passes)");
  cmd->add_flag("--no-collapse", args.no_collapse, "draw every layer");
  cmd->add_flag("--all", args.all, "also draw SymInt plumbing and assertion nodes");
  cmd->add_option("--max-nodes", args.max_nodes, "refuse pictures with more drawn nodes than this (0: no limit)")
      ->check(CLI::Range(0, 100000000));
  cmd->add_option("--world-size", args.world_size, "tensor-parallel world size for the passes")
      ->check(cli::WorldSizeRange());
  cmd->callback([&exit_code] {
    std::string ext = extensionOf(args.out);
    if (ext.empty()) fail("{}: output needs an extension (.svg, .png, .pdf or .dot)", args.out);
    if (ext != "dot" && ext != "gv" && ext != "svg" && ext != "png" && ext != "pdf" && ext != "jpg")
      fail("{}: unsupported output type '.{}' (use .svg, .png, .pdf or .dot)", args.out, ext);
    auto m = ir::loadModule(args.in);
    DrawOptions opts;
    opts.shapes = args.shapes;
    opts.collapse_layers = !args.no_collapse;
    opts.show_all = args.all;
    opts.max_nodes = args.max_nodes;
    std::string dot;
    if (!args.after_passes.empty() || args.side_by_side) {
      compiler::CompileOptions copts;
      copts.world_size = args.world_size;
      std::string spec = args.after_passes.empty() ? "default" : args.after_passes;
      copts.passes = passList(spec);
      auto after = cloneModule(*m);
      compiler::CompileResult r = compiler::compileModule(*after, copts);
      DrawOptions aopts = opts;
      aopts.notes = siteNotes(r);
      if (args.side_by_side) {
        GraphDiff d = diffGraphs(m->entry(), after->entry());
        opts.title = fmt::format("{}: before / after {}", args.in, spec);
        dot = sideBySideDot(d, opts, aopts);
      } else {
        aopts.title = fmt::format("{} after {}", args.in, spec);
        dot = graphToDot(after->entry(), aopts);
      }
    } else {
      opts.title = args.in;
      dot = graphToDot(m->entry(), opts);
    }
    if (ext == "dot" || ext == "gv") {
      ir::writeOutputFile(args.out, dot);
    } else {
      renderDot(dot, ext, args.out);
    }
    exit_code = 0;
  });
}

}  // namespace fxfuse::inspect
