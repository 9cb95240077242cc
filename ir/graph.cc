#include "ir/graph.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "ir/status.h"

namespace fxfuse::ir {

// ---------------------------------------------------------------------------- TensorType

SymExpr TensorType::numel() const {
  SymExpr n = SymExpr::integer(1);
  for (const auto& d : shape) n = n * d;
  return n;
}

std::vector<SymExpr> TensorType::contiguousStrides(const std::vector<SymExpr>& shape) {
  std::vector<SymExpr> st(shape.size());
  SymExpr acc = SymExpr::integer(1);
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = acc;
    acc = acc * shape[i];
  }
  return st;
}

bool TensorType::isContiguous() const {
  if (stride.empty()) return true;
  auto c = contiguousStrides(shape);
  for (size_t i = 0; i < shape.size(); ++i) {
    // Strides of size-1 dims do not matter.
    if (shape[i].isInt() && shape[i].intValue() == 1) continue;
    if (!(c[i] == stride[i])) return false;
  }
  return true;
}

bool TensorType::operator==(const TensorType& o) const {
  return dtype == o.dtype && shape == o.shape && stride == o.stride && storage_offset == o.storage_offset &&
         device == o.device && requires_grad == o.requires_grad;
}

// ---------------------------------------------------------------------------- Attr

Attr Attr::ofSym(const SymExpr& e) {
  if (e.isInt()) return ofInt(e.intValue());
  Attr a;
  a.kind = Kind::Sym;
  a.sym = e;
  return a;
}

std::optional<double> Attr::asDouble() const {
  switch (kind) {
    case Kind::Int: return static_cast<double>(i);
    case Kind::Float: return f;
    case Kind::Bool: return b ? 1.0 : 0.0;
    case Kind::SpecialFloat:
      if (s == "inf") return std::numeric_limits<double>::infinity();
      if (s == "-inf") return -std::numeric_limits<double>::infinity();
      return std::numeric_limits<double>::quiet_NaN();
    case Kind::Sym:
      if (sym && sym->isInt()) return static_cast<double>(sym->intValue());
      if (sym && sym->kind() == SymExpr::Kind::Real) return sym->realValue();
      return std::nullopt;
    default: return std::nullopt;
  }
}

std::optional<int64_t> Attr::asInt() const {
  switch (kind) {
    case Kind::Int: return i;
    case Kind::Bool: return b ? 1 : 0;
    case Kind::Sym:
      if (sym && sym->isInt()) return sym->intValue();
      return std::nullopt;
    case Kind::Value:
      if (value && value->sym && value->sym->isInt()) return value->sym->intValue();
      return std::nullopt;
    default: return std::nullopt;
  }
}

std::optional<SymExpr> Attr::asSize() const {
  switch (kind) {
    case Kind::Int: return SymExpr::integer(i);
    case Kind::Sym: return sym;
    case Kind::Value:
      if (value && value->kind == ValueKind::SymInt && value->sym) return value->sym;
      return std::nullopt;
    default: return std::nullopt;
  }
}

