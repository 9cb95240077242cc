// Structural diff of two graphs (`fxfuse diff`, the HTML report, side-by-side pictures).
//
// Nodes are matched by structure, never by name (FX names such as `mul_143` change from run
// to run): two nodes match when they have the same label (target + non-value arguments,
// symbol names ignored) and matching operands. The matcher works in rounds until nothing
// changes:
//
//   1. inputs: by parameter/buffer FQN, then by name, then by a type signature unique on
//      both sides;
//   2. exact: a node of A whose operands are all matched matches a node of B with the same
//      label and exactly the corresponding operands (a hash over its dataflow cone); among
//      several candidates the one with the same source location / module path, then the
//      first in order, wins;
//   3. forward: a node with at least one matched operand matches a same-label user of the
//      corresponding value when no operand position contradicts (an op downstream of a
//      rewritten site is still the same op);
//   4. backward: producers at the same operand position of two matched nodes (and of the
//      same graph output) with the same label match (an op upstream of a rewritten site).
//
// What is left over is grouped into regions. A removed node and a new node belong to the same
// region when they share a boundary: the new node took over a use of the removed node's
// output by a matched node (the replaceAllUsesWith of a rewrite), or they are the only
// removed/new consumers of one matched value. Nodes with no such evidence join their removed
// (resp. new) neighbours. A region with both sides is *rewritten*; otherwise it is *removed*
// or *added*. A fusion site that replaces rms_norm + quant_fp8 by rms_norm_quant is one
// rewritten region, and consecutive sites chained through a residual stay separate regions.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace fxfuse::inspect {

struct DiffRegion {
  enum class Kind { Rewritten, Removed, Added };
  Kind kind = Kind::Rewritten;
  int id = 0;                              // 1-based, in graph order
  std::vector<const ir::Node*> removed;    // nodes of A, in A's order
  std::vector<const ir::Node*> added;      // nodes of B, in B's order
  // "rms_norm + quant_fp8 -> rms_norm_quant" (short op names, sorted, with multiplicity).
  std::string summary() const;
  // Distinct "file:line" of all nodes of the region, sorted.
  std::vector<std::string> locations() const;
};

struct GraphDiff {
  const ir::Graph* a = nullptr;
  const ir::Graph* b = nullptr;
  std::unordered_map<const ir::Node*, const ir::Node*> a_to_b, b_to_a;
  std::unordered_map<const ir::Value*, const ir::Value*> inputs_a_to_b;
  std::vector<DiffRegion> regions;  // in graph order
  // Region index (into `regions`) of each unmatched node.
  std::unordered_map<const ir::Node*, int> region_of;

  size_t matched() const { return a_to_b.size(); }
  size_t count(DiffRegion::Kind k) const;
  bool identical() const { return regions.empty(); }
  // Rewritten regions grouped by summary: "rms_norm + quant_fp8 -> rms_norm_quant" -> 3.
  std::map<std::string, int> rewriteCounts() const;
};

struct DiffOptions {
  // Use source locations and module paths to choose among structurally equal candidates.
  bool use_locations = true;
};

GraphDiff diffGraphs(const ir::Graph& a, const ir::Graph& b, const DiffOptions& opts = {});

// The matching label of a node: target + non-value arguments (symbol names erased).
std::string nodeLabel(const ir::Node& n);

}  // namespace fxfuse::inspect
