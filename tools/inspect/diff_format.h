// Text and JSON renderings of a GraphDiff (`fxfuse diff`, `--json`, the HTML report).
//
// Text (one block per region, in graph order; `-` lines are nodes of A, `+` nodes of B):
//
//   diff a.fxg -> b.fxg: 41 -> 35 nodes, 31 matched
//   3 rewritten, 1 removed, 0 added
//     3x  quant_fp8 + rms_norm -> rms_norm_quant
//
//   @@ rewritten #1: quant_fp8 + rms_norm -> rms_norm_quant  [model.py:42]
//   - norm = fxfuse.rms_norm(%x, %w, epsilon=1e-06)                 model.py:42
//   - q, _ = fxfuse.quant_fp8(%norm, %s, kind="static_tensor")     model.py:43
//   + q = fxfuse.rms_norm_quant(%x, %w, %s, epsilon=1e-06, ...)     model.py:42
//
// JSON: {"a": {...}, "b": {...}, "matched": N, "summary": {...},
//        "rewritten": [{"id", "summary", "removed": [node...], "added": [node...],
//                       "locations": [...]}],
//        "removed": [{"id", "summary", "nodes": [...], "locations"}], "added": [...same]}
// with node = {"name", "target", "text", "types", "loc": {"file","line","code"}|null, "module"}.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "tools/inspect/graph_diff.h"

namespace fxfuse::inspect {

struct DiffTextOptions {
  bool color = false;     // ANSI colours
  std::string name_a = "a";
  std::string name_b = "b";
  size_t max_nodes_per_region = 40;  // longer regions are cut with a count
};

std::string diffText(const GraphDiff& d, const DiffTextOptions& opts);
nlohmann::json diffJson(const GraphDiff& d, const std::string& name_a, const std::string& name_b);
nlohmann::json nodeJson(const ir::Node& n);

}  // namespace fxfuse::inspect
