// The HTML compile report: `fxfuse compile IN --html=REPORT.html` calls writeHtmlReport().
//
// One self-contained file (inline CSS, JS and SVG; no external URL): the pass table (time,
// changed, matches by pattern), canonical-op and fusion counts, every fused and every
// unfused candidate site with its explanation, the structural diff before -> after, and the
// before/after pictures (Graphviz, when `dot` is installed; otherwise a note says so).
#pragma once

#include <string>
#include <vector>

#include "tools/inspect/draw.h"
#include "passes/pipeline/pipeline.h"
#include "ir/graph.h"

namespace fxfuse::inspect {

struct HtmlReportInput {
  std::string input_path;                               // what was compiled
  std::string output_path;                              // compiled output file, if written
  ir::Module* before = nullptr;                         // a copy taken before compiling (cloneModule)
  ir::Module* after = nullptr;                          // the compiled module
  const compiler::CompileResult* result = nullptr;
  const compiler::CompileOptions* options = nullptr;    // optional
  double load_ms = 0;                                   // optional timings shown in the header
  double write_ms = 0;
  bool pictures = true;                                 // draw before/after pictures
};

std::string htmlReport(const HtmlReportInput& in);
// Writes htmlReport(in) atomically to `path`.
void writeHtmlReport(const std::string& path, const HtmlReportInput& in);

// The compiler's decisions as picture annotations.
std::vector<SiteNote> siteNotes(const compiler::CompileResult& r);
// "default" or "all" -> the default pipeline; otherwise a comma-separated list of pass names.
std::vector<std::string> passList(const std::string& spec);

}  // namespace fxfuse::inspect
