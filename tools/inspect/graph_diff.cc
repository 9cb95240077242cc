#include "tools/inspect/graph_diff.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <set>
#include <unordered_set>

#include <fmt/format.h>

#include "tools/inspect/node_text.h"
#include "ir/fxg.h"

namespace fxfuse::inspect {

using ir::Graph;
using ir::Node;
using ir::Value;

namespace {

bool isCommutative(const std::string& t) {
  return t == "aten.add.Tensor" || t == "aten.mul.Tensor" || t == "_operator.add" || t == "_operator.mul" ||
         t == "aten.maximum.default" || t == "aten.minimum.default";
}

// Symbol names differ between exporters and runs (s77 vs s0): erase them.
std::string eraseSymbols(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    bool word_start = i == 0 || !(std::isalnum(static_cast<unsigned char>(s[i - 1])) || s[i - 1] == '_');
    if (word_start && (s[i] == 's' || s[i] == 'u') && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      out += "s?";
      ++i;
      while (i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1]))) ++i;
      continue;
    }
    out += s[i];
  }
  return out;
}

void labelAttr(const ir::Attr& a, std::string& out) {
  using K = ir::Attr::Kind;
  switch (a.kind) {
    case K::Value: out += '%'; break;
    case K::Sym: out += a.sym ? eraseSymbols(a.sym->str()) : "sym"; break;
    case K::Layout: out += "L" + std::to_string(static_cast<int>(a.layout)); break;
    case K::MemoryFormat: out += "M" + std::to_string(static_cast<int>(a.memory_format)); break;
    case K::List:
      out += '[';
      for (const auto& x : a.list) {
        labelAttr(x, out);
        out += ',';
      }
      out += ']';
      break;
    case K::Opaque: out += "<" + a.s + ">"; break;
    default: out += attrText(a, static_cast<size_t>(-1));
  }
}

std::string inputSignature(const ir::GraphInput& in) {
  const Value* v = in.value;
  // The input kind is left out: exporters disagree on it (parameter vs plain argument).
  std::string s = fmt::format("{}/", static_cast<int>(v->kind));
  if (v->isTensor()) {
    s += std::string(ir::dtypeName(v->type.dtype)) + "[";
    for (const auto& d : v->type.shape) s += (d.isInt() ? std::to_string(d.intValue()) : std::string("?")) + ",";
    s += "]";
  }
  return s;
}

class Matcher {
 public:
  Matcher(const Graph& a, const Graph& b, const DiffOptions& opts, GraphDiff& out) : a_(a), b_(b), opts_(opts), d_(out) {
    index(a_, nodes_a_, pos_a_);
    index(b_, nodes_b_, pos_b_);
  }

  void run() {
    matchInputs();
    buildExactIndex();
    for (int round = 0; round < 50; ++round) {
      bool changed = false;
      changed |= exactPass();
      changed |= forwardPass();
      changed |= backwardPass();
      if (!changed) changed |= pairLeftoverInputs();
      if (!changed) break;
    }
    buildRegions();
  }

 private:
  void index(const Graph& g, std::vector<const Node*>& nodes, std::unordered_map<const Node*, size_t>& pos) {
    for (const auto& np : g.nodes()) {
      pos[np.get()] = nodes.size();
      nodes.push_back(np.get());
      operands_[np.get()] = np->operands();
      labels_[np.get()] = nodeLabel(*np);
    }
  }

  const std::vector<Value*>& ops(const Node* n) { return operands_.at(n); }
  const std::string& label(const Node* n) { return labels_.at(n); }

  // A value of A -> its counterpart in B (null when unmatched), and back.
  const Value* mapA(const Value* v) const {
    if (!v) return nullptr;
    if (!v->producer()) {
      auto it = d_.inputs_a_to_b.find(v);
      return it == d_.inputs_a_to_b.end() ? nullptr : it->second;
    }
    auto it = d_.a_to_b.find(v->producer());
    return it == d_.a_to_b.end() ? nullptr : it->second->output(v->resultIndex());
  }
  const Value* mapB(const Value* v) const {
    if (!v) return nullptr;
    if (!v->producer()) {
      auto it = inputs_b_to_a_.find(v);
      return it == inputs_b_to_a_.end() ? nullptr : it->second;
    }
    auto it = d_.b_to_a.find(v->producer());
    return it == d_.b_to_a.end() ? nullptr : it->second->output(v->resultIndex());
  }