std::optional<std::vector<int64_t>> Attr::asIntList() const {
  if (kind == Kind::Int) return std::vector<int64_t>{i};
  if (kind != Kind::List) return std::nullopt;
  std::vector<int64_t> out;
  for (const auto& a : list) {
    auto v = a.asInt();
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

void Attr::collectValues(std::vector<ir::Value*>& out) const {
  if (kind == Kind::Value && value) out.push_back(value);
  if (kind == Kind::List)
    for (const auto& a : list) a.collectValues(out);
}

// ---------------------------------------------------------------------------- Value

void Value::replaceAllUsesWith(Value* other) {
  if (other == this) return;
  std::vector<Node*> users = users_;
  std::sort(users.begin(), users.end());
  users.erase(std::unique(users.begin(), users.end()), users.end());
  // Every use moves, so the use lists move whole (linear; a search per use in a long use list
  // would be quadratic).
  for (Node* u : users) u->rewriteArgs(this, other);
  if (other) other->users_.insert(other->users_.end(), users_.begin(), users_.end());
  users_.clear();
  if (output_uses_ > 0) {
    Graph* g = graph_;
    for (size_t i = 0; i < g->outputs_.size(); ++i)
      if (g->outputs_[i].value == this) g->setOutputValue(i, other);
  }
}

// ---------------------------------------------------------------------------- Node

const Attr* Node::arg(const std::string& n, int position) const {
  for (const auto& a : args_)
    if (a.name == n) return &a.value;
  if (position >= 0 && static_cast<size_t>(position) < args_.size() && args_[position].name.empty())
    return &args_[position].value;
  return nullptr;
}

Value* Node::input(const std::string& n, int position) const {
  const Attr* a = arg(n, position);
  return (a && a->kind == Attr::Kind::Value) ? a->value : nullptr;
}

std::vector<Value*> Node::operands() const {
  std::vector<Value*> out;
  for (const auto& a : args_) a.value.collectValues(out);
  return out;
}

void Node::attachUses(const Attr& a) {
  std::vector<Value*> vs;
  a.collectValues(vs);
  for (Value* v : vs) v->users_.push_back(this);
}

void Node::detachUses(const Attr& a) {
  std::vector<Value*> vs;
  a.collectValues(vs);
  for (Value* v : vs) {
    // From the back: the newest use is the likeliest to go (rewrites erase what they just
    // matched), which keeps erasing the users of a many-user value cheap.
    auto it = std::find(v->users_.rbegin(), v->users_.rend(), this);
    if (it != v->users_.rend()) v->users_.erase(std::next(it).base());
  }
}

void Node::setArg(size_t index, Attr value) {
  detachUses(args_.at(index).value);
  args_[index].value = std::move(value);
  attachUses(args_[index].value);
}

void Node::setArg(const std::string& n, Attr value) {
  for (size_t i = 0; i < args_.size(); ++i) {
    if (args_[i].name == n) {
      setArg(i, std::move(value));
      return;
    }
  }
  addArg(Arg{n, true, std::move(value)});
}

void Node::addArg(Arg a) {
  args_.push_back(std::move(a));
  attachUses(args_.back().value);
}

namespace {
bool rewriteValue(Attr& a, Value* from, Value* to) {
  bool changed = false;
  if (a.kind == Attr::Kind::Value && a.value == from) {
    a.value = to;
    changed = true;
  }
  if (a.kind == Attr::Kind::List)
    for (auto& x : a.list) changed |= rewriteValue(x, from, to);
  return changed;
}
}  // namespace

void Node::rewriteArgs(Value* from, Value* to) {
  for (auto& a : args_) rewriteValue(a.value, from, to);
}

void Node::replaceUsesOfWith(Value* from, Value* to) {
  auto rewrite = [&](Attr& a) { return rewriteValue(a, from, to); };
  for (auto& a : args_) {
    Attr copy = a.value;
    if (rewrite(copy)) {
      detachUses(a.value);
      a.value = std::move(copy);
      attachUses(a.value);
    }
  }
}

Value* Node::setOutput(size_t i, ValueKind kind) {
  if (i >= outputs_.size()) outputs_.resize(i + 1, nullptr);
  if (outputs_[i]) return outputs_[i];
  Value* v = graph_->newValue(kind);
  v->producer_ = this;
  v->result_index_ = static_cast<int>(i);
  outputs_[i] = v;
  return v;
}

void Node::resizeOutputs(size_t n) {
  for (size_t i = n; i < outputs_.size(); ++i)
    if (outputs_[i] && outputs_[i]->numUses() > 0)
      fail("node {}: cannot drop output {} that still has uses", name, i);
  outputs_.resize(n, nullptr);
}

bool Node::hasUsers() const {
  for (Value* v : outputs_)
    if (v && v->numUses() > 0) return true;
  return false;
}

// ---------------------------------------------------------------------------- Graph

Value* Graph::newValue(ValueKind kind) {
  values_.push_back(std::make_unique<Value>());
  Value* v = values_.back().get();
  v->kind = kind;
  v->graph_ = this;
  return v;
}

Value* Graph::addInput(ValueKind kind, std::string n, InputKind ikind, std::string target) {
  Value* v = newValue(kind);
  v->name = std::move(n);
  inputs_.push_back({v, ikind, std::move(target)});
  return v;
}

void Graph::addOutput(Value* v, OutputKind kind, std::string target) {
  outputs_.push_back({v, kind, std::move(target), Attr{}});
  if (v) v->output_uses_++;
}

void Graph::addConstantOutput(Attr constant, OutputKind kind) {
  outputs_.push_back({nullptr, kind, {}, std::move(constant)});
}

void Graph::setOutputValue(size_t i, Value* v) {
  auto& o = outputs_.at(i);
  if (o.value) o.value->output_uses_--;
  o.value = v;
  if (v) v->output_uses_++;
}

void Graph::setInputRole(size_t i, InputKind kind, std::string target) {
  inputs_.at(i).kind = kind;
  inputs_.at(i).target = std::move(target);
}

void Graph::setOutputRole(size_t i, OutputKind kind, std::string target) {
  outputs_.at(i).kind = kind;
  outputs_.at(i).target = std::move(target);
}

std::string Graph::uniqueNodeName(const std::string& base) {
  // name_counts_ holds every name in use (value 1), names only erased nodes held (value 2,
  // reserved: see renameNode) and, under "#base", the next suffix.
  if (name_counts_.empty())
    for (const auto& n : nodes_) name_counts_[n->name] = 1;
  if (name_counts_.emplace(base, 1).second) return base;
  std::string candidate = base;
  int& next = name_counts_["#" + base];
  while (name_counts_.count(candidate)) candidate = base + "_" + std::to_string(++next);
  name_counts_[candidate] = 1;
  return candidate;
}

bool Graph::renameNode(Node* n, const std::string& name) {
  if (n->name == name) return true;
  if (name_counts_.empty())
    for (const auto& node : nodes_) name_counts_[node->name] = 1;
  const auto held = name_counts_.find(name);
  if (held != name_counts_.end() && held->second == 1) return false;
  name_counts_[n->name] = 2;
  name_counts_[name] = 1;
  n->name = name;
  return true;
}

Node* Graph::createNode(std::string target, NodeKind kind, std::vector<Arg> args, size_t num_outputs, Node* before,
                        std::string n) {
  auto node = std::make_unique<Node>();
  Node* raw = node.get();
  raw->graph_ = this;
  raw->target = std::move(target);
  raw->kind = kind;
  // Node names are diagnostics; keep them to one printable token so text forms stay
  // line-oriented (a name from a file may contain anything).
  for (char& c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) c = '_';
  raw->name = uniqueNodeName(n.empty() ? "node" : n);
  raw->outputs_.resize(num_outputs, nullptr);
  auto pos = before ? before->self_ : nodes_.end();
  raw->self_ = nodes_.insert(pos, std::move(node));
  for (auto& a : args) raw->addArg(std::move(a));
  return raw;
}

void Graph::erase(Node* n) {
  for (Value* v : n->outputs_)
    if (v && v->numUses() > 0) fail("cannot erase node {}: output still used", n->name);
  for (const auto& a : n->args_) n->detachUses(a.value);
  for (Value* v : n->outputs_)
    if (v) {
      v->producer_ = nullptr;
      v->result_index_ = -1;
      v->graph_ = nullptr;  // orphaned; kept alive in values_ until the graph dies
    }
  if (!name_counts_.empty()) name_counts_[n->name] = 2;  // reserved, free for renameNode
  nodes_.erase(n->self_);
}

void Graph::moveBefore(Node* n, Node* before) {
  auto owned = std::move(*n->self_);
  nodes_.erase(n->self_);
  auto pos = before ? before->self_ : nodes_.end();
  n->self_ = nodes_.insert(pos, std::move(owned));
}

std::vector<Node*> Graph::nodeList() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n.get());
  return out;
}

