// Graph edits for passes: create a node whose outputs take their types from the values
// they replace, redirect uses, erase what became dead, and restore topological order.
//
// Invariants kept: def-use lists (all edits go through ir::Graph/Node), output types and
// value names copied from the replaced values, the new node's source location and a
// `fused_from` meta entry listing the nodes it replaces (a fused location), and
// topological order (finish() re-sorts stably when an inserted node's users precede it).
#pragma once

#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fxfuse::compiler {

class Rewriter {
 public:
  explicit Rewriter(ir::Graph& g) : g_(g) {}
  ~Rewriter() = default;

  struct Out {
    // Type source: the value this output replaces (its type and name are copied and its
    // uses redirected by replaceOutputs()), or an explicit type.
    ir::Value* replaces = nullptr;
    std::optional<ir::TensorType> type;
    bool present() const { return replaces != nullptr || type.has_value(); }
  };

  // Creates `target` before `before` with named arguments and the given outputs (absent
  // ones are null slots). `sources` are the nodes the new node replaces (for location and
  // the fused_from meta). The new node's name is derived from `name_hint`.
  ir::Node* create(const std::string& target, std::vector<ir::Arg> args, const std::vector<Out>& outs,
                   ir::Node* before, const std::vector<ir::Node*>& sources, const std::string& name_hint);

  // Redirects every use of each `Out::replaces` to the corresponding output of `n`.
  void replaceOutputs(ir::Node* n, const std::vector<Out>& outs);

  // Redirects uses of `from` to `to`.
  void replace(ir::Value* from, ir::Value* to);

  // Erases the given nodes and then, transitively, producers that became dead (no users,
  // no side effects). Returns the number erased.
  size_t eraseDead(const std::vector<ir::Node*>& candidates);

  // Erases one node (its outputs must be unused) and remembers it.
  void eraseNode(ir::Node* n);
  // False for nodes this Rewriter erased. Passes iterating a snapshot (Graph::nodeList())
  // must skip erased nodes with this: an erased node's memory is freed.
  bool alive(const ir::Node* n) const { return erased_.count(n) == 0; }

  // Restores topological order if any insertion may have broken it.
  void finish();

  static ir::Arg named(std::string name, ir::Attr value) { return ir::Arg{std::move(name), false, std::move(value)}; }

  // The node of `nodes` that comes last in graph order (where a replacement goes: every
  // input of the matched nodes is defined before it). Positions are indexed once per
  // Rewriter; nodes it created are placed just before the node they were inserted before.
  ir::Node* latest(const std::vector<ir::Node*>& nodes);

 private:
  ir::Graph& g_;
  bool inserted_ = false;
  std::unordered_map<const ir::Node*, double> pos_;
  std::unordered_set<const ir::Node*> erased_;
  double tiny_ = 0;
};

// True when every operand of every node is a graph input or produced earlier in `g`.
bool isTopologicallyOrdered(ir::Graph& g);

// Nodes of `g` in order, with the position index (for "which comes later" queries).
ir::Node* latestOf(ir::Graph& g, const std::vector<ir::Node*>& nodes);

}  // namespace fxfuse::compiler
