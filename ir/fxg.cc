#include "ir/fxg.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "ir/decimal.h"
#include "ir/status.h"

namespace fxfuse::ir {

// ===================================================================================== print

std::string formatFloat(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

namespace {

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned char>(c));
          out += b;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string dimsStr(const std::vector<SymExpr>& d) {
  std::string out = "[";
  for (size_t i = 0; i < d.size(); ++i) out += (i ? ", " : "") + d[i].str();
  return out + "]";
}

const char* layoutName(Layout l) {
  switch (l) {
    case Layout::Strided: return "layout.strided";
    case Layout::SparseCoo: return "layout.sparse_coo";
    case Layout::SparseCsr: return "layout.sparse_csr";
    case Layout::Other: return "layout.other";
    default: return "layout.unspecified";
  }
}

const char* memoryFormatName(MemoryFormat m) {
  switch (m) {
    case MemoryFormat::Contiguous: return "memory_format.contiguous";
    case MemoryFormat::ChannelsLast: return "memory_format.channels_last";
    case MemoryFormat::ChannelsLast3d: return "memory_format.channels_last_3d";
    case MemoryFormat::Preserve: return "memory_format.preserve";
    default: return "memory_format.unspecified";
  }
}

std::string attrStr(const Attr& a) {
  switch (a.kind) {
    case Attr::Kind::None: return "None";
    case Attr::Kind::Value: return a.value ? "%" + std::to_string(a.value->id) : "%?";
    case Attr::Kind::Int: return std::to_string(a.i);
    case Attr::Kind::Float: return formatFloat(a.f);
    case Attr::Kind::Bool: return a.b ? "true" : "false";
    case Attr::Kind::String: return quote(a.s);
    case Attr::Kind::DType: return std::string(dtypeName(a.dtype));
    case Attr::Kind::Device: return "device(" + (a.device.str().empty() ? "?" : a.device.str()) + ")";
    case Attr::Kind::Layout: return layoutName(a.layout);
    case Attr::Kind::MemoryFormat: return memoryFormatName(a.memory_format);
    case Attr::Kind::Sym: return "sym(" + a.sym->str() + ")";
    case Attr::Kind::List: {
      std::string out = "[";
      for (size_t i = 0; i < a.list.size(); ++i) out += (i ? ", " : "") + attrStr(a.list[i]);
      return out + "]";
    }
    case Attr::Kind::Op: return "@" + a.s;
    case Attr::Kind::Graph: return "graph(" + std::to_string(a.graph) + ")";
    case Attr::Kind::Opaque: return "opaque(" + quote(a.s) + ", " + quote(a.s2) + ")";
    case Attr::Kind::SpecialFloat: return a.s;
  }
  return "?";
}

const char* inputKindName(InputKind k) {
  switch (k) {
    case InputKind::Parameter: return "parameter";
    case InputKind::Buffer: return "buffer";
    case InputKind::ConstantTensor: return "constant";
    case InputKind::CustomObj: return "custom_obj";
    case InputKind::Token: return "token";
    default: return "user";
  }
}

const char* outputKindName(OutputKind k) {
  switch (k) {
    case OutputKind::BufferMutation: return "buffer_mutation";
    case OutputKind::UserInputMutation: return "user_input_mutation";
    case OutputKind::LossOutput: return "loss";
    case OutputKind::Other: return "other";
    default: return "user";
  }
}

}  // namespace

std::string typeStr(const Value& v) {
  switch (v.kind) {
    case ValueKind::SymInt: return "Sym(" + (v.sym ? v.sym->str() : "?") + ")";
    case ValueKind::SymFloat: return "SymFloat(" + (v.sym ? v.sym->str() : "?") + ")";
    case ValueKind::SymBool: return "SymBool(" + (v.sym ? v.sym->str() : "?") + ")";
    case ValueKind::Opaque: return "opaque<" + quote(v.opaque_type) + ">";
    case ValueKind::Tensor: break;
  }
  const TensorType& t = v.type;
  std::string out = std::string(dtypeName(t.dtype)) + dimsStr(t.shape);
  if (!t.isContiguous()) out += dimsStr(t.stride);
  if (!(t.storage_offset.isInt() && t.storage_offset.intValue() == 0)) out += "+(" + t.storage_offset.str() + ")";
  if (!t.device.type.empty()) out += " " + t.device.str();
  if (t.requires_grad) out += " grad";
  return out;
}

std::string printGraphFxg(Graph& g, const FxgPrintOptions& opts) {
  g.renumber();
  std::ostringstream os;
  os << "  graph @" << g.name << " {\n";
  for (const auto& in : g.inputs()) {
    os << "    input %" << in.value->id << " " << quote(in.value->name) << ": " << typeStr(*in.value);
    if (in.kind != InputKind::UserInput) os << " " << inputKindName(in.kind);
    if (!in.target.empty()) os << " " << quote(in.target);
    if (in.value->scalar_value) os << " value=" << formatFloat(*in.value->scalar_value);
    os << "\n";
  }
  for (const auto& np : g.nodes()) {
    const Node& n = *np;
    os << "    ";
    if (n.numOutputs() > 0) {
      for (size_t i = 0; i < n.numOutputs(); ++i) {
        if (i) os << ", ";
        Value* v = n.output(i);
        if (v) {
          os << "%" << v->id << ": " << typeStr(*v);
        } else {
          os << "_";
        }
      }
      os << " = ";
    }
    os << n.target << "(";
    bool first = true, kw = false;
    for (const auto& a : n.args()) {
      if (!first) os << ", ";
      if (a.keyword && !kw) {
        os << "*, ";
        kw = true;
      }
      if (!a.name.empty()) os << a.name << "=";
      os << attrStr(a.value);
      first = false;
    }
    os << ")";
    if (n.kind == NodeKind::SymPy && n.target.rfind("_operator.", 0) != 0 && n.target.rfind("math.", 0) != 0 &&
        n.target.rfind("torch.", 0) != 0)
      os << " sympy";
    if (opts.locations && !n.loc.empty()) os << " loc(" << quote(n.loc.file) << ":" << n.loc.line << ")";
    os << "  // " << n.name << "\n";
  }
  for (const auto& out : g.outputs()) {
    os << "    output ";
    if (out.value) {
      os << "%" << out.value->id;
    } else {
      os << "=" << attrStr(out.constant);
    }
    if (out.kind != OutputKind::UserOutput) os << " " << outputKindName(out.kind);
    if (!out.target.empty()) os << " " << quote(out.target);
    os << "\n";
  }
  os << "  }\n";
  return os.str();
}

std::string printFxg(Module& m, const FxgPrintOptions& opts) {
  std::ostringstream os;
  os << "fxfuse.module {\n";
  if (opts.header) {
    const Producer& p = m.producer;
    if (!p.tool.empty() || !p.torch_version.empty() || p.stage != Stage::Unspecified) {
      os << "  producer tool=" << quote(p.tool) << " torch=" << quote(p.torch_version)
         << " schema=" << quote(p.source_schema) << " stage=" << stageName(p.stage)
         << " functional=" << (p.functional ? "true" : "false") << "\n";
    }
    for (const auto& [name, s] : m.symbols.all()) {
      os << "  symbol " << name << " range=[" << (s.min ? std::to_string(*s.min) : "?") << ", "
         << (s.max ? std::to_string(*s.max) : "?") << "]";
      if (s.hint) os << " hint=" << *s.hint;
      if (!s.source.empty()) os << " source=" << quote(s.source);
      os << "\n";
    }
    for (const auto& [target, schema] : m.op_schemas) os << "  schema " << quote(target) << " " << quote(schema) << "\n";
    for (const auto& w : m.weights) {
      Value tmp;
      tmp.type = w.type;
      os << "  weight " << quote(w.fqn) << ": " << typeStr(tmp) << (w.is_param ? " parameter" : " buffer") << "\n";
    }
    for (const auto& [k, v] : m.metadata) os << "  meta " << quote(k) << " " << quote(v) << "\n";
    for (const auto& gd : m.guards) os << "  guard " << quote(gd.condition.str()) << " " << quote(gd.reason) << "\n";
  }
  for (auto& g : m.graphs()) os << printGraphFxg(*g, opts);
  os << "}\n";
  return os.str();
}

// ===================================================================================== parse

namespace {

class LineParser {
 public:
  LineParser(std::string_view line, const std::string& file, int lineno) : s_(line), file_(file), lineno_(lineno) {}

