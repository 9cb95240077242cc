#include "ir/verifier.h"

#include <algorithm>
#include <set>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "ir/status.h"

namespace fxfuse::ir {

namespace {

void checkSymbols(const Module& m, const SymExpr& e, const std::string& where, std::vector<std::string>& out) {
  std::set<std::string> syms;
  e.collectSymbols(syms);
  for (const auto& s : syms)
    if (!m.symbols.find(s)) out.push_back(where + ": symbol '" + s + "' is not in the symbol table");
}

void checkValueType(const Module& m, const Value& v, const std::string& where, std::vector<std::string>& out) {
  if (v.kind != ValueKind::Tensor) {
    if (v.sym) checkSymbols(m, *v.sym, where, out);
    return;
  }
  if (v.type.stride.size() != v.type.shape.size())
    out.push_back(where + ": stride rank " + std::to_string(v.type.stride.size()) + " differs from shape rank " +
                  std::to_string(v.type.shape.size()));
  for (const auto& d : v.type.shape) {
    if (d.isInt() && d.intValue() < 0) out.push_back(where + ": negative size " + d.str());
    checkSymbols(m, d, where, out);
  }
  for (const auto& d : v.type.stride) checkSymbols(m, d, where, out);
}

}  // namespace

std::vector<std::string> verifyModule(const Module& m) {
  std::vector<std::string> out;
  for (const auto& gp : m.graphs()) {
    const Graph& g = *gp;
    std::unordered_set<const Value*> defined;
    // Uses seen in arguments, compared with each value's use list at the end (linear; a
    // per-use search of the use list is quadratic for weights and symbols used everywhere).
    std::unordered_map<const Value*, size_t> arg_uses;
    for (const auto& in : g.inputs()) {
      if (!in.value) {
        out.push_back("graph " + g.name + ": null input");
        continue;
      }
      if (!defined.insert(in.value).second) out.push_back("graph " + g.name + ": input defined twice");
      checkValueType(m, *in.value, "graph " + g.name + " input " + in.value->name, out);
    }
    for (const auto& np : g.nodes()) {
      const Node& n = *np;
      std::string where = "graph " + g.name + " node " + n.name;
      if (n.graph() != &g) out.push_back(where + ": node belongs to another graph");
      std::function<void(const Attr&)> check = [&](const Attr& a) {
        if (a.kind == Attr::Kind::Value) {
          if (!a.value) {
            out.push_back(where + ": null value argument");
          } else if (!defined.count(a.value)) {
            out.push_back(where + ": uses a value defined later or in another graph (not topologically ordered)");
          } else {
            arg_uses[a.value]++;
          }
        } else if (a.kind == Attr::Kind::List) {
          for (const auto& x : a.list) check(x);
        } else if (a.kind == Attr::Kind::Graph) {
          if (a.graph < 0 || static_cast<size_t>(a.graph) >= m.graphs().size())
            out.push_back(where + ": reference to missing graph " + std::to_string(a.graph));
        } else if (a.kind == Attr::Kind::Sym && a.sym) {
          checkSymbols(m, *a.sym, where, out);
        }
      };
      for (const auto& a : n.args()) check(a.value);
      for (size_t i = 0; i < n.numOutputs(); ++i) {
        Value* v = n.output(i);
        if (!v) continue;
        if (v->producer() != &n || v->resultIndex() != static_cast<int>(i))
          out.push_back(where + ": output " + std::to_string(i) + " does not point back to its node");
        if (!defined.insert(v).second) out.push_back(where + ": output value defined twice");
        checkValueType(m, *v, where + " output " + std::to_string(i), out);
        for (Node* u : v->users())
          if (u->graph() != &g) out.push_back(where + ": output used from another graph");
      }
    }
    for (const auto& o : g.outputs())
      if (o.value && !defined.count(o.value)) out.push_back("graph " + g.name + ": output of an undefined value");
    for (const Value* v : defined) {
      auto it = arg_uses.find(v);
      size_t seen = it == arg_uses.end() ? 0 : it->second;
      if (seen != v->users().size())
        out.push_back("graph " + g.name + ": value '" + v->name + "' has " + std::to_string(v->users().size()) +
                      " entries in its use list but " + std::to_string(seen) + " uses in arguments");
    }
    if (out.size() > 100) break;
  }
  return out;
}

void verifyOrThrow(const Module& m, const std::string& context) {
  auto problems = verifyModule(m);
  if (!problems.empty()) {
    std::string more = problems.size() > 1 ? " (and " + std::to_string(problems.size() - 1) + " more)" : "";
    fail("{}: invalid IR: {}{}", context, problems.front(), more);
  }
}

}  // namespace fxfuse::ir
