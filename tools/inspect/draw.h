// Graph pictures through Graphviz (`fxfuse draw`, the HTML report).
//
// graphToDot() writes a DOT description that stays readable on real models:
// * repeated layers are collapsed: nodes are grouped by the integer index in their
//   nn_module_stack path (`model.layers.7.mlp` -> layer 7 of `model.layers`), or, without
//   module stacks, by the layer index in the names of the parameters they read; nodes
//   without a module path (fused nodes, shape plumbing) take the layer of their users. A
//   run of consecutive layers with the same structure is drawn once, as one cluster
//   labelled "model.layers.0 .. 31  x32";
// * canonical fxfuse ops, fused fxfuse ops, custom ops (vLLM `_C.*`) and higher-order ops
//   have their own colours; a legend is drawn;
// * candidate sites that did not fuse are marked (red double border) with a note giving the
//   pattern and the reason from the compiler's decision log;
// * parameters and buffers are not drawn as nodes: their names are listed in the label of
//   the op that reads them; SymInt-only plumbing (sym_size, sym arithmetic) and assertion
//   nodes are hidden unless `show_all`;
// * with `shapes`, edges are labelled with the value's type.
//
// renderDot() runs Graphviz's `dot` program (DOT on its stdin); `$FXFUSE_DOT` overrides the
// program path.
#pragma once

#include <string>
#include <unordered_set>
#include <vector>

#include "tools/inspect/graph_diff.h"
#include "ir/graph.h"

namespace fxfuse::inspect {

// One candidate site from the compiler's decision log.
struct SiteNote {
  std::string node;     // anchor node name
  std::string pass;
  std::string pattern;
  bool applied = false;
  std::string reason;
};

struct DrawOptions {
  bool shapes = false;
  bool collapse_layers = true;
  bool show_all = false;  // also draw sym plumbing and assertion nodes
  bool legend = true;
  std::string title;
  std::vector<SiteNote> notes;  // unapplied ones are marked on the picture
  // Refuse (FxError) pictures with more drawn nodes than this; 0 = no limit.
  size_t max_nodes = 2500;
  // Highlight the nodes of this diff's regions: removed ones when drawing its graph A
  // (`diff_side_a`), new ones when drawing its graph B.
  const GraphDiff* diff = nullptr;
  bool diff_side_a = false;
};

std::string graphToDot(const ir::Graph& g, const DrawOptions& opts);

// Before and after side by side: removed regions highlighted in the left picture, new nodes
// in the right one.
std::string sideBySideDot(const GraphDiff& d, const DrawOptions& before, const DrawOptions& after);

// Number of nodes graphToDot() would draw (after collapsing/hiding).
size_t drawnNodeCount(const ir::Graph& g, const DrawOptions& opts);

// Path of the `dot` program, or empty when it is not installed.
std::string dotProgram();
// Renders DOT to `format` ("svg", "png", "pdf", ...) into `out_path`. Throws FxError when
// `dot` is missing or fails (with its stderr).
void renderDot(const std::string& dot, const std::string& format, const std::string& out_path);
// Renders DOT to SVG and returns the SVG document without its XML prolog/doctype (ready to
// be inlined in HTML).
std::string renderSvgInline(const std::string& dot);

}  // namespace fxfuse::inspect
