#include "passes/toolkit/rewriter.h"

#include <algorithm>
#include <unordered_set>

namespace fxfuse::compiler {

ir::Node* Rewriter::create(const std::string& target, std::vector<ir::Arg> args, const std::vector<Out>& outs,
                           ir::Node* before, const std::vector<ir::Node*>& sources, const std::string& name_hint) {
  ir::NodeKind kind = target.rfind("fxfuse.", 0) == 0       ? ir::NodeKind::Fxfuse
                      : target.rfind("higher_order.", 0) == 0 ? ir::NodeKind::Hop
                                                              : ir::NodeKind::Op;
  ir::Node* n = g_.createNode(target, kind, std::move(args), outs.size(), before, name_hint);
  for (size_t i = 0; i < outs.size(); ++i) {
    if (!outs[i].present()) continue;
    ir::Value* v = n->setOutput(i, ir::ValueKind::Tensor);
    if (outs[i].replaces) {
      const ir::Value* old = outs[i].replaces;
      v->kind = old->kind;
      v->type = old->type;
      v->sym = old->sym;
      v->name = old->name;
    }
    if (outs[i].type) {
      v->kind = ir::ValueKind::Tensor;
      v->type = *outs[i].type;
    }
  }
  std::string fused;
  for (ir::Node* s : sources) {
    if (!s) continue;
    if (n->loc.empty() && !s->loc.empty()) n->loc = s->loc;
    auto it = s->meta.find("fused_from");
    std::string name = it != s->meta.end() ? it->second : s->name;
    fused += (fused.empty() ? "" : ",") + name;
  }
  if (!sources.empty()) n->meta["fused_from"] = fused;
  // Keep the stack trace and module path of the last source (the anchor) for diagnostics
  // and for tools that group nodes by layer (fxfuse draw).
  for (const char* key : {"stack_trace", "nn_module_stack"}) {
    for (auto it = sources.rbegin(); it != sources.rend(); ++it) {
      if (!*it) continue;
      auto st = (*it)->meta.find(key);
      if (st != (*it)->meta.end()) {
        n->meta[key] = st->second;
        break;
      }
    }
  }
  inserted_ = true;
  if (!pos_.empty()) {
    auto it = before ? pos_.find(before) : pos_.end();
    double base = it != pos_.end() ? it->second : static_cast<double>(pos_.size()) + 1e9;
    tiny_ += 1e-7;
    pos_[n] = base - 0.5 + tiny_;
  }
  return n;
}

ir::Node* Rewriter::latest(const std::vector<ir::Node*>& nodes) {
  if (pos_.empty()) {
    double i = 0;
    for (auto& np : g_.nodes()) pos_[np.get()] = i++;
  }
  ir::Node* best = nullptr;
  double best_pos = -1;
  for (ir::Node* n : nodes) {
    if (!n) continue;
    auto it = pos_.find(n);
    if (it == pos_.end()) continue;
    if (it->second > best_pos) {
      best_pos = it->second;
      best = n;
    }
  }
  return best;
}

void Rewriter::eraseNode(ir::Node* n) {
  pos_.erase(n);
  g_.erase(n);
  erased_.insert(n);
}

void Rewriter::replaceOutputs(ir::Node* n, const std::vector<Out>& outs) {
  for (size_t i = 0; i < outs.size(); ++i)
    if (outs[i].replaces && n->output(i)) outs[i].replaces->replaceAllUsesWith(n->output(i));
}

void Rewriter::replace(ir::Value* from, ir::Value* to) {
  from->replaceAllUsesWith(to);
  inserted_ = true;  // a use may now precede its definition
}

size_t Rewriter::eraseDead(const std::vector<ir::Node*>& candidates) {
  std::vector<ir::Node*> work(candidates.begin(), candidates.end());
  size_t count = 0;
  while (!work.empty()) {
    ir::Node* n = work.back();
    work.pop_back();
    if (!n || erased_.count(n)) continue;
    if (n->hasUsers() || ir::hasSideEffects(*n)) continue;
    std::vector<ir::Node*> producers;
    for (ir::Value* v : n->operands())
      if (v->producer()) producers.push_back(v->producer());
    pos_.erase(n);
    g_.erase(n);
    erased_.insert(n);
    ++count;
    for (ir::Node* p : producers)
      if (!erased_.count(p)) work.push_back(p);
  }
  return count;
}

// True when every operand of every node is a graph input or produced earlier.
bool isTopologicallyOrdered(ir::Graph& g) {
  // Value ids are dense in node order (inputs first), so a use is ordered iff the used
  // value's id was assigned before the using node's outputs.
  g.renumber();
  uint32_t assigned = static_cast<uint32_t>(g.inputs().size());
  std::vector<ir::Value*> vs;
  for (auto& np : g.nodes()) {
    for (const auto& a : np->args()) {
      if (a.value.kind == ir::Attr::Kind::Value) {
        const ir::Value* v = a.value.value;
        if (v->producer() && v->graph() == &g && v->id > assigned) return false;
      } else if (a.value.kind == ir::Attr::Kind::List) {
        vs.clear();
        a.value.collectValues(vs);
        for (ir::Value* v : vs)
          if (v->producer() && v->graph() == &g && v->id > assigned) return false;
      }
    }
    for (ir::Value* o : np->outputs())
      if (o) assigned = o->id;
  }
  return true;
}

void Rewriter::finish() {
  if (inserted_ && !isTopologicallyOrdered(g_)) g_.topoSort();
  inserted_ = false;
}

ir::Node* latestOf(ir::Graph& g, const std::vector<ir::Node*>& nodes) {
  std::unordered_set<const ir::Node*> want;
  for (ir::Node* n : nodes)
    if (n) want.insert(n);
  ir::Node* last = nullptr;
  for (auto& np : g.nodes())
    if (want.count(np.get())) last = np.get();
  return last;
}

}  // namespace fxfuse::compiler