void Graph::renumber() {
  uint32_t next = 1;
  for (auto& in : inputs_) in.value->id = next++;
  for (auto& n : nodes_)
    for (Value* v : n->outputs_)
      if (v) v->id = next++;
}

void Graph::topoSort() {
  // Kahn's algorithm, picking ready nodes in their current order (stable).
  std::vector<Node*> order = nodeList();
  std::unordered_map<Node*, size_t> index;
  for (size_t i = 0; i < order.size(); ++i) index[order[i]] = i;
  std::vector<int> pending(order.size(), 0);
  std::vector<std::vector<size_t>> consumers(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    std::set<Node*> producers;
    for (Value* v : order[i]->operands()) {
      if (v->producer() && v->producer()->graph() == this) producers.insert(v->producer());
    }
    for (Node* p : producers) {
      auto it = index.find(p);
      if (it == index.end()) continue;
      pending[i]++;
      consumers[it->second].push_back(i);
    }
  }
  std::set<size_t> ready;
  for (size_t i = 0; i < order.size(); ++i)
    if (pending[i] == 0) ready.insert(i);
  std::vector<Node*> sorted;
  while (!ready.empty()) {
    size_t i = *ready.begin();
    ready.erase(ready.begin());
    sorted.push_back(order[i]);
    for (size_t c : consumers[i])
      if (--pending[c] == 0) ready.insert(c);
  }
  if (sorted.size() != order.size()) {
    for (size_t i = 0; i < order.size(); ++i)
      if (pending[i] > 0) fail("graph {}: cycle through node {}", name, order[i]->name);
  }
  std::list<std::unique_ptr<Node>> fresh;
  std::unordered_map<Node*, std::unique_ptr<Node>> owned;
  for (auto& n : nodes_) owned[n.get()] = std::move(n);
  nodes_.clear();
  for (Node* n : sorted) {
    n->self_ = nodes_.insert(nodes_.end(), std::move(owned[n]));
  }
}