  void matchInput(const Value* va, const Value* vb) {
    d_.inputs_a_to_b[va] = vb;
    inputs_b_to_a_[vb] = va;
  }
  void matchNode(const Node* a, const Node* b) {
    d_.a_to_b[a] = b;
    d_.b_to_a[b] = a;
  }
  bool matchedA(const Node* n) const { return d_.a_to_b.count(n) != 0; }
  bool matchedB(const Node* n) const { return d_.b_to_a.count(n) != 0; }

  // Tie-break among structurally equal candidates.
  int locScore(const Node* a, const Node* b) const {
    if (!opts_.use_locations) return 0;
    int s = 0;
    std::string la = locText(*a), lb = locText(*b);
    if (!la.empty() && la == lb) s += 2;
    std::string ma = modulePath(*a), mb = modulePath(*b);
    if (!ma.empty() && ma == mb) s += 1;
    return s;
  }

  void matchInputs() {
    const auto& ia = a_.inputs();
    const auto& ib = b_.inputs();
    std::vector<bool> used_b(ib.size(), false);
    auto tryMatch = [&](const std::function<bool(const ir::GraphInput&, const ir::GraphInput&)>& same) {
      for (const auto& x : ia) {
        if (d_.inputs_a_to_b.count(x.value)) continue;
        for (size_t j = 0; j < ib.size(); ++j) {
          if (used_b[j] || ib[j].value->kind != x.value->kind || !same(x, ib[j])) continue;
          matchInput(x.value, ib[j].value);
          used_b[j] = true;
          break;
        }
      }
    };
    tryMatch([](const ir::GraphInput& x, const ir::GraphInput& y) { return !x.target.empty() && x.target == y.target; });
    tryMatch([](const ir::GraphInput& x, const ir::GraphInput& y) {
      return !x.value->name.empty() && x.value->name == y.value->name && x.target.empty() == y.target.empty();
    });
    // Signatures unique among the remaining inputs of both sides.
    std::map<std::string, std::vector<size_t>> sa, sb;
    for (size_t i = 0; i < ia.size(); ++i)
      if (!d_.inputs_a_to_b.count(ia[i].value)) sa[inputSignature(ia[i])].push_back(i);
    for (size_t j = 0; j < ib.size(); ++j)
      if (!used_b[j]) sb[inputSignature(ib[j])].push_back(j);
    for (const auto& [sig, la] : sa) {
      auto it = sb.find(sig);
      if (it != sb.end() && la.size() == 1 && it->second.size() == 1) matchInput(ia[la[0]].value, ib[it->second[0]].value);
    }
  }

  // Leftover inputs with the same signature are paired in order (a last resort).
  bool pairLeftoverInputs() {
    std::map<std::string, std::vector<const Value*>> sa, sb;
    for (const auto& x : a_.inputs())
      if (!d_.inputs_a_to_b.count(x.value)) sa[inputSignature(x)].push_back(x.value);
    for (const auto& y : b_.inputs())
      if (!inputs_b_to_a_.count(y.value)) sb[inputSignature(y)].push_back(y.value);
    bool changed = false;
    for (const auto& [sig, la] : sa) {
      auto it = sb.find(sig);
      if (it == sb.end()) continue;
      for (size_t k = 0; k < std::min(la.size(), it->second.size()); ++k) {
        matchInput(la[k], it->second[k]);
        changed = true;
      }
    }
    return changed;
  }

  static std::string operandKey(const std::string& label, const std::vector<const Value*>& vals) {
    std::string k = label;
    k += '|';
    for (const Value* v : vals) k += fmt::format("{},", static_cast<const void*>(v));
    return k;
  }

  void buildExactIndex() {
    for (const Node* n : nodes_b_) {
      std::vector<const Value*> vals(ops(n).begin(), ops(n).end());
      if (isCommutative(n->target)) std::sort(vals.begin(), vals.end());
      exact_b_[operandKey(label(n), vals)].push_back(n);
    }
  }

  const Node* best(const Node* a, const std::vector<const Node*>& cands, const std::function<int(const Node*)>& extra) {
    const Node* pick = nullptr;
    int best_score = -1;
    for (const Node* c : cands) {
      if (matchedB(c)) continue;
      int s = extra(c) * 8 + locScore(a, c);
      if (s > best_score) {
        best_score = s;
        pick = c;
      }
    }
    return pick;
  }