  [[noreturn]] void error(const std::string& what) const {
    fail("{}:{}: {} (at column {})", file_, lineno_, what, pos_ + 1);
  }

  static constexpr int kMaxAttrDepth = 64;
  int list_depth_ = 0;

  void ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
  }
  bool atEnd() {
    ws();
    return pos_ >= s_.size();
  }
  bool peek(std::string_view t) {
    ws();
    return s_.substr(pos_, t.size()) == t;
  }
  bool eat(std::string_view t) {
    if (peek(t)) {
      pos_ += t.size();
      return true;
    }
    return false;
  }
  void expect(std::string_view t) {
    if (!eat(t)) error("expected '" + std::string(t) + "'");
  }
  std::string rest() {  // peeks at the remaining text
    ws();
    return std::string(s_.substr(pos_));
  }
  std::string takeRest() {
    std::string r = rest();
    pos_ = s_.size();
    return r;
  }
  size_t pos() const { return pos_; }

  std::string ident() {
    ws();
    size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '#') ++pos_;  // extension-registry op targets: "#ns:op"
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' ||
                                s_[pos_] == '.' || s_[pos_] == ':'))
      ++pos_;
    if (start == pos_) error("expected a name");
    return std::string(s_.substr(start, pos_ - start));
  }

  std::string str() {
    ws();
    if (pos_ >= s_.size() || s_[pos_] != '"') error("expected a string");
    ++pos_;
    std::string out;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char c = s_[pos_++];
      if (c == '\\' && pos_ < s_.size()) {
        char e = s_[pos_++];
        switch (e) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case 'x': {
            if (pos_ + 2 > s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_])) ||
                !std::isxdigit(static_cast<unsigned char>(s_[pos_ + 1])))
              error("bad escape");
            out += static_cast<char>(std::stoi(std::string(s_.substr(pos_, 2)), nullptr, 16));
            pos_ += 2;
            break;
          }
          default: out += e;
        }
      } else {
        out += c;
      }
    }
    if (pos_ >= s_.size()) error("unterminated string");
    ++pos_;
    return out;
  }

  int64_t integer() {
    ws();
    size_t start = pos_;
    if (pos_ < s_.size() && (s_[pos_] == '-' || s_[pos_] == '+')) ++pos_;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    try {
      return std::stoll(std::string(s_.substr(start, pos_ - start)));
    } catch (const std::exception&) {
      error("expected an integer");
    }
  }

  // Text up to the bracket that closes the one just consumed.
  std::string balanced(char open, char close) {
    int depth = 1;
    size_t start = pos_;
    bool q = false;
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == '"' || c == '\'') q = !q;
      if (!q) {
        if (c == open) ++depth;
        if (c == close && --depth == 0) {
          std::string out(s_.substr(start, pos_ - start));
          ++pos_;
          return out;
        }
      }
      ++pos_;
    }
    error(std::string("missing '") + close + "'");
  }

  std::vector<SymExpr> dims() {
    expect("[");
    std::string inner = balanced('[', ']');
    std::vector<SymExpr> out;
    int depth = 0;
    size_t start = 0;
    for (size_t i = 0; i <= inner.size(); ++i) {
      char c = i < inner.size() ? inner[i] : ',';
      if (c == '(' || c == '[') ++depth;
      if (c == ')' || c == ']') --depth;
      if (depth < 0) error("unbalanced ')' in dimensions [" + inner + "]");
      if (c == ',' && depth == 0) {
        std::string piece = inner.substr(start, i - start);
        if (piece.find_first_not_of(" \t") == std::string::npos) {
          if (i < inner.size() || !out.empty()) error("empty dimension in [" + inner + "]");
        } else {
          out.push_back(parseSymExpr(piece, file_ + ":" + std::to_string(lineno_)));
        }
        start = i + 1;
      }
    }
    if (depth != 0) error("unbalanced '(' in dimensions [" + inner + "]");
    return out;
  }

  Device device() {
    std::string d = ident();
    Device dev;
    auto colon = d.find(':');
    if (colon == std::string::npos) {
      dev.type = d;
    } else {
      dev.type = d.substr(0, colon);
      try {
        dev.index = std::stoi(d.substr(colon + 1));
      } catch (const std::exception&) {
        error("bad device '" + d + "'");
      }
    }
    return dev;
  }

  bool peekDevice() {
    ws();
    size_t end = pos_;
    while (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_')) ++end;
    if (end == pos_ || !isKnownDeviceType(s_.substr(pos_, end - pos_))) return false;
    return end >= s_.size() || s_[end] == ':' || s_[end] == ' ' || s_[end] == ',' || s_[end] == ')';
  }

  // TYPE := Sym(..) | SymFloat(..) | SymBool(..) | opaque<"t"> | DTYPE[dims][strides]?+(off)? DEVICE? grad?
  void type(Value& v) {
    ws();
    auto symLike = [&](const char* kw, ValueKind k) {
      if (!eat(kw)) return false;
      v.kind = k;
      std::string inner = balanced('(', ')');
      if (inner != "?") v.sym = parseSymExpr(inner, file_ + ":" + std::to_string(lineno_));
      return true;
    };
    if (symLike("SymFloat(", ValueKind::SymFloat) || symLike("SymBool(", ValueKind::SymBool) ||
        symLike("Sym(", ValueKind::SymInt))
      return;
    if (eat("opaque<")) {
      v.kind = ValueKind::Opaque;
      v.opaque_type = str();
      expect(">");
      return;
    }
    v.kind = ValueKind::Tensor;
    size_t start = pos_;
    while (pos_ < s_.size() && std::isalnum(static_cast<unsigned char>(s_[pos_]))) ++pos_;
    std::string dt(s_.substr(start, pos_ - start));
    auto d = dtypeFromName(dt);
    if (!d) error("unknown dtype '" + dt + "'");
    v.type.dtype = *d;
    v.type.shape = dims();
    if (peek("[")) {
      v.type.stride = dims();
      if (v.type.stride.size() != v.type.shape.size()) error("stride rank differs from shape rank");
    } else {
      try {  // the strides multiply sizes: an overflow is this line's error
        v.type.stride = TensorType::contiguousStrides(v.type.shape);
      } catch (const FxError& e) {
        error(e.what());
      }
    }
    if (eat("+(")) v.type.storage_offset = parseSymExpr(balanced('(', ')'), file_);
    if (peekDevice()) v.type.device = device();
    if (peek("grad") && !peek("grad=")) {
      eat("grad");
      v.type.requires_grad = true;
    }
  }

  Attr attr(const std::map<uint32_t, Value*>& values) {
    ws();
    if (pos_ >= s_.size()) error("expected an argument");
    char c = s_[pos_];
    if (c == '%') {
      ++pos_;
      int64_t id = integer();
      auto it = values.find(static_cast<uint32_t>(id));
      if (it == values.end()) error("use of undefined value %" + std::to_string(id));
      return Attr::ofValue(it->second);
    }
    if (c == '"') return Attr::ofString(str());
    if (c == '[') {
      // Lists are the only recursive attribute: bound the depth (the printer and every
      // pass walk attributes recursively too).
      if (++list_depth_ > kMaxAttrDepth) error("argument lists nested more than " + std::to_string(kMaxAttrDepth) + " deep");
      ++pos_;
      std::vector<Attr> items;
      if (!eat("]")) {
        while (true) {
          items.push_back(attr(values));
          if (eat("]")) break;
          expect(",");
        }
      }
      --list_depth_;
      return Attr::ofList(std::move(items));
    }
    if (c == '@') {
      ++pos_;
      return Attr::ofOp(ident());
    }
    if (c == '-' || c == '+' || std::isdigit(static_cast<unsigned char>(c))) {
      if (eat("-inf")) return Attr::ofSpecialFloat("-inf");
      size_t start = pos_;
      ++pos_;
      while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '.' ||
                                  s_[pos_] == 'e' || s_[pos_] == 'E' ||
                                  ((s_[pos_] == '-' || s_[pos_] == '+') && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E'))))
        ++pos_;
      std::string tok(s_.substr(start, pos_ - start));
      try {
        if (tok.find_first_of(".eE") != std::string::npos) {
          if (std::optional<double> v = parseDecimal(tok)) return Attr::ofFloat(*v);
          error("bad number '" + tok + "'");
        }
        return Attr::ofInt(std::stoll(tok));
      } catch (const std::exception&) {
        error("bad number '" + tok + "'");
      }
    }
    if (eat("sym(")) return Attr::ofSym(parseSymExpr(balanced('(', ')'), file_ + ":" + std::to_string(lineno_)));
    if (eat("device(")) {
      std::string inner = balanced('(', ')');
      LineParser sub(inner, file_, lineno_);
      Device d;
      if (inner != "?") d = sub.device();
      return Attr::ofDevice(d);
    }
    if (eat("graph(")) {
      int64_t gi = integer();
      expect(")");
      return Attr::ofGraph(static_cast<int>(gi));
    }
    if (eat("opaque(")) {
      std::string t = str();
      expect(",");
      std::string r = str();
      expect(")");
      return Attr::ofOpaque(t, r);
    }
    std::string id = ident();
    if (id == "None") return Attr::none();
    if (id == "true") return Attr::ofBool(true);
    if (id == "false") return Attr::ofBool(false);
    if (id == "inf" || id == "nan") return Attr::ofSpecialFloat(id);
    if (auto d = dtypeFromName(id)) return Attr::ofDType(*d);
    if (id.rfind("layout.", 0) == 0) {
      Attr a;
      a.kind = Attr::Kind::Layout;
      std::string n = id.substr(7);
      a.layout = n == "strided" ? Layout::Strided : n == "sparse_coo" ? Layout::SparseCoo
               : n == "sparse_csr" ? Layout::SparseCsr : n == "other" ? Layout::Other : Layout::Unspecified;
      return a;
    }
    if (id.rfind("memory_format.", 0) == 0) {
      Attr a;
      a.kind = Attr::Kind::MemoryFormat;
      std::string n = id.substr(14);
      a.memory_format = n == "contiguous" ? MemoryFormat::Contiguous : n == "channels_last" ? MemoryFormat::ChannelsLast
                      : n == "channels_last_3d" ? MemoryFormat::ChannelsLast3d
                      : n == "preserve" ? MemoryFormat::Preserve : MemoryFormat::Unspecified;
      return a;
    }
    error("unknown argument '" + id + "'");
  }

 private:
  std::string_view s_;
  const std::string& file_;
  int lineno_;
  size_t pos_ = 0;
};

Stage stageFromName(const std::string& s) {
  for (int i = 0; i <= static_cast<int>(Stage::FxfuseCompiled); ++i)
    if (stageName(static_cast<Stage>(i)) == s) return static_cast<Stage>(i);
  return Stage::Unspecified;
}

// One module-level line (producer, symbol, schema, weight, guard, meta, graph): its fields into
// `m`; a `graph @name {` line opens `g` (and forgets the previous graph's value ids).
void parseModuleEntry(LineParser& p, Module& m, Graph*& g, std::map<uint32_t, Value*>& values,
                      const std::string& filename, int lineno) {
  std::string kw = p.ident();
  if (kw == "producer") {
    while (!p.atEnd()) {
      std::string key = p.ident();
      p.expect("=");
      if (key == "tool") m.producer.tool = p.str();
      else if (key == "torch") m.producer.torch_version = p.str();
      else if (key == "schema") m.producer.source_schema = p.str();
      else if (key == "stage") m.producer.stage = stageFromName(p.ident());
      else if (key == "functional") m.producer.functional = p.ident() == "true";
      else p.error("unknown producer field '" + key + "'");
    }
  } else if (kw == "symbol") {
    std::string name = p.ident();
    SymbolInfo& s = m.symbols.getOrAdd(name);
    while (!p.atEnd()) {
      std::string key = p.ident();
      p.expect("=");
      if (key == "range") {
        p.expect("[");
        if (!p.eat("?")) s.min = p.integer();
        p.expect(",");
        if (!p.eat("?")) s.max = p.integer();
        p.expect("]");
      } else if (key == "hint") {
        s.hint = p.integer();
      } else if (key == "source") {
        s.source = p.str();
      } else {
        p.error("unknown symbol field '" + key + "'");
      }
    }
  } else if (kw == "schema") {
    std::string target = p.str();
    m.op_schemas[target] = p.str();
  } else if (kw == "weight") {
    WeightInfo w;
    w.fqn = p.str();
    p.expect(":");
    Value tmp;
    p.type(tmp);
    w.type = tmp.type;
    w.is_param = p.ident() == "parameter";
    m.weights.push_back(std::move(w));
  } else if (kw == "guard") {
    std::string cond = p.str();
    std::string reason = p.str();
    m.addGuard(parseSymExpr(cond, filename + ":" + std::to_string(lineno)), reason);
  } else if (kw == "meta") {
    std::string k = p.str();
    m.metadata[k] = p.str();
  } else if (kw == "graph") {
    p.expect("@");
    std::string name = p.ident();
    p.expect("{");
    g = m.addGraph(name);
    values.clear();
  } else {
    p.error("unknown module entry '" + kw + "'");
  }
  if (!p.atEnd()) p.error("unexpected trailing text");
}

// `input %ID "name": TYPE [kind] ["target"] [value=NUMBER]` of graph `g`.
void parseInputLine(LineParser& p, Graph& g, std::map<uint32_t, Value*>& values) {
  p.expect("input");
  p.expect("%");
  int64_t id = p.integer();
  std::string name = p.str();
  p.expect(":");
  Value tmp;
  p.type(tmp);
  InputKind kind = InputKind::UserInput;
  std::string target;
  std::optional<double> scalar_value;
  if (!p.atEnd() && !p.peek("\"") && !p.peek("value=")) {
    std::string k = p.ident();
    kind = k == "parameter" ? InputKind::Parameter : k == "buffer" ? InputKind::Buffer
         : k == "constant" ? InputKind::ConstantTensor : k == "custom_obj" ? InputKind::CustomObj
         : k == "token" ? InputKind::Token : k == "user" ? InputKind::UserInput
         : (p.error("unknown input kind '" + k + "'"), InputKind::UserInput);
  }
  if (!p.atEnd() && !p.peek("value=")) target = p.str();
  if (p.eat("value=")) {
    scalar_value = p.attr(values).asDouble();
    if (!scalar_value) p.error("value= needs a number");
    if (tmp.kind != ValueKind::Tensor || tmp.type.rank() != 0) p.error("value= on an input that is not a 0-d tensor");
  }
  if (!p.atEnd()) p.error("unexpected trailing text");
  if (values.count(static_cast<uint32_t>(id))) p.error("value %" + std::to_string(id) + " defined twice");
  Value* v = g.addInput(tmp.kind, name, kind, target);
  v->type = tmp.type;
  v->sym = tmp.sym;
  v->opaque_type = tmp.opaque_type;
  v->scalar_value = scalar_value;
  values[static_cast<uint32_t>(id)] = v;
}

// `output %ID [kind] ["target"]` or `output=CONSTANT [kind]` of graph `g`.
void parseOutputLine(LineParser& p, Graph& g, const std::map<uint32_t, Value*>& values) {
  p.expect("output");
  Value* v = nullptr;
  Attr constant;
  if (p.eat("=")) {
    constant = p.attr(values);
  } else {
    p.expect("%");
    int64_t id = p.integer();
    auto it = values.find(static_cast<uint32_t>(id));
    if (it == values.end()) p.error("output of undefined value %" + std::to_string(id));
    v = it->second;
  }
  OutputKind kind = OutputKind::UserOutput;
  std::string target;
  if (!p.atEnd() && !p.peek("\"")) {
    std::string k = p.ident();
    kind = k == "buffer_mutation" ? OutputKind::BufferMutation : k == "user_input_mutation" ? OutputKind::UserInputMutation
         : k == "loss" ? OutputKind::LossOutput : k == "other" ? OutputKind::Other : k == "user" ? OutputKind::UserOutput
         : (p.error("unknown output kind '" + k + "'"), OutputKind::UserOutput);
  }
  if (!p.atEnd()) target = p.str();
  if (v) {
    g.addOutput(v, kind, target);
  } else {
    g.addConstantOutput(constant, kind);
  }
}

// Whether the next argument of a node line starts with `name=` (but not `==`).
bool namedArgument(const LineParser& p) {
  LineParser look = p;
  look.ws();
  std::string rest = look.rest();
  size_t k = 0;
  while (k < rest.size() && (std::isalnum(static_cast<unsigned char>(rest[k])) || rest[k] == '_')) ++k;
  return k > 0 && k < rest.size() && rest[k] == '=' && !std::isdigit(static_cast<unsigned char>(rest[0]));
}

// A node line: [OUTS =] TARGET(ARGS) [sympy] [loc("f":N)]  // name
void parseNodeLine(LineParser& p, Graph& g, std::map<uint32_t, Value*>& values) {
  std::vector<std::pair<int64_t, Value>> outs;  // id (-1 = None slot) and type
  bool has_outputs = p.peek("%") || p.peek("_,") || p.peek("_ ");
  if (has_outputs) {
    while (true) {
      if (p.eat("_")) {
        outs.push_back({-1, Value{}});
      } else {
        p.expect("%");
        int64_t id = p.integer();
        p.expect(":");
        Value tmp;
        p.type(tmp);
        outs.push_back({id, std::move(tmp)});
      }
      if (p.eat("=")) break;
      p.expect(",");
    }
  }
  std::string target = p.ident();
  p.expect("(");
  std::vector<Arg> args;
  bool keyword = false;
  if (!p.eat(")")) {
    while (true) {
      if (p.eat("*,")) keyword = true;
      Arg a;
      a.keyword = keyword;
      if (namedArgument(p)) {
        a.name = p.ident();
        p.expect("=");
      }
      a.value = p.attr(values);
      args.push_back(std::move(a));
      if (p.eat(")")) break;
      p.expect(",");
    }
  }
  NodeKind kind = NodeKind::Op;
  if (target.rfind("higher_order.", 0) == 0) kind = NodeKind::Hop;
  else if (target.rfind("fxfuse.", 0) == 0) kind = NodeKind::Fxfuse;
  else if (target.rfind("_operator.", 0) == 0 || target.rfind("math.", 0) == 0 || target.rfind("torch.sym", 0) == 0)
    kind = NodeKind::SymPy;
  if (p.eat("sympy")) kind = NodeKind::SymPy;
  SourceLoc loc;
  if (p.eat("loc(")) {
    loc.file = p.str();
    p.expect(":");
    loc.line = static_cast<int>(p.integer());
    p.expect(")");
  }
  std::string name;
  if (p.eat("//")) name = p.takeRest();
  if (!p.atEnd()) p.error("unexpected trailing text");
  Node* n = g.createNode(target, kind, std::move(args), outs.size(), nullptr, name.empty() ? "node" : name);
  n->loc = loc;
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].first < 0) continue;
    uint32_t id = static_cast<uint32_t>(outs[i].first);
    if (values.count(id)) p.error("value %" + std::to_string(id) + " defined twice");
    Value* v = n->setOutput(i, outs[i].second.kind);
    v->type = outs[i].second.type;
    v->sym = outs[i].second.sym;
    v->opaque_type = outs[i].second.opaque_type;
    values[id] = v;
  }
}

}  // namespace