void Graph::erase(const std::vector<Node*>& doomed) {
  std::unordered_set<const Node*> set(doomed.begin(), doomed.end());
  for (Node* n : doomed)
    for (Value* v : n->outputs_)
      if (v) {
        if (v->output_uses_ > 0) fail("cannot erase node {}: output still used", n->name);
        for (Node* u : v->users_)
          if (!set.count(u)) fail("cannot erase node {}: output still used", n->name);
      }
  // One pass over each operand's use list instead of one search per use: erasing the users of
  // a value one by one is quadratic when it has many.
  std::unordered_set<Value*> operands;
  for (Node* n : doomed)
    for (const auto& a : n->args_) {
      std::vector<Value*> vs;
      a.value.collectValues(vs);
      operands.insert(vs.begin(), vs.end());
    }
  for (Value* v : operands)
    v->users_.erase(std::remove_if(v->users_.begin(), v->users_.end(), [&](Node* u) { return set.count(u) > 0; }),
                    v->users_.end());
  for (Node* n : doomed) {
    for (Value* v : n->outputs_)
      if (v) {
        v->users_.clear();
        v->producer_ = nullptr;
        v->result_index_ = -1;
        v->graph_ = nullptr;  // orphaned; kept alive in values_ until the graph dies
      }
    if (!name_counts_.empty()) name_counts_[n->name] = 2;  // reserved, free for renameNode
    nodes_.erase(n->self_);
  }
}

size_t Graph::eliminateDeadCode() {
  // Linear in nodes + uses: one reverse sweep decides deadness with live-use counts (a node
  // is dead when it has no side effects and no live use of any output; its operands then
  // lose one live use each), then the dead nodes are erased as one batch. A second sweep
  // finds more only when a producer came after its user (graphs not yet sorted).
  size_t removed = 0;
  while (true) {
    std::unordered_map<const Value*, size_t> live;
    auto liveUses = [&](const Value* v) -> size_t& {
      auto it = live.find(v);
      if (it == live.end()) it = live.emplace(v, v->numUses()).first;
      return it->second;
    };
    std::vector<Node*> dead;
    std::vector<Node*> order = nodeList();
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* n = *it;
      if (hasSideEffects(*n)) continue;
      bool used = false;
      for (Value* v : n->outputs_)
        if (v && liveUses(v) > 0) used = true;
      if (used) continue;
      dead.push_back(n);
      for (const auto& a : n->args_) {
        std::vector<Value*> vs;
        a.value.collectValues(vs);
        for (Value* v : vs) --liveUses(v);
      }
    }
    if (dead.empty()) return removed;
    erase(dead);
    removed += dead.size();
  }
}

