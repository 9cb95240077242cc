#include "tools/inspect/node_text.h"

#include <cctype>
#include <cstdlib>

#include "ir/fxg.h"
#include "ir/op_table.h"

namespace fxfuse::inspect {

namespace {

bool startsWith(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// Turns a module path spelled by dynamo/export into dotted form:
// "L['self'].model.layers[3].mlp" -> "model.layers.3.mlp", "L__self___layers_0" stays.
std::string normalizePath(std::string p) {
  for (const char* pre : {"L['self'].", "L[\"self\"].", "self."})
    if (startsWith(p, pre)) p = p.substr(std::char_traits<char>::length(pre));
  std::string out;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '[') {
      size_t j = p.find(']', i);
      if (j == std::string::npos) break;
      std::string inner = p.substr(i + 1, j - i - 1);
      if (!inner.empty() && (inner.front() == '\'' || inner.front() == '"')) inner = inner.substr(1, inner.size() - 2);
      if (!out.empty()) out += '.';
      out += inner;
      i = j;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string shortTarget(const std::string& target) {
  std::string t = target;
  if (startsWith(t, "torch.ops.")) t = t.substr(10);
  const std::string def = ".default";
  if (t.size() > def.size() && t.compare(t.size() - def.size(), def.size(), def) == 0) t.resize(t.size() - def.size());
  return t;
}

std::string fxfuseShortName(const std::string& target) {
  std::string t = shortTarget(target);
  if (!startsWith(t, "fxfuse.")) return {};
  t = t.substr(7);
  size_t dot = t.find('.');
  if (dot != std::string::npos) t.resize(dot);
  return t;
}

bool isCanonicalName(const std::string& s) { return ir::isCanonicalOp(s); }

bool isFusedName(const std::string& s) { return ir::isFusedOp(s); }

OpClass opClass(const ir::Node& n) {
  std::string f = fxfuseShortName(n.target);
  if (!f.empty()) {
    if (isFusedName(f)) return OpClass::Fused;
    if (isCanonicalName(f)) return OpClass::Canonical;
    return OpClass::FxfuseOther;
  }
  if (n.kind == ir::NodeKind::Hop || startsWith(n.target, "higher_order.")) return OpClass::Hop;
  for (const char* ns : {"aten.", "prims.", "_operator.", "math.", "torch.", "builtins.", "operator."})
    if (startsWith(n.target, ns)) return OpClass::Aten;
  if (n.kind == ir::NodeKind::SymPy) return OpClass::Aten;
  return OpClass::Custom;
}

std::string valueName(const ir::Value& v) {
  if (!v.name.empty()) return v.name;
  if (const ir::Node* p = v.producer()) {
    if (p->numOutputs() == 1) return p->name;
    return p->name + "." + std::to_string(v.resultIndex());
  }
  return "in" + std::to_string(v.id);
}

std::string attrText(const ir::Attr& a, size_t max_list) {
  using K = ir::Attr::Kind;
  switch (a.kind) {
    case K::None: return "None";
    case K::Value: return a.value ? "%" + valueName(*a.value) : "%?";
    case K::Int: return std::to_string(a.i);
    case K::Float: return ir::formatFloat(a.f);
    case K::Bool: return a.b ? "true" : "false";
    case K::String: return "\"" + a.s + "\"";
    case K::DType: return std::string(ir::dtypeName(a.dtype));
    case K::Device: return a.device.str();
    case K::Layout: return "layout";
    case K::MemoryFormat: return "memory_format";
    case K::Sym: return a.sym ? a.sym->str() : "sym";
    case K::List: {
      std::string s = "[";
      for (size_t i = 0; i < a.list.size(); ++i) {
        if (i == max_list) {
          s += ", ...";
          break;
        }
        if (i) s += ", ";
        s += attrText(a.list[i], max_list);
      }
      return s + "]";
    }
    case K::Op: return "@" + shortTarget(a.s);
    case K::Graph: return "graph(" + std::to_string(a.graph) + ")";
    case K::Opaque: return "<" + a.s + ">";
    case K::SpecialFloat: return a.s;
  }
  return "?";
}

std::string nodeText(const ir::Node& n, size_t max_chars) {
  std::string lhs;
  size_t present = 0;
  for (const ir::Value* v : n.outputs())
    if (v) ++present;
  if (n.numOutputs() == 1 && n.output(0)) {
    lhs = valueName(*n.output(0));
  } else if (present > 0) {
    lhs = "(";
    for (size_t i = 0; i < n.numOutputs(); ++i) {
      if (i) lhs += ", ";
      lhs += n.output(i) ? valueName(*n.output(i)) : "_";
    }
    lhs += ")";
  }
  std::string s = lhs.empty() ? "" : lhs + " = ";
  s += shortTarget(n.target) + "(";
  bool first = true;
  for (const ir::Arg& a : n.args()) {
    if (a.value.isNone()) continue;
    if (!first) s += ", ";
    first = false;
    if (!a.name.empty() && !a.value.isValue()) s += a.name + "=";
    s += attrText(a.value);
  }
  s += ")";
  if (max_chars && s.size() > max_chars) s = s.substr(0, max_chars - 3) + "...";
  return s;
}

std::string outputTypes(const ir::Node& n) {
  std::string s;
  for (const ir::Value* v : n.outputs()) {
    if (!v) continue;
    if (!s.empty()) s += ", ";
    s += ir::typeStr(*v);
  }
  return s;
}

ir::SourceLoc sourceLoc(const ir::Node& n) {
  if (!n.loc.empty()) return n.loc;
  ir::SourceLoc loc;
  auto it = n.meta.find("stack_trace");
  if (it == n.meta.end()) return loc;
  const std::string& st = it->second;
  size_t pos = st.rfind("File \"");
  if (pos == std::string::npos) return loc;
  size_t q = st.find('"', pos + 6);
  if (q == std::string::npos) return loc;
  loc.file = st.substr(pos + 6, q - pos - 6);
  size_t ln = st.find("line ", q);
  if (ln != std::string::npos) loc.line = std::atoi(st.c_str() + ln + 5);
  size_t nl = st.find('\n', q);
  if (nl != std::string::npos) {
    size_t a = st.find_first_not_of(' ', nl + 1);
    size_t b = st.find('\n', nl + 1);
    if (a != std::string::npos && a < b) loc.code = st.substr(a, b == std::string::npos ? std::string::npos : b - a);
  }
  return loc;
}

std::string locText(const ir::Node& n) {
  ir::SourceLoc l = sourceLoc(n);
  if (l.empty()) return {};
  return l.line > 0 ? l.file + ":" + std::to_string(l.line) : l.file;
}

std::string modulePath(const ir::Node& n) {
  auto it = n.meta.find("nn_module_stack");
  if (it == n.meta.end() || it->second.empty()) return {};
  // Entries "key,path,type" joined by ';' (fxfuse exporter and torch.export both), the
  // deepest module last.
  const std::string& s = it->second;
  std::string best;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(';', start);
    if (end == std::string::npos) end = s.size();
    std::string entry = s.substr(start, end - start);
    size_t c1 = entry.find(',');
    size_t c2 = entry.rfind(',');
    if (c1 != std::string::npos && c2 != std::string::npos && c2 > c1) {
      std::string path = normalizePath(entry.substr(c1 + 1, c2 - c1 - 1));
      if (!path.empty()) best = path;
    }
    start = end + 1;
  }
  return best;
}

LayerKey layerOfPath(const std::string& path) {
  LayerKey k;
  size_t start = 0;
  std::string prefix;
  while (start < path.size()) {
    size_t end = path.find('.', start);
    if (end == std::string::npos) end = path.size();
    std::string comp = path.substr(start, end - start);
    bool digits = !comp.empty() && comp.size() < 7;
    for (char c : comp) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    if (digits && !prefix.empty()) {
      k.prefix = prefix;
      k.index = std::atoi(comp.c_str());
      return k;
    }
    prefix += (prefix.empty() ? "" : ".") + comp;
    start = end + 1;
  }
  return k;
}

LayerKey layerOf(const ir::Node& n) { return layerOfPath(modulePath(n)); }

std::string htmlEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace fxfuse::inspect