std::unique_ptr<Module> parseFxg(std::string_view text, const std::string& filename) {
  auto m = std::make_unique<Module>();
  std::vector<std::string_view> lines;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == '\n') {
      lines.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  bool in_module = false, done = false;
  Graph* g = nullptr;
  std::map<uint32_t, Value*> values;
  int lineno = 0;
  for (std::string_view raw : lines) {
    ++lineno;
    // Strip comment-only lines and FileCheck directives (lines starting with '#' or '//').
    size_t a = raw.find_first_not_of(" \t\r");
    if (a == std::string_view::npos) continue;
    std::string_view line = raw.substr(a);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (line[0] == '#' || line.rfind("//", 0) == 0) continue;
    LineParser p(line, filename, lineno);
    if (done) p.error("text after the end of the module");
    if (!in_module) {
      p.expect("fxfuse.module");
      p.expect("{");
      in_module = true;
    } else if (!g) {
      if (p.eat("}")) done = true;
      else parseModuleEntry(p, *m, g, values, filename, lineno);
    } else if (p.eat("}")) {
      g = nullptr;
    } else if (p.peek("input ")) {
      parseInputLine(p, *g, values);
    } else if (p.peek("output ") || p.peek("output=")) {
      parseOutputLine(p, *g, values);
    } else {
      parseNodeLine(p, *g, values);
    }
  }
  if (!in_module) fail("{}: not an .fxg file (no 'fxfuse.module {{' line)", filename);
  if (g || !done) fail("{}: unexpected end of file (missing '}}')", filename);
  if (m->graphs().empty()) fail("{}: module has no graph", filename);
  return m;
}

}  // namespace fxfuse::ir
