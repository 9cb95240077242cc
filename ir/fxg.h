// `.fxg`: fxfuse's readable, stable text form of a Module (see docs/fxg-format.md).
//
// Printing, parsing and printing again gives identical text. Values are numbered in
// order (graph inputs first), types are written inline, node names are trailing
// `// name` comments, source locations are printed on request.
//
//   fxfuse.module {
//     symbol s0 range=[2, 8192] hint=16
//     graph @main {
//       input %1 "x": bf16[s0, 16] cuda:0
//       input %2 "w": bf16[16] cuda:0 parameter "norm.weight"
//       %3: f32[s0, 16] cuda:0 = prims.convert_element_type.default(a=%1, dtype=f32)  // convert
//       output %3
//     }
//   }
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace fxfuse::ir {

struct FxgPrintOptions {
  bool locations = false;  // append loc("file":line) to nodes that have one
  bool header = true;      // module-level lines (producer, symbols, schemas, weights)
};

std::string printFxg(Module& m, const FxgPrintOptions& opts = {});
std::string printGraphFxg(Graph& g, const FxgPrintOptions& opts = {});

// Parses `.fxg` text. `filename` is used in error messages ("f.fxg:12: ...").
std::unique_ptr<Module> parseFxg(std::string_view text, const std::string& filename = "<fxg>");

// Formats a double so that it parses back to the same value and always reads as a
// float ("2.0", "1e-05").
std::string formatFloat(double v);
std::string typeStr(const Value& v);

}  // namespace fxfuse::ir