  bool exactPass() {
    bool changed = false;
    for (const Node* a : nodes_a_) {
      if (matchedA(a)) continue;
      std::vector<const Value*> vals;
      bool ok = true;
      for (const Value* v : ops(a)) {
        const Value* m = mapA(v);
        if (!m) {
          ok = false;
          break;
        }
        vals.push_back(m);
      }
      if (!ok) continue;
      if (isCommutative(a->target)) std::sort(vals.begin(), vals.end());
      auto it = exact_b_.find(operandKey(label(a), vals));
      if (it == exact_b_.end()) continue;
      if (const Node* b = best(a, it->second, [](const Node*) { return 0; })) {
        matchNode(a, b);
        changed = true;
      }
    }
    return changed;
  }

  static bool hasTensorOperand(const std::vector<Value*>& vs) {
    return std::any_of(vs.begin(), vs.end(), [](const Value* v) { return v->isTensor(); });
  }

  // Operands agreeing between a (in A) and b (in B), or -1 when some position contradicts
  // (both matched, to different values). Only tensor operands count as agreement when the
  // node has any: a shared SymInt (sym_size of the batch) says little about which op it is.
  // Operands of b in the order that best agrees with a (swapped for commutative binary ops).
  std::vector<Value*> alignedOps(const Node* a, const Node* b) {
    std::vector<Value*> ob = ops(b);
    if (ob.size() == 2 && isCommutative(b->target)) {
      std::vector<Value*> sw = {ob[1], ob[0]};
      if (agreementWith(a, sw) > agreementWith(a, ob)) return sw;
    }
    return ob;
  }

  int agreement(const Node* a, const Node* b) { return agreementWith(a, alignedOps(a, b)); }

  int agreementWith(const Node* a, const std::vector<Value*>& ob) {
    const auto& oa = ops(a);
    if (oa.size() != ob.size()) return -1;
    bool tensors = hasTensorOperand(oa);
    int agree = 0;
    for (size_t j = 0; j < oa.size(); ++j) {
      const Value* ma = mapA(oa[j]);
      const Value* mb = mapB(ob[j]);
      if (ma && ma == ob[j]) {
        if (!tensors || oa[j]->isTensor()) ++agree;
      } else if (ma && mb) {
        return -1;
      }
    }
    return agree;
  }

  bool forwardPass() {
    bool changed = false;
    for (const Node* a : nodes_a_) {
      if (matchedA(a)) continue;
      std::vector<const Node*> cands;
      std::unordered_set<const Node*> seen;
      bool tensors = hasTensorOperand(ops(a));
      for (const Value* v : ops(a)) {
        if (tensors && !v->isTensor()) continue;
        const Value* vb = mapA(v);
        if (!vb) continue;
        for (const Node* u : vb->users())
          if (!matchedB(u) && label(u) == label(a) && seen.insert(u).second) cands.push_back(u);
      }
      if (cands.empty()) continue;
      std::sort(cands.begin(), cands.end(), [&](const Node* x, const Node* y) { return pos_b_.at(x) < pos_b_.at(y); });
      std::vector<const Node*> ok;
      std::unordered_map<const Node*, int> agree;
      for (const Node* c : cands) {
        int g = agreement(a, c);
        if (g > 0) {
          ok.push_back(c);
          agree[c] = g;
        }
      }
      if (const Node* b = best(a, ok, [&](const Node* c) { return agree[c]; })) {
        matchNode(a, b);
        changed = true;
      }
    }
    return changed;
  }

  // Producers of the values at the same position of two matched uses.
  bool pairProducers(const Value* va, const Value* vb) {
    if (!va || !vb || mapA(va) || mapB(vb)) return false;
    if (va->kind != vb->kind) return false;
    if (!va->producer() && !vb->producer()) {
      if (va->isTensor() && va->type.dtype != vb->type.dtype) return false;
      matchInput(va, vb);
      return true;
    }
    const Node* pa = va->producer();
    const Node* pb = vb->producer();
    if (!pa || !pb || matchedA(pa) || matchedB(pb)) return false;
    if (va->resultIndex() != vb->resultIndex() || label(pa) != label(pb) || ops(pa).size() != ops(pb).size()) return false;
    if (agreement(pa, pb) < 0) return false;
    matchNode(pa, pb);
    return true;
  }

