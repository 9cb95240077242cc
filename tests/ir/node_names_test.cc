// Node names: unique within a graph, an erased node's name never handed to a new node by
// uniqueNodeName, and renameNode letting a replacement take over a name only erased nodes held
// (what canonicalize-ops does for a respelled op, so graph dumps and diffs keep the user's name).
#include <catch2/catch.hpp>

#include "ir/graph.h"

using namespace fxfuse::ir;

namespace {

Node* relu(Graph& g, Value* x, const std::string& name) {
  Node* n = g.createNode("aten.relu.default", NodeKind::Op, {Arg{"self", true, Attr::ofValue(x)}}, 1, nullptr, name);
  n->setOutput(0, ValueKind::Tensor);
  return n;
}

}  // namespace

TEST_CASE("node names: a replacement takes over an erased node's name", "[ir][names]") {
  Module m;
  Graph* g = m.addGraph("main");
  Value* x = g->addInput(ValueKind::Tensor, "x");
  Node* old = relu(*g, x, "act");
  Node* fresh = relu(*g, x, "act");
  CHECK(fresh->name == "act_1");  // unique while both live
  CHECK_FALSE(g->renameNode(fresh, "act"));  // held by a live node
  CHECK(fresh->name == "act_1");
  g->erase(old);
  CHECK(g->renameNode(fresh, "act"));
  CHECK(fresh->name == "act");
  // The released name is reserved again for uniqueNodeName, and a third node is unique.
  Node* third = relu(*g, x, "act");
  CHECK(third->name != "act");
  CHECK(third->name != "act_1");
  CHECK(g->renameNode(third, "act_1"));  // act_1 was given up by `fresh`
  CHECK(third->name == "act_1");
}

TEST_CASE("node names: uniqueNodeName never reuses an erased node's name", "[ir][names]") {
  Module m;
  Graph* g = m.addGraph("main");
  Value* x = g->addInput(ValueKind::Tensor, "x");
  Node* a = relu(*g, x, "a");
  Node* b = relu(*g, x, "b");  // names are tracked from here on
  g->erase(std::vector<Node*>{a});
  CHECK(relu(*g, x, "a")->name == "a_1");
  CHECK(b->name == "b");
  CHECK(g->renameNode(b, "b"));  // its own name
}