// ---------------------------------------------------------------------------- Module

void Module::addGuard(const SymExpr& condition, std::string reason) {
  for (const auto& g : guards)
    if (g.condition == condition) return;
  guards.push_back(Guard{condition, std::move(reason)});
}

void checkGuards(const std::vector<Guard>& guards, const std::map<std::string, int64_t>& env,
                 const std::string& context) {
  for (const auto& g : guards) {
    auto v = g.condition.evaluate(env);
    if (!v || *v != 0) continue;
    std::set<std::string> names;
    g.condition.collectSymbols(names);
    std::string binding;
    for (const auto& n : names) binding += fmt::format("{}{}={}", binding.empty() ? "" : ", ", n, env.at(n));
    fail("{}: the symbol binding {} violates the assumption {} that the compiled graph relies on ({})", context,
         binding, g.condition.str(), g.reason);
  }
}

Graph* Module::addGraph(std::string n) {
  graphs_.push_back(std::make_unique<Graph>(this, std::move(n)));
  return graphs_.back().get();
}

bool hasSideEffects(const Node& n) {
  const std::string& t = n.target;
  // Mutating calls that were not functionalized write into their arguments and have no
  // outputs: removing them would change the program.
  if (n.numOutputs() == 0) return true;
  static const std::set<std::string> kEffects = {
      "aten._assert_async.msg", "aten._assert_scalar.default", "aten.sym_constrain_range_for_size.default",
      "aten._assert_tensor_metadata.default", "aten.copy_.default", "_c10d_functional.wait_tensor.default",
      "higher_order.with_effects",
  };
  if (kEffects.count(t)) return true;
  // In-place ATen overloads end with "_" before the overload name (add_.Tensor).
  auto dot = t.rfind('.');
  if (dot != std::string::npos && dot > 0 && t[dot - 1] == '_' && t.rfind("aten.", 0) == 0) {
    auto prev = t.rfind('.', dot - 1);
    std::string op = t.substr(prev + 1, dot - prev - 1);
    if (!op.empty() && op.front() != '_') return true;
  }
  return false;
}

bool isValidTarget(std::string_view t) {
  if (t.empty() || t.size() > 512) return false;
  for (size_t i = 0; i < t.size(); ++i) {
    char c = t[i];
    bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' || (c == '#' && i == 0);
    if (!ok) return false;
  }
  return true;
}

bool isValidSymbolName(std::string_view n) {
  if (n.empty() || n.size() > 256 || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  for (char c : n)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

bool isKnownDeviceType(std::string_view t) {
  static const char* const kTypes[] = {"cpu", "cuda", "meta", "mps", "xpu", "hpu", "mtia", "xla", "lazy", "ipu",
                                       "ve", "vulkan", "hip", "ort", "mkldnn", "opengl", "opencl", "ideep", "fpga",
                                       "maia", "privateuseone", "msnpu"};
  for (const char* k : kTypes)
    if (t == k) return true;
  return false;
}

std::string_view stageName(Stage s) {
  switch (s) {
    case Stage::Dynamo: return "dynamo";
    case Stage::AotForward: return "aot_forward";
    case Stage::PostGradPre: return "post_grad_pre";
    case Stage::PostGradPost: return "post_grad_post";
    case Stage::ExportTrainIr: return "export_train_ir";
    case Stage::ExportCoreAten: return "export_core_aten";
    case Stage::MakeFx: return "make_fx";
    case Stage::FxfuseCompiled: return "fxfuse_compiled";
    default: return "unspecified";
  }
}

}  // namespace fxfuse::ir