  bool backwardPass() {
    bool changed = false;
    const auto& oa = a_.outputs();
    const auto& ob = b_.outputs();
    for (size_t i = 0; i < std::min(oa.size(), ob.size()); ++i) changed |= pairProducers(oa[i].value, ob[i].value);
    for (auto it = nodes_a_.rbegin(); it != nodes_a_.rend(); ++it) {
      const Node* a = *it;
      auto m = d_.a_to_b.find(a);
      if (m == d_.a_to_b.end()) continue;
      const auto& xa = ops(a);
      std::vector<Value*> xb = alignedOps(a, m->second);
      if (xa.size() != xb.size()) continue;
      for (size_t j = 0; j < xa.size(); ++j) changed |= pairProducers(xa[j], xb[j]);
    }
    return changed;
  }

  // ---- regions ----

  struct UnionFind {
    std::vector<int> p;
    explicit UnionFind(size_t n) : p(n) { std::iota(p.begin(), p.end(), 0); }
    int find(int x) { return p[x] == x ? x : p[x] = find(p[x]); }
    void unite(int x, int y) {
      x = find(x);
      y = find(y);
      if (x != y) p[std::max(x, y)] = std::min(x, y);
    }
  };

  static std::vector<const Node*> distinctUsers(const Value* v) {
    std::vector<const Node*> out;
    for (const Node* u : v->users())
      if (std::find(out.begin(), out.end(), u) == out.end()) out.push_back(u);
    return out;
  }

