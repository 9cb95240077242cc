// Small text helpers shared by `fxfuse diff`, `fxfuse draw` and the HTML report: short op
// names, one-line node rendering, source locations and module paths of nodes, and the
// transformer-layer index a node belongs to (from nn_module_stack).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fxfuse::inspect {

// "torch.ops.aten.mm.default" -> "aten.mm"; "fxfuse.rms_norm.default" -> "fxfuse.rms_norm".
std::string shortTarget(const std::string& target);

// Kind of op for colouring and counting: fxfuse canonical op, fxfuse fused op, other fxfuse
// op, vLLM/custom op, higher-order op, plain ATen/prims.
enum class OpClass { Aten, Canonical, Fused, FxfuseOther, Custom, Hop };
OpClass opClass(const ir::Node& n);
// The fxfuse short name ("rms_norm") of an fxfuse target, or empty.
std::string fxfuseShortName(const std::string& target);
bool isCanonicalName(const std::string& short_name);
bool isFusedName(const std::string& short_name);

// A value's name; unnamed values (parsed from .fxg) are named after their producer
// ("rms_norm_quant" or "rms_norm_quant.1" for the second output).
std::string valueName(const ir::Value& v);
// An argument as compact text; values print as "%name". Lists longer than `max_list`
// items are cut with "...".
std::string attrText(const ir::Attr& a, size_t max_list = 8);
// "name = target(arg=..., ...)" with value names (one line). Output names of multi-output
// nodes are listed in parentheses.
std::string nodeText(const ir::Node& n, size_t max_chars = 160);
// Output types joined by ", " ("bf16[s0, 4096]").
std::string outputTypes(const ir::Node& n);

// Source location: the node's loc, or the last frame of meta["stack_trace"].
ir::SourceLoc sourceLoc(const ir::Node& n);
// "file:line" or empty.
std::string locText(const ir::Node& n);
// Deepest module path of meta["nn_module_stack"] ("model.layers.3.mlp"), normalized
// (L['self'].layers[3] -> layers.3); empty when absent.
std::string modulePath(const ir::Node& n);

// Layer of a node: the first path component followed by an integer index in its module
// path ("model.layers" and 3 for "model.layers.3.mlp.up_proj").
struct LayerKey {
  std::string prefix;
  int index = -1;
  bool valid() const { return index >= 0; }
};
LayerKey layerOf(const ir::Node& n);
// Same, from a parameter/buffer fully qualified name ("model.layers.3.mlp.up_proj.weight").
LayerKey layerOfPath(const std::string& path);

// Escapes &, <, >, " for HTML/XML text.
std::string htmlEscape(const std::string& s);

}  // namespace fxfuse::inspect