  void buildRegions() {
    std::vector<const Node*> removed, added;
    for (const Node* n : nodes_a_)
      if (!matchedA(n)) removed.push_back(n);
    for (const Node* n : nodes_b_)
      if (!matchedB(n)) added.push_back(n);
    std::unordered_map<const Node*, int> id;
    for (size_t i = 0; i < removed.size(); ++i) id[removed[i]] = static_cast<int>(i);
    for (size_t j = 0; j < added.size(); ++j) id[added[j]] = static_cast<int>(removed.size() + j);
    UnionFind uf(removed.size() + added.size());
    std::vector<bool> anchored(removed.size() + added.size(), false);
    auto link = [&](const Node* r, const Node* n) {
      int x = id.at(r), y = id.at(n);
      uf.unite(x, y);
      anchored[x] = anchored[y] = true;
    };

    // (a) a new node took over a use of a removed node's output.
    for (const Node* r : removed) {
      for (const Value* o : r->outputs()) {
        if (!o) continue;
        for (const Node* u : distinctUsers(o)) {
          auto m = d_.a_to_b.find(u);
          if (m == d_.a_to_b.end()) continue;
          const auto& xa = ops(u);
          const auto& xb = ops(m->second);
          for (size_t p = 0; p < xa.size() && p < xb.size(); ++p) {
            if (xa[p] != o) continue;
            const Node* n = xb[p]->producer();
            if (n && !matchedB(n)) link(r, n);
          }
        }
        const auto& oa = a_.outputs();
        const auto& ob = b_.outputs();
        for (size_t i = 0; i < std::min(oa.size(), ob.size()); ++i) {
          if (oa[i].value != o || !ob[i].value) continue;
          const Node* n = ob[i].value->producer();
          if (n && !matchedB(n)) link(r, n);
        }
      }
    }
    // (b) the only removed and the only new consumer of one matched value.
    auto sharedInput = [&](const Value* va) {
      const Value* vb = mapA(va);
      if (!vb) return;
      std::vector<const Node*> ca, cb;
      for (const Node* u : distinctUsers(va))
        if (!matchedA(u)) ca.push_back(u);
      for (const Node* u : distinctUsers(vb))
        if (!matchedB(u)) cb.push_back(u);
      if (ca.size() == 1 && cb.size() == 1) link(ca[0], cb[0]);
    };
    for (const auto& in : a_.inputs()) sharedInput(in.value);
    for (const Node* n : nodes_a_)
      if (matchedA(n))
        for (const Value* o : n->outputs())
          if (o) sharedInput(o);
    // (c) nodes without boundary evidence join the group of the nearest node with evidence
    // (breadth-first from all of them at once, over removed (resp. new) neighbours; a
    // producer wins over a user at equal distance, so a value that crosses from one site to
    // the next, like a residual, stays with the site that produced it). What no evidence
    // reaches joins its neighbours.
    auto attach = [&](const std::vector<const Node*>& side, bool is_a) {
      auto inSide = [&](const Node* n) { return n && (is_a ? !matchedA(n) : !matchedB(n)); };
      std::vector<bool> assigned = anchored;
      for (bool changed = true; changed;) {
        changed = false;
        std::vector<std::pair<const Node*, const Node*>> picks;
        for (const Node* n : side) {
          if (assigned[id.at(n)]) continue;
          const Node* pick = nullptr;
          for (const Value* v : ops(n)) {
            const Node* p = v->producer();
            if (inSide(p) && assigned[id.at(p)]) {
              pick = p;
              break;
            }
          }
          for (size_t i = 0; !pick && i < n->numOutputs(); ++i) {
            const Value* o = n->output(i);
            if (!o) continue;
            for (const Node* u : o->users())
              if (inSide(u) && assigned[id.at(u)]) {
                pick = u;
                break;
              }
          }
          if (pick) picks.emplace_back(n, pick);
        }
        for (const auto& [n, p] : picks) {
          uf.unite(id.at(n), id.at(p));
          assigned[id.at(n)] = true;
          changed = true;
        }
      }
      for (const Node* n : side) {
        if (assigned[id.at(n)]) continue;
        for (const Value* v : ops(n))
          if (inSide(v->producer())) uf.unite(id.at(n), id.at(v->producer()));
        for (const Value* o : n->outputs()) {
          if (!o) continue;
          for (const Node* u : o->users())
            if (inSide(u)) uf.unite(id.at(n), id.at(u));
        }
      }
    };
    attach(removed, true);
    attach(added, false);
    // (d) one-sided groups sharing at least two boundary inputs are linked.
    {
      std::map<int, std::set<const Value*>> bound_a, bound_b;  // boundary inputs, as B values
      std::map<int, bool> has_a, has_b;
      for (const Node* r : removed) {
        int c = uf.find(id.at(r));
        has_a[c] = true;
        for (const Value* v : ops(r))
          if (const Value* m = mapA(v)) bound_a[c].insert(m);
      }
      for (const Node* n : added) {
        int c = uf.find(id.at(n));
        has_b[c] = true;
        for (const Value* v : ops(n))
          if (mapB(v)) bound_b[c].insert(v);
      }
      for (auto& [cb, sb] : bound_b) {
        if (has_a.count(cb)) continue;
        int pick = -1;
        size_t best_shared = 1;
        for (auto& [ca, sa] : bound_a) {
          if (has_b.count(ca)) continue;
          size_t shared = 0;
          for (const Value* v : sb) shared += sa.count(v);
          if (shared > best_shared) {
            best_shared = shared;
            pick = ca;
          }
        }
        if (pick >= 0) {
          uf.unite(pick, cb);
          has_b[pick] = true;
        }
      }
    }

    std::map<int, DiffRegion> groups;
    for (const Node* r : removed) groups[uf.find(id.at(r))].removed.push_back(r);
    for (const Node* n : added) groups[uf.find(id.at(n))].added.push_back(n);
    std::vector<std::pair<double, DiffRegion>> ordered;
    for (auto& [root, reg] : groups) {
      reg.kind = reg.removed.empty() ? DiffRegion::Kind::Added
                 : reg.added.empty() ? DiffRegion::Kind::Removed
                                     : DiffRegion::Kind::Rewritten;
      double key;
      if (!reg.removed.empty()) {
        key = static_cast<double>(pos_a_.at(reg.removed.front()));
      } else {
        key = -0.5;
        for (size_t p = pos_b_.at(reg.added.front()); p-- > 0;) {
          auto m = d_.b_to_a.find(nodes_b_[p]);
          if (m != d_.b_to_a.end()) {
            key = static_cast<double>(pos_a_.at(m->second)) + 0.5;
            break;
          }
        }
      }
      ordered.emplace_back(key, std::move(reg));
    }
    std::stable_sort(ordered.begin(), ordered.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    for (auto& [key, reg] : ordered) {
      reg.id = static_cast<int>(d_.regions.size()) + 1;
      int idx = static_cast<int>(d_.regions.size());
      for (const Node* n : reg.removed) d_.region_of[n] = idx;
      for (const Node* n : reg.added) d_.region_of[n] = idx;
      d_.regions.push_back(std::move(reg));
    }
  }

  const Graph& a_;
  const Graph& b_;
  const DiffOptions& opts_;
  GraphDiff& d_;
  std::vector<const Node*> nodes_a_, nodes_b_;
  std::unordered_map<const Node*, size_t> pos_a_, pos_b_;
  std::unordered_map<const Node*, std::vector<Value*>> operands_;
  std::unordered_map<const Node*, std::string> labels_;
  std::unordered_map<const Value*, const Value*> inputs_b_to_a_;
  std::unordered_map<std::string, std::vector<const Node*>> exact_b_;
};

std::string opShortName(const Node* n) {
  std::string f = fxfuseShortName(n->target);
  if (!f.empty()) return f;
  std::string t = shortTarget(n->target);
  if (t.rfind("higher_order.", 0) == 0) {
    t = t.substr(13);
    for (const ir::Arg& a : n->args())
      if (a.value.kind == ir::Attr::Kind::Op) return t + "(" + shortTarget(a.value.s) + ")";
  }
  if (t.rfind("aten.", 0) == 0) t = t.substr(5);
  return t;
}

std::string multiset(const std::vector<const Node*>& nodes) {
  std::map<std::string, int> c;
  for (const Node* n : nodes) c[opShortName(n)]++;
  std::string s;
  for (const auto& [name, k] : c) {
    if (!s.empty()) s += " + ";
    s += k > 1 ? fmt::format("{}x {}", k, name) : name;
  }
  return s.empty() ? "(nothing)" : s;
}

}  // namespace

std::string nodeLabel(const Node& n) {
  // Spellings that differ between exporters but compute the same thing share a label:
  // view/reshape/_unsafe_view (by output rank), dtype-only casts (by target dtype).
  const std::string& t = n.target;
  const Value* out0 = n.numOutputs() == 1 ? n.output(0) : nullptr;
  if (out0 && out0->isTensor()) {
    if (t == "aten.view.default" || t == "aten.reshape.default" || t == "aten._unsafe_view.default")
      return fmt::format("view->rank{}", out0->type.rank());
    bool cast = t == "prims.convert_element_type.default";
    if (t == "aten._to_copy.default") {
      cast = true;
      for (const ir::Arg& a : n.args())
        if (!a.value.isValue() && !a.value.isNone() && a.name != "dtype" && a.name != "device" && a.name != "layout")
          cast = false;
    }
    if (cast) return fmt::format("cast->{}", ir::dtypeName(out0->type.dtype));
  }
  std::string s = n.target;
  s += '(';
  for (const ir::Arg& a : n.args()) {
    if (a.value.isNone()) continue;
    if (a.value.isValue()) {
      s += "%,";
      continue;
    }
    s += a.name;
    s += '=';
    labelAttr(a.value, s);
    s += ',';
  }
  s += ")->" + std::to_string(n.numOutputs());
  return s;
}

std::string DiffRegion::summary() const { return multiset(removed) + " -> " + multiset(added); }

std::vector<std::string> DiffRegion::locations() const {
  std::set<std::string> s;
  for (const Node* n : removed)
    if (auto l = locText(*n); !l.empty()) s.insert(l);
  for (const Node* n : added)
    if (auto l = locText(*n); !l.empty()) s.insert(l);
  return {s.begin(), s.end()};
}

size_t GraphDiff::count(DiffRegion::Kind k) const {
  return static_cast<size_t>(std::count_if(regions.begin(), regions.end(), [k](const DiffRegion& r) { return r.kind == k; }));
}

std::map<std::string, int> GraphDiff::rewriteCounts() const {
  std::map<std::string, int> out;
  for (const auto& r : regions)
    if (r.kind == DiffRegion::Kind::Rewritten) out[r.summary()]++;
  return out;
}

GraphDiff diffGraphs(const Graph& a, const Graph& b, const DiffOptions& opts) {
  GraphDiff d;
  d.a = &a;
  d.b = &b;
  Matcher(a, b, opts, d).run();
  return d;
}

}  // namespace fxfuse::inspect
