// FX readable text importer. See fx_text.h and docs/importers.md ("FX readable text").
//
// The input is restricted Python as written by torch.fx's code generator:
//
//   class <lambda>(torch.nn.Module):
//       def forward(self, arg0_1: "Sym(s0)", arg1_1: "bf16[s0, 4096][4096, 1]cuda:0"):
//           # File: model.py:43 in forward, code: h = self.up(x)
//           mm: "bf16[s0, 256][256, 1]cuda:0" = torch.ops.aten.mm.default(arg1_1, w);  arg1_1 = None
//           auto_functionalized = torch.ops.higher_order.auto_functionalized(torch.ops._C.rms_norm.default, result = empty, ...)
//           getitem_1: "bf16[s0, 256]" = auto_functionalized[1];  auto_functionalized = None
//           return (getitem_1,)
//
//       class submod_0(torch.nn.Module):    # HOP / call_module bodies, one graph each
//           def forward(self, ...): ...
//
// Pipeline: find the module (the class around the first `def forward(`), lex its block into
// logical lines, discover the nested classes (each becomes a Graph, indices assigned up
// front so `self.<name>` resolves before the nested class is read), then build each graph
// statement by statement. Unannotated call results stay "pending" until used: `x[i]`
// folds into output slot i of the producer (the IR has no getitem nodes); a direct use
// of an unannotated value is the "no shape annotation" error (or an opaque value when the
// rest of the file is annotated).
#include "ir/importers/fx_text.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <set>
#include <unordered_map>

#include "ir/importers/fx_text_lexer.h"
#include "ir/op_schema.h"
#include "ir/status.h"

namespace fxfuse::ir {

namespace {

using fxtext::Lexer;
using fxtext::LogicalLine;
using fxtext::TK;
using fxtext::Tok;

constexpr const char* kAnnotationHint = "dump with print_readable(include_stride=True, include_device=True)";
constexpr int kMaxExprDepth = 100;
constexpr int kMaxClassDepth = 32;
constexpr int64_t kMaxOutputIndex = 4096;

std::string_view trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

bool startsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::vector<std::string_view> splitDots(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == '.') {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// A short excerpt of source text for messages.
std::string excerpt(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 60)) out += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  if (s.size() > 60) out += "...";
  return out;
}

NodeKind kindOfTarget(std::string_view t) {
  if (startsWith(t, "higher_order.")) return NodeKind::Hop;
  if (startsWith(t, "fxfuse.")) return NodeKind::Fxfuse;
  if (startsWith(t, "_operator.") || startsWith(t, "math.") || startsWith(t, "torch.sym")) return NodeKind::SymPy;
  return NodeKind::Op;
}

// ----------------------------------------------------------------------------- expressions

struct Ex {
  enum class K : uint8_t { Name, Num, Str, Attr, Call, Sub, Tuple, List, Dict, Bin, Unary, Kw, Ellipsis, Slice, Empty };
  K k = K::Empty;
  std::string_view s;     // Name/Attr: identifier; Num/Str: token; Bin/Unary: operator; Kw: name
  std::vector<int> kids;  // Attr: base; Call: callee, args...; Sub: base, index; Bin: lhs, rhs; ...
  uint32_t b = 0, e = 0;  // source text range
};

class ExprParser {
 public:
  ExprParser(const Lexer& lx, uint32_t tb, uint32_t te, std::vector<Ex>& arena, const std::string& path, int line)
      : lx_(lx), toks_(lx.tokens()), i_(tb), te_(te), arena_(arena), path_(path), line_(line) {}

  [[noreturn]] void error(const std::string& what) const { fail("{}: line {}: {}", path_, line_, what); }

  bool atEnd() const { return i_ >= te_; }
  uint32_t pos() const { return i_; }

  // expr (',' expr)* [','] -> a Tuple when there is a comma.
  int parseTupleOrExpr() {
    uint32_t start = i_;
    int first = parseExpr();
    if (!isOp(",")) return first;
    int t = make(Ex::K::Tuple, {}, start);
    arena_[t].kids.push_back(first);
    while (eatOp(",")) {
      if (atEnd() || isOp(")") || isOp("]")) break;
      int x = parseExpr();
      arena_[t].kids.push_back(x);
    }
    finish(t);
    return t;
  }

  int parseExpr() { return parseBinary(0); }

  void expectEnd() const {
    if (!atEnd()) error("unexpected '" + std::string(lx_.text(toks_[i_])) + "'");
  }

 private:
  struct DepthGuard {
    explicit DepthGuard(ExprParser& p) : p(p) {
      if (++p.depth_ > kMaxExprDepth) p.error("expression nested too deeply");
    }
    ~DepthGuard() { --p.depth_; }
    ExprParser& p;
  };

  std::string_view cur() const { return lx_.text(toks_[i_]); }
  bool isOp(std::string_view op) const { return !atEnd() && toks_[i_].k == TK::Op && cur() == op; }
  bool eatOp(std::string_view op) {
    if (!isOp(op)) return false;
    ++i_;
    return true;
  }
  void expectOp(std::string_view op) {
    if (eatOp(op)) return;
    if (atEnd()) error("expected '" + std::string(op) + "' at end of line");
    error("expected '" + std::string(op) + "' before '" + std::string(cur()) + "'");
  }

  int make(Ex::K k, std::string_view s, uint32_t start_tok) {
    Ex x;
    x.k = k;
    x.s = s;
    x.b = start_tok < toks_.size() ? toks_[start_tok].off : 0;
    x.e = x.b;
    arena_.push_back(std::move(x));
    return static_cast<int>(arena_.size() - 1);
  }
  void finish(int id) {
    if (i_ > 0) {
      const Tok& last = toks_[i_ - 1];
      arena_[id].e = std::max(arena_[id].b, last.off + last.len);
    }
  }

  static int levelOf(std::string_view op) {
    static const std::pair<std::string_view, int> kLevels[] = {
        {"==", 0}, {"!=", 0}, {"<", 0}, {"<=", 0}, {">", 0}, {">=", 0}, {"|", 1}, {"^", 2}, {"&", 3},
        {"<<", 4}, {">>", 4}, {"+", 5}, {"-", 5}, {"*", 6}, {"/", 6}, {"//", 6}, {"%", 6}, {"@", 6},
    };
    for (const auto& [o, l] : kLevels)
      if (o == op) return l;
    return -1;
  }

  int parseBinary(int level) {
    if (level > 6) return parseUnary();
    uint32_t start = i_;
    int lhs = parseBinary(level + 1);
    while (!atEnd() && toks_[i_].k == TK::Op && levelOf(cur()) == level) {
      std::string_view op = cur();
      ++i_;
      int rhs = parseBinary(level + 1);
      int b = make(Ex::K::Bin, op, start);
      arena_[b].kids = {lhs, rhs};
      finish(b);
      lhs = b;
    }
    return lhs;
  }

  int parseUnary() {
    DepthGuard g(*this);
    if (isOp("-") || isOp("+") || isOp("~")) {
      uint32_t start = i_;
      std::string_view op = cur();
      ++i_;
      int operand = parseUnary();
      int u = make(Ex::K::Unary, op, start);
      arena_[u].kids = {operand};
      finish(u);
      return u;
    }
    return parsePower();
  }

  int parsePower() {
    uint32_t start = i_;
    int base = parsePostfix();
    if (eatOp("**")) {
      int rhs = parseUnary();
      int b = make(Ex::K::Bin, "**", start);
      arena_[b].kids = {base, rhs};
      finish(b);
      return b;
    }
    return base;
  }

  int parsePostfix() {
    uint32_t start = i_;
    int e = parseAtom();
    while (true) {
      if (eatOp("(")) {
        int c = make(Ex::K::Call, {}, start);
        arena_[c].kids.push_back(e);
        parseCallArgs(c);
        finish(c);
        e = c;
      } else if (eatOp("[")) {
        DepthGuard g(*this);
        int s = make(Ex::K::Sub, {}, start);
        int idx = parseSubscript();
        expectOp("]");
        arena_[s].kids = {e, idx};
        finish(s);
        e = s;
      } else if (eatOp(".")) {
        if (atEnd() || toks_[i_].k != TK::Name) error("expected a name after '.'");
        int a = make(Ex::K::Attr, cur(), start);
        ++i_;
        arena_[a].kids = {e};
        finish(a);
        e = a;
      } else {
        return e;
      }
    }
  }

  void parseCallArgs(int call) {
    DepthGuard g(*this);
    while (!eatOp(")")) {
      if (atEnd()) error("missing ')'");
      if (isOp("*") || isOp("**")) error("star arguments are not supported");
      if (toks_[i_].k == TK::Name && i_ + 1 < te_ && toks_[i_ + 1].k == TK::Op && lx_.text(toks_[i_ + 1]) == "=") {
        uint32_t start = i_;
        std::string_view name = cur();
        i_ += 2;
        int v = parseExpr();
        int kw = make(Ex::K::Kw, name, start);
        arena_[kw].kids = {v};
        finish(kw);
        arena_[call].kids.push_back(kw);
      } else {
        int v = parseExpr();
        arena_[call].kids.push_back(v);
      }
      if (eatOp(",")) continue;
      expectOp(")");
      break;
    }
  }

  int parseSliceItem() {
    uint32_t start = i_;
    auto part = [&]() -> int {
      if (isOp(":") || isOp(",") || isOp("]")) return -1;
      return parseExpr();
    };
    int a = part();
    if (!isOp(":")) {
      if (a < 0) error("expected an index");
      return a;
    }
    int s = make(Ex::K::Slice, {}, start);
    std::vector<int> parts{a};
    while (eatOp(":")) parts.push_back(part());
    if (parts.size() > 3) error("malformed slice");
    arena_[s].kids = parts;  // -1 for an omitted part
    finish(s);
    return s;
  }

  int parseSubscript() {
    uint32_t start = i_;
    int first = parseSliceItem();
    if (!isOp(",")) return first;
    int t = make(Ex::K::Tuple, {}, start);
    arena_[t].kids.push_back(first);
    while (eatOp(",")) {
      if (isOp("]")) break;
      int x = parseSliceItem();
      arena_[t].kids.push_back(x);
    }
    finish(t);
    return t;
  }

  int parseSequence(Ex::K k, std::string_view close, uint32_t start) {
    int t = make(k, {}, start);
    while (!eatOp(close)) {
      if (atEnd()) error("missing '" + std::string(close) + "'");
      int x = parseExpr();
      arena_[t].kids.push_back(x);
      if (k == Ex::K::Dict) {
        expectOp(":");
        int v = parseExpr();
        arena_[t].kids.push_back(v);
      }
      if (eatOp(",")) continue;
      expectOp(close);
      break;
    }
    finish(t);
    return t;
  }

  int parseAtom() {
    DepthGuard g(*this);
    if (atEnd()) error("expression expected at end of line");
    const Tok& t = toks_[i_];
    uint32_t start = i_;
    switch (t.k) {
      case TK::Name: {
        int n = make(Ex::K::Name, cur(), start);
        ++i_;
        finish(n);
        return n;
      }
      case TK::Number: {
        int n = make(Ex::K::Num, cur(), start);
        ++i_;
        finish(n);
        return n;
      }
      case TK::Str: {
        int n = make(Ex::K::Str, cur(), start);
        ++i_;
        finish(n);
        if (!atEnd() && toks_[i_].k == TK::Str) error("implicitly concatenated strings are not supported");
        return n;
      }
      case TK::Bad: error("unexpected '" + excerpt(cur()) + "'");
      case TK::Op: break;
    }
    if (eatOp("(")) {
      if (eatOp(")")) {
        int e = make(Ex::K::Tuple, {}, start);
        finish(e);
        return e;
      }
      int first = parseExpr();
      if (eatOp(")")) return first;  // parenthesized expression
      int tup = make(Ex::K::Tuple, {}, start);
      arena_[tup].kids.push_back(first);
      while (eatOp(",")) {
        if (isOp(")")) break;
        int x = parseExpr();
        arena_[tup].kids.push_back(x);
      }
      expectOp(")");
      finish(tup);
      return tup;
    }
    if (eatOp("[")) return parseSequence(Ex::K::List, "]", start);
    if (eatOp("{")) return parseSequence(Ex::K::Dict, "}", start);
    if (eatOp("...")) {
      int e = make(Ex::K::Ellipsis, "...", start);
      finish(e);
      return e;
    }
    error("unexpected '" + std::string(cur()) + "'");
  }

  const Lexer& lx_;
  const std::vector<Tok>& toks_;
  uint32_t i_, te_;
  std::vector<Ex>& arena_;
  const std::string& path_;
  int line_;
  int depth_ = 0;
};

// ----------------------------------------------------------------------------- annotations

struct TypeInfo {
  ValueKind kind = ValueKind::Opaque;
  TensorType type;
  std::optional<SymExpr> sym;
  std::string opaque;
  bool shaped = false;       // a tensor shape or Sym(...) annotation
  bool has_strides = false;
  bool has_device = false;
};

ValueKind symValueKind(const SymExpr& e) {
  using K = SymExpr::Kind;
  switch (e.kind()) {
    case K::Bool: case K::Eq: case K::Ne: case K::Lt: case K::Le: case K::Gt: case K::Ge: case K::And: case K::Or:
    case K::Not:
      return ValueKind::SymBool;
    case K::Real: case K::TrueDiv:
      return ValueKind::SymFloat;
    case K::Sym:
      if (startsWith(e.name(), "zf") || startsWith(e.name(), "zuf")) return ValueKind::SymFloat;
      return ValueKind::SymInt;
    default:
      return ValueKind::SymInt;
  }
}

// ----------------------------------------------------------------------------- the importer

struct Binding {
  enum class K : uint8_t { Value, Pending, Graph, Const };
  K k = K::Const;
  Value* v = nullptr;
  int pending = -1;
  int graph = -1;
  Attr c;
  int line = 0;
  bool annotated = true;
};

struct PendingNode {
  Node* node = nullptr;
  bool materialized = false;  // used directly: got an opaque output 0
  bool folded = false;        // some getitem folded into it
};

struct ClassInfo {
  std::string name;  // as written ("<lambda>", "GraphModule", "submod_0")
  std::string path;  // graph name: "main" for the root, else dotted attribute path
  int header = -1;   // line index of `class ...:` (-1 for a bare `def forward`)
  int def = -1;      // line index of `def forward(...)`
  size_t body_b = 0, body_e = 0;
  int graph = -1;
  std::unordered_map<std::string, int> children;  // attribute name -> graph index
};

struct GraphCtx {
  Graph* g = nullptr;
  const ClassInfo* cls = nullptr;
  std::unordered_map<std::string_view, Binding> names;
  std::vector<PendingNode> pending;
  SourceLoc loc;
  bool returned = false;
  bool annotated_any = false;
};

class Importer {
 public:
  Importer(std::string_view text, const std::string& path) : text_(text), path_(path) {}

  std::unique_ptr<Module> run();

 private:
  [[noreturn]] void err(int line, const std::string& msg) const { fail("{}: line {}: {}", path_, line, msg); }
  [[noreturn]] void errNoAnnotation(int line, std::string_view name) const {
    fail("{}: line {}: value '{}' has no shape annotation; {}", path_, line, name, kAnnotationHint);
  }

  void findRoot(size_t& pos, int& lineno);
  size_t blockEnd(size_t h) const;
  bool lineIs(const LogicalLine& l, std::string_view first_word) const;
  int parseClass(size_t h, const std::string& graph_path, int depth);
  std::string headerName(const LogicalLine& l) const;

  void buildGraph(const ClassInfo& ci);
  void parseSignature(GraphCtx& c, const LogicalLine& l);
  void statement(GraphCtx& c, const LogicalLine& l, uint32_t b, uint32_t e);
  void handleComment(GraphCtx& c, std::string_view text);
  void handleReturn(GraphCtx& c, const LogicalLine& l, uint32_t b, uint32_t e);
  void assign(GraphCtx& c, int line, std::string_view name, const TypeInfo* ti, int rhs);
  void assignTuple(GraphCtx& c, int line, const std::vector<std::string_view>& names, int rhs);
  void finishGraph(GraphCtx& c, int last_line);

  const TypeInfo& annotation(std::string_view text, int line);
  std::string_view annotationText(uint32_t b, uint32_t e, std::string& storage, int line);
  std::vector<SymExpr> parseDims(std::string_view s, int line, const std::string& ctx);

  Attr toAttr(GraphCtx& c, int ex, int line);
  Attr bindingAttr(GraphCtx& c, std::string_view name, Binding& b, int line);
  Attr numberAttr(std::string_view tok, bool negate, int line) const;
  std::optional<Attr> dottedConstant(GraphCtx& c, std::string_view dotted, int line);
  Attr callConstant(GraphCtx& c, int ex, int line);
  Attr sliceAttr(GraphCtx& c, const std::vector<int>& parts, int line);
  bool dottedName(int ex, std::string& out) const;
  bool referencesValues(GraphCtx& c, int ex) const;
  std::string opTarget(const std::vector<std::string_view>& parts, int line) const;
  std::optional<int64_t> intLiteral(int ex) const;

  Node* emitCall(GraphCtx& c, int call, int line, std::string_view name);
  Node* emitOperator(GraphCtx& c, int ex, int line, std::string_view name);
  void bindResult(GraphCtx& c, std::string_view name, Node* n, const TypeInfo* ti, int line);
  void bindGetitem(GraphCtx& c, std::string_view name, const TypeInfo* ti, int base, int index, int line);
  Value* newValueFor(Node* n, size_t slot, const TypeInfo* ti, std::string_view name);
  int expectedOutputs(Node* n);
  void setValueType(Value* v, const TypeInfo* ti);

  void guessProducer();

  std::string_view raw(int ex) const { return text_.substr(arena_[ex].b, arena_[ex].e - arena_[ex].b); }

  std::string_view text_;
  std::string path_;
  std::unique_ptr<Module> m_;
  std::unique_ptr<Lexer> lx_;
  std::vector<LogicalLine> lines_;
  std::vector<ClassInfo> classes_;
  std::vector<Ex> arena_;
  std::unordered_map<std::string, TypeInfo> type_cache_;
  std::map<std::string, OpSchema, std::less<>> schema_cache_;
  bool file_annotated_ = false;
  size_t unannotated_ = 0;
  bool missing_strides_ = false, missing_device_ = false, tensor_annotations_ = false;
  bool bare_def_ = false;
};

// ----------------------------------------------------------------------------- structure

void Importer::findRoot(size_t& pos, int& lineno) {
  struct Phys {
    size_t off;
    int indent;
    bool code;
    bool is_class;
  };
  std::vector<Phys> seen;
  size_t p = 0;
  int ln = 1;
  bool saw_str_graph = false;
  while (p < text_.size()) {
    size_t eol = text_.find('\n', p);
    if (eol == std::string_view::npos) eol = text_.size();
    std::string_view line = text_.substr(p, eol - p);
    size_t a = 0;
    int indent = fxtext::indentWidth(line, &a);
    std::string_view body = trim(line.substr(a));
    bool code = !body.empty() && body[0] != '#';
    if (code && startsWith(body, "def forward(")) {
      // The module is the class that encloses this def, if any.
      for (size_t j = seen.size(); j-- > 0;) {
        if (!seen[j].code || seen[j].indent >= indent) continue;
        if (seen[j].is_class) {
          pos = seen[j].off;
          lineno = static_cast<int>(j) + 1;
          return;
        }
        break;
      }
      bare_def_ = true;
      pos = p;
      lineno = ln;
      return;
    }
    if (code && (startsWith(body, "graph():") || (body[0] == '%' && body.find("placeholder[") != std::string_view::npos)))
      saw_str_graph = true;
    seen.push_back({p, indent, code, code && startsWith(body, "class ")});
    p = eol + 1;
    ++ln;
  }
  if (saw_str_graph)
    fail("{}: line 1: this is a str(graph) dump, which has no shapes; {}", path_, kAnnotationHint);
  fail("{}: line 1: not an FX readable dump: no 'def forward(self, ...)' found", path_);
}

bool Importer::lineIs(const LogicalLine& l, std::string_view first_word) const {
  if (l.comment || l.te == l.tb) return false;
  const Tok& t = lx_->tokens()[l.tb];
  return t.k == TK::Name && lx_->text(t) == first_word;
}

size_t Importer::blockEnd(size_t h) const {
  size_t j = h + 1;
  while (j < lines_.size() && (lines_[j].comment || lines_[j].indent > lines_[h].indent)) ++j;
  return j;
}

std::string Importer::headerName(const LogicalLine& l) const {
  // `class NAME(...):` / `def NAME(...):` -> NAME (raw text, so `<lambda>` survives).
  const auto& toks = lx_->tokens();
  if (l.te - l.tb < 3) err(l.lineno, "malformed '" + excerpt(l.text) + "'");
  uint32_t open = l.tb + 1;
  while (open < l.te && !(toks[open].k == TK::Op && (lx_->text(toks[open]) == "(" || lx_->text(toks[open]) == ":")))
    ++open;
  if (open >= l.te || open == l.tb + 1) err(l.lineno, "malformed '" + excerpt(l.text) + "'");
  const Tok& first = toks[l.tb + 1];
  const Tok& last = toks[open - 1];
  std::string name(text_.substr(first.off, last.off + last.len - first.off));
  const Tok& end = toks[l.te - 1];
  if (end.k != TK::Op || lx_->text(end) != ":") err(l.lineno, "expected ':' at the end of '" + excerpt(l.text) + "'");
  return name;
}

int Importer::parseClass(size_t h, const std::string& graph_path, int depth) {
  if (depth > kMaxClassDepth) err(lines_[h].lineno, "nested modules too deep");
  ClassInfo ci;
  ci.header = static_cast<int>(h);
  ci.name = headerName(lines_[h]);
  ci.path = graph_path;
  ci.graph = static_cast<int>(m_->graphs().size());
  m_->addGraph(graph_path);
  size_t idx = classes_.size();
  classes_.push_back(ci);
  size_t end = blockEnd(h);
  int body_indent = -1;
  for (size_t i = h + 1; i < end;) {
    const LogicalLine& l = lines_[i];
    if (l.comment) {
      ++i;
      continue;
    }
    if (body_indent < 0) body_indent = l.indent;
    if (l.indent != body_indent) err(l.lineno, "unexpected indentation");
    if (lineIs(l, "def")) {
      size_t e = blockEnd(i);
      if (headerName(l) == "forward" && classes_[idx].def < 0) {
        classes_[idx].def = static_cast<int>(i);
        classes_[idx].body_b = i + 1;
        classes_[idx].body_e = e;
      }
      i = e;
      continue;
    }
    if (lineIs(l, "class")) {
      std::string child = headerName(l);
      bool ident = !child.empty() && !std::isdigit(static_cast<unsigned char>(child[0])) &&
                   std::all_of(child.begin(), child.end(), [](char ch) {
                     return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
                   });
      if (!ident) err(l.lineno, "malformed nested module name '" + excerpt(child) + "'");
      std::string child_path = graph_path == "main" ? child : graph_path + "." + child;
      int ci_child = parseClass(i, child_path, depth + 1);
      classes_[idx].children[child] = classes_[ci_child].graph;
      i = blockEnd(i);
      continue;
    }
    ++i;  // class-level statements (attributes) carry nothing for us
  }
  if (classes_[idx].def < 0) err(lines_[h].lineno, "module '" + classes_[idx].name + "' has no forward()");
  return static_cast<int>(idx);
}

// ----------------------------------------------------------------------------- annotations

std::vector<SymExpr> Importer::parseDims(std::string_view s, int line, const std::string& ctx) {
  std::vector<SymExpr> out;
  if (trim(s).empty()) return out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    char c = i < s.size() ? s[i] : ',';
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      std::string_view piece = trim(s.substr(start, i - start));
      if (piece.empty()) err(line, "empty size in annotation '" + excerpt(s) + "'");
      out.push_back(parseSymExpr(piece, ctx));
      start = i + 1;
    }
  }
  return out;
}

const TypeInfo& Importer::annotation(std::string_view text, int line) {
  std::string key(trim(text));
  auto it = type_cache_.find(key);
  if (it != type_cache_.end()) return it->second;
  TypeInfo t;
  std::string ctx = fmt::format("{}: line {}", path_, line);
  std::string_view s = key;
  if (startsWith(s, "Sym(") && s.back() == ')') {
    SymExpr e = parseSymExpr(s.substr(4, s.size() - 5), ctx);
    t.kind = symValueKind(e);
    t.sym = e;
    t.shaped = true;
  } else {
    size_t i = 0;
    while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
    auto dt = dtypeFromName(s.substr(0, i));
    if (!dt || i >= s.size() || s[i] != '[') {
      // Not a shape annotation (a Python type such as "torch.Tensor", or a dtype we do not
      // know): an opaque value.
      t.kind = ValueKind::Opaque;
      t.opaque = key;
    } else {
      auto bracket = [&](size_t open) {
        int depth = 0;
        for (size_t k = open; k < s.size(); ++k) {
          if (s[k] == '[') ++depth;
          if (s[k] == ']' && --depth == 0) return k;
        }
        err(line, "malformed annotation '" + excerpt(s) + "': missing ']'");
      };
      t.kind = ValueKind::Tensor;
      t.type.dtype = *dt;
      size_t close = bracket(i);
      t.type.shape = parseDims(s.substr(i + 1, close - i - 1), line, ctx);
      i = close + 1;
      if (i < s.size() && s[i] == '[') {
        close = bracket(i);
        t.type.stride = parseDims(s.substr(i + 1, close - i - 1), line, ctx);
        if (t.type.stride.size() != t.type.shape.size())
          err(line, "annotation '" + excerpt(s) + "' has " + std::to_string(t.type.shape.size()) + " sizes but " +
                        std::to_string(t.type.stride.size()) + " strides");
        t.has_strides = true;
        i = close + 1;
      } else {
        t.type.stride = TensorType::contiguousStrides(t.type.shape);
      }
      for (const auto& d : t.type.shape)
        if (d.isInt() && d.intValue() < 0) err(line, "negative size in annotation '" + excerpt(s) + "'");
      std::string_view dev = trim(s.substr(i));
      if (!dev.empty()) {
        size_t colon = dev.find(':');
        std::string_view type = dev.substr(0, colon);
        if (type.empty() || !std::all_of(type.begin(), type.end(), [](char ch) {
              return std::islower(static_cast<unsigned char>(ch)) || ch == '_';
            }))
          err(line, "malformed device in annotation '" + excerpt(s) + "'");
        static const char* const kDevices[] = {"cuda", "cpu", "meta", "mps", "xpu", "hpu"};
        if (std::none_of(std::begin(kDevices), std::end(kDevices), [&](const char* k) { return type == k; }))
          err(line, "unsupported device '" + excerpt(type) + "' in annotation '" + excerpt(s) + "'");
        t.type.device.type = std::string(type);
        if (colon != std::string_view::npos) {
          std::string_view idx = dev.substr(colon + 1);
          if (idx.empty() || idx.size() > 6 ||
              !std::all_of(idx.begin(), idx.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
            err(line, "malformed device in annotation '" + excerpt(s) + "'");
          t.type.device.index = std::atoi(std::string(idx).c_str());
        }
        t.has_device = true;
      }
      t.shaped = true;
    }
  }
  // Every symbol that appears in an annotation goes into the module's symbol table.
  std::set<std::string> syms;
  for (const auto& d : t.type.shape) d.collectSymbols(syms);
  for (const auto& d : t.type.stride) d.collectSymbols(syms);
  if (t.sym) t.sym->collectSymbols(syms);
  for (const auto& s2 : syms) m_->symbols.getOrAdd(s2);
  if (t.kind == ValueKind::Tensor) {
    tensor_annotations_ = true;
    if (!t.has_strides) missing_strides_ = true;
    if (!t.has_device) missing_device_ = true;
  }
  return type_cache_.emplace(std::move(key), std::move(t)).first->second;
}

std::string_view Importer::annotationText(uint32_t b, uint32_t e, std::string& storage, int line) {
  const auto& toks = lx_->tokens();
  if (b >= e) err(line, "empty annotation");
  if (e - b == 1 && toks[b].k == TK::Str) {
    if (!fxtext::decodeStringLiteral(lx_->text(toks[b]), storage)) err(line, "malformed string");
    return storage;
  }
  for (uint32_t k = b; k < e; ++k)
    if (toks[k].k == TK::Bad) err(line, "unexpected '" + excerpt(lx_->text(toks[k])) + "' in annotation");
  // Unquoted annotation (torch < 2.5 printed `x: f32[s0, 4] = ...`).
  return text_.substr(toks[b].off, toks[e - 1].off + toks[e - 1].len - toks[b].off);
}

// ----------------------------------------------------------------------------- constants

Attr Importer::numberAttr(std::string_view tok, bool negate, int line) const {
  std::string t;
  for (char ch : tok)
    if (ch != '_') t += ch;
  bool hex = t.size() > 2 && t[0] == '0' && (t[1] == 'x' || t[1] == 'X');
  bool is_float = !hex && t.find_first_of(".eEjJ") != std::string::npos;
  if (!is_float) {
    uint64_t mag = 0;
    bool overflow = false;
    size_t start = hex ? 2 : 0;
    if (start >= t.size()) err(line, "malformed number '" + excerpt(tok) + "'");
    for (size_t i = start; i < t.size(); ++i) {
      char ch = t[i];
      int d;
      if (ch >= '0' && ch <= '9') {
        d = ch - '0';
      } else if (hex && ch >= 'a' && ch <= 'f') {
        d = ch - 'a' + 10;
      } else if (hex && ch >= 'A' && ch <= 'F') {
        d = ch - 'A' + 10;
      } else {
        err(line, "malformed number '" + excerpt(tok) + "'");
      }
      uint64_t base = hex ? 16 : 10;
      if (mag > (std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(d)) / base) overflow = true;
      if (!overflow) mag = mag * base + static_cast<uint64_t>(d);
    }
    const uint64_t kMaxPos = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (!overflow && !negate && mag <= kMaxPos) return Attr::ofInt(static_cast<int64_t>(mag));
    if (!overflow && negate && mag <= kMaxPos + 1) {
      if (mag == kMaxPos + 1) return Attr::ofInt(std::numeric_limits<int64_t>::min());
      return Attr::ofInt(-static_cast<int64_t>(mag));
    }
    return Attr::ofOpaque("int", (negate ? "-" : "") + t);  // beyond int64: keep the digits
  }
  if (t.find_first_of("jJ") != std::string::npos) return Attr::ofOpaque("complex", (negate ? "-" : "") + t);
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) err(line, "malformed number '" + excerpt(tok) + "'");
  if (negate) v = -v;
  if (std::isinf(v)) return Attr::ofSpecialFloat(v > 0 ? "inf" : "-inf");
  if (std::isnan(v)) return Attr::ofSpecialFloat("nan");
  return Attr::ofFloat(v);
}

bool Importer::dottedName(int ex, std::string& out) const {
  const Ex& x = arena_[ex];
  if (x.k == Ex::K::Name) {
    out = std::string(x.s);
    return true;
  }
  if (x.k != Ex::K::Attr) return false;
  std::vector<std::string_view> parts;
  int cur = ex;
  while (arena_[cur].k == Ex::K::Attr) {
    parts.push_back(arena_[cur].s);
    cur = arena_[cur].kids[0];
  }
  if (arena_[cur].k != Ex::K::Name) return false;
  out = std::string(arena_[cur].s);
  for (size_t i = parts.size(); i-- > 0;) {
    out += '.';
    out += parts[i];
  }
  return true;
}

std::optional<int64_t> Importer::intLiteral(int ex) const {
  const Ex& x = arena_[ex];
  bool neg = false;
  const Ex* n = &x;
  if (x.k == Ex::K::Unary && (x.s == "-" || x.s == "+")) {
    neg = x.s == "-";
    n = &arena_[x.kids[0]];
  }
  if (n->k != Ex::K::Num) return std::nullopt;
  Attr a = numberAttr(n->s, neg, 0);
  if (a.kind != Attr::Kind::Int) return std::nullopt;
  return a.i;
}

std::string Importer::opTarget(const std::vector<std::string_view>& parts, int line) const {
  // parts: torch, ops, ns, name[, overload]
  if (parts.size() < 4) err(line, "incomplete operator name 'torch.ops." + (parts.size() > 2 ? std::string(parts[2]) : "") + "'");
  std::string t;
  for (size_t i = 2; i < parts.size(); ++i) {
    if (i > 2) t += '.';
    t += parts[i];
  }
  if (parts[2] == "higher_order") return t;
  if (parts.size() == 4) return t + ".default";  // an overload packet: torch.ops.aten.mm
  if (parts.size() > 5) err(line, "malformed operator name 'torch.ops." + t + "'");
  return t;
}

bool Importer::referencesValues(GraphCtx& c, int ex) const {
  const Ex& x = arena_[ex];
  if (x.k == Ex::K::Name) {
    auto it = c.names.find(x.s);
    return it != c.names.end() && it->second.k != Binding::K::Const;
  }
  if (x.k == Ex::K::Attr) return false;  // dotted constants, `self.x`
  for (int k : x.kids)
    if (k >= 0 && referencesValues(c, k)) return true;
  return false;
}

std::optional<Attr> Importer::dottedConstant(GraphCtx& c, std::string_view dotted, int line) {
  if (startsWith(dotted, "torch.ops.")) return Attr::ofOp(opTarget(splitDots(dotted), line));
  if (startsWith(dotted, "torch.")) {
    std::string_view n = dotted.substr(6);
    if (auto d = dtypeFromTorchName(dotted)) return Attr::ofDType(*d);
    Attr a;
    if (n == "strided" || n == "sparse_coo" || n == "sparse_csr" || n == "sparse_csc" || n == "sparse_bsr" ||
        n == "sparse_bsc" || n == "_mkldnn" || n == "jagged") {
      a.kind = Attr::Kind::Layout;
      a.layout = n == "strided" ? Layout::Strided : n == "sparse_coo" ? Layout::SparseCoo
               : n == "sparse_csr" ? Layout::SparseCsr : Layout::Other;
      return a;
    }
    if (n == "contiguous_format" || n == "channels_last" || n == "channels_last_3d" || n == "preserve_format") {
      a.kind = Attr::Kind::MemoryFormat;
      a.memory_format = n == "contiguous_format" ? MemoryFormat::Contiguous : n == "channels_last" ? MemoryFormat::ChannelsLast
                      : n == "channels_last_3d" ? MemoryFormat::ChannelsLast3d : MemoryFormat::Preserve;
      return a;
    }
  }
  if (dotted == "math.inf") return Attr::ofSpecialFloat("inf");
  if (dotted == "math.nan") return Attr::ofSpecialFloat("nan");
  if (startsWith(dotted, "self.")) {
    std::string attr(dotted.substr(5));
    auto it = c.cls->children.find(attr);
    if (it != c.cls->children.end()) return Attr::ofGraph(it->second);
    return std::nullopt;
  }
  std::string_view head = dotted.substr(0, dotted.find('.'));
  auto it = c.names.find(head);
  if (it != c.names.end() && it->second.k != Binding::K::Const)
    err(line, "attribute access on a value ('" + std::string(dotted) + "') is not supported here");
  return Attr::ofOpaque("python", std::string(dotted));
}

Attr Importer::callConstant(GraphCtx& c, int ex, int line) {
  const Ex& x = arena_[ex];
  std::string callee;
  if (!dottedName(x.kids[0], callee)) err(line, "unsupported expression '" + excerpt(raw(ex)) + "'");
  std::vector<int> pos;
  std::vector<std::pair<std::string_view, int>> kws;
  for (size_t i = 1; i < x.kids.size(); ++i) {
    const Ex& a = arena_[x.kids[i]];
    if (a.k == Ex::K::Kw) {
      kws.push_back({a.s, a.kids[0]});
    } else {
      pos.push_back(x.kids[i]);
    }
  }
  auto strOf = [&](int e, std::string& out) {
    return arena_[e].k == Ex::K::Str && fxtext::decodeStringLiteral(arena_[e].s, out);
  };
  if (callee == "device" || callee == "torch.device") {
    Device d;
    std::string s;
    int type_ex = pos.empty() ? -1 : pos[0];
    int index_ex = pos.size() > 1 ? pos[1] : -1;
    for (const auto& [k, v] : kws) {
      if (k == "type") type_ex = v;
      if (k == "index") index_ex = v;
    }
    if (type_ex < 0 || !strOf(type_ex, s) || s.empty()) err(line, "malformed device '" + excerpt(raw(ex)) + "'");
    auto colon = s.find(':');
    d.type = s.substr(0, colon);
    if (d.type.empty() || std::isdigit(static_cast<unsigned char>(d.type[0])) ||
        !std::all_of(d.type.begin(), d.type.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; }))
      err(line, "malformed device '" + excerpt(raw(ex)) + "'");
    if (colon != std::string::npos) {
      std::string idx = s.substr(colon + 1);
      if (idx.empty() || idx.size() > 6 || !std::all_of(idx.begin(), idx.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
        err(line, "malformed device '" + excerpt(raw(ex)) + "'");
      d.index = std::atoi(idx.c_str());
    }
    if (index_ex >= 0 && !(arena_[index_ex].k == Ex::K::Name && arena_[index_ex].s == "None")) {
      auto i = intLiteral(index_ex);
      if (!i || *i < 0 || *i > 1000000) err(line, "malformed device '" + excerpt(raw(ex)) + "'");
      d.index = static_cast<int>(*i);
    }
    return Attr::ofDevice(d);
  }
  if (callee == "float" && pos.size() == 1) {
    std::string s;
    if (strOf(pos[0], s)) {
      if (s == "inf" || s == "+inf") return Attr::ofSpecialFloat("inf");
      if (s == "-inf") return Attr::ofSpecialFloat("-inf");
      if (s == "nan") return Attr::ofSpecialFloat("nan");
    }
  }
  if (callee == "torch.Size" && pos.size() == 1 && kws.empty()) return toAttr(c, pos[0], line);
  if (callee == "slice" && kws.empty() && !pos.empty() && pos.size() <= 3) {
    std::vector<int> parts = pos;
    if (parts.size() == 1) parts.insert(parts.begin(), -1);  // slice(stop)
    return sliceAttr(c, parts, line);
  }
  if (referencesValues(c, ex)) err(line, "nested call '" + excerpt(raw(ex)) + "' in an argument is not supported");
  return Attr::ofOpaque("python", std::string(raw(ex)));
}

// A slice `a:b:c` / `slice(a, b, c)`: the list [opaque("slice"), start, stop, step] so that
// values used as bounds keep their def-use links.
Attr Importer::sliceAttr(GraphCtx& c, const std::vector<int>& parts, int line) {
  std::vector<Attr> items{Attr::ofOpaque("slice", "slice")};
  for (size_t i = 0; i < 3; ++i) items.push_back(i < parts.size() && parts[i] >= 0 ? toAttr(c, parts[i], line) : Attr::none());
  return Attr::ofList(std::move(items));
}

Attr Importer::bindingAttr(GraphCtx& c, std::string_view name, Binding& b, int line) {
  switch (b.k) {
    case Binding::K::Const: return b.c;
    case Binding::K::Graph: return Attr::ofGraph(b.graph);
    case Binding::K::Value:
      if (!b.annotated && !file_annotated_) errNoAnnotation(b.line, name);
      return Attr::ofValue(b.v);
    case Binding::K::Pending: {
      PendingNode& p = c.pending[static_cast<size_t>(b.pending)];
      if (p.materialized && p.node->output(0)) return Attr::ofValue(p.node->output(0));
      if (p.folded) {
        // A multi-output node used as a whole (e.g. a list passed on): the list of its outputs.
        std::vector<Attr> items;
        for (Value* v : p.node->outputs()) items.push_back(v ? Attr::ofValue(v) : Attr::none());
        return Attr::ofList(std::move(items));
      }
      if (!file_annotated_) errNoAnnotation(b.line, name);
      Value* v = newValueFor(p.node, 0, nullptr, name);
      p.materialized = true;
      ++unannotated_;
      Binding nb;
      nb.k = Binding::K::Value;
      nb.v = v;
      nb.line = b.line;
      nb.annotated = false;
      b = nb;
      return Attr::ofValue(v);
    }
  }
  err(line, "internal: bad binding");
}

Attr Importer::toAttr(GraphCtx& c, int ex, int line) {
  const Ex& x = arena_[ex];
  switch (x.k) {
    case Ex::K::Name: {
      if (x.s == "None") return Attr::none();
      if (x.s == "True") return Attr::ofBool(true);
      if (x.s == "False") return Attr::ofBool(false);
      auto it = c.names.find(x.s);
      if (it != c.names.end()) return bindingAttr(c, x.s, it->second, line);
      if (x.s == "inf") return Attr::ofSpecialFloat("inf");
      if (x.s == "nan") return Attr::ofSpecialFloat("nan");
      if (x.s == "Ellipsis") return Attr::ofOpaque("ellipsis", "...");
      err(line, "undefined name '" + std::string(x.s) + "'");
    }
    case Ex::K::Num: return numberAttr(x.s, false, line);
    case Ex::K::Str: {
      std::string s;
      if (!fxtext::decodeStringLiteral(x.s, s)) err(line, "malformed string " + excerpt(x.s));
      return Attr::ofString(std::move(s));
    }
    case Ex::K::Unary: {
      const Ex& o = arena_[x.kids[0]];
      if (x.s == "-" || x.s == "+") {
        bool neg = x.s == "-";
        if (o.k == Ex::K::Num) return numberAttr(o.s, neg, line);
        if (o.k == Ex::K::Name && o.s == "inf") return Attr::ofSpecialFloat(neg ? "-inf" : "inf");
        if (o.k == Ex::K::Name && o.s == "nan") return Attr::ofSpecialFloat("nan");
        std::string d;
        if (dottedName(x.kids[0], d) && d == "math.inf") return Attr::ofSpecialFloat(neg ? "-inf" : "inf");
      }
      err(line, "unsupported expression '" + excerpt(raw(ex)) + "' in an argument");
    }
    case Ex::K::Tuple:
    case Ex::K::List: {
      std::vector<Attr> items;
      items.reserve(x.kids.size());
      for (int k : x.kids) items.push_back(toAttr(c, k, line));
      return Attr::ofList(std::move(items));
    }
    case Ex::K::Attr: {
      std::string d;
      if (!dottedName(ex, d)) err(line, "unsupported expression '" + excerpt(raw(ex)) + "'");
      auto a = dottedConstant(c, d, line);
      if (!a) err(line, "'" + d + "' is not a nested graph module of this module");
      return *a;
    }
    case Ex::K::Call: return callConstant(c, ex, line);
    case Ex::K::Ellipsis: return Attr::ofOpaque("ellipsis", "...");
    case Ex::K::Slice: {
      std::vector<int> parts(x.kids.begin(), x.kids.end());
      return sliceAttr(c, parts, line);
    }
    case Ex::K::Dict:
      if (referencesValues(c, ex)) err(line, "values inside '" + excerpt(raw(ex)) + "' are not supported");
      return Attr::ofOpaque("dict", std::string(raw(ex)));
    default: err(line, "unsupported expression '" + excerpt(raw(ex)) + "' in an argument");
  }
}

// ----------------------------------------------------------------------------- nodes

void Importer::setValueType(Value* v, const TypeInfo* ti) {
  if (!ti) {
    v->kind = ValueKind::Opaque;
    v->opaque_type = "unannotated";
    return;
  }
  v->kind = ti->kind;
  if (ti->kind == ValueKind::Tensor) v->type = ti->type;
  v->sym = ti->sym;
  v->opaque_type = ti->opaque;
}

Value* Importer::newValueFor(Node* n, size_t slot, const TypeInfo* ti, std::string_view name) {
  Value* v = n->setOutput(slot, ti ? ti->kind : ValueKind::Opaque);
  setValueType(v, ti);
  v->name = std::string(name);
  return v;
}

void Importer::bindResult(GraphCtx& c, std::string_view name, Node* n, const TypeInfo* ti, int line) {
  Binding b;
  b.line = line;
  if (ti) {
    b.k = Binding::K::Value;
    b.v = newValueFor(n, 0, ti, name);
    b.annotated = ti->shaped;
  } else {
    b.k = Binding::K::Pending;
    b.pending = static_cast<int>(c.pending.size());
    c.pending.push_back(PendingNode{n, false, false});
  }
  c.names[name] = std::move(b);
}

int Importer::expectedOutputs(Node* n) {
  int want = 0;
  if (n->target == "higher_order.auto_functionalized") {
    const Attr* op = n->arg("_mutable_op");
    if (op && op->kind == Attr::Kind::Op)
      if (const OpSchema* s = lookupSchema(m_->op_schemas, op->s, &schema_cache_))
        want = 1 + static_cast<int>(s->mutableArgs().size());
  } else if (n->target == "higher_order.auto_functionalized_v2") {
    const Attr* bases = n->arg("_all_bases");
    if (bases && bases->kind == Attr::Kind::List) want = 1 + static_cast<int>(bases->list.size());
  } else if (n->kind == NodeKind::Op) {
    if (const OpSchema* s = lookupSchema(m_->op_schemas, n->target, &schema_cache_))
      want = static_cast<int>(s->returns.size());
    // List-returning views whose length the arguments tell.
    auto dimSize = [&](const char* dim_arg, int64_t default_dim) -> std::optional<int64_t> {
      Value* self = n->input("self", 0);
      if (!self || self->kind != ValueKind::Tensor) return std::nullopt;
      const Attr* d = n->arg(dim_arg);
      int64_t dim = d ? d->asInt().value_or(INT64_MIN) : default_dim;
      int64_t rank = static_cast<int64_t>(self->type.rank());
      if (dim < 0 && dim != INT64_MIN) dim += rank;
      if (dim < 0 || dim >= rank || !self->type.shape[static_cast<size_t>(dim)].isInt()) return std::nullopt;
      return self->type.shape[static_cast<size_t>(dim)].intValue();
    };
    const std::string& t = n->target;
    if (t == "aten.split_with_sizes.default") {
      const Attr* sizes = n->arg("split_sizes");
      if (sizes && sizes->kind == Attr::Kind::List) want = static_cast<int>(sizes->list.size());
    } else if (t == "aten.unbind.int") {
      if (auto len = dimSize("dim", 0)) want = static_cast<int>(std::min<int64_t>(*len, kMaxOutputIndex));
    } else if (t == "aten.split.Tensor" || t == "aten.chunk.default") {
      const Attr* a = n->arg(t == "aten.split.Tensor" ? "split_size" : "chunks");
      auto len = dimSize("dim", 0);
      auto k = a ? a->asInt() : std::nullopt;
      if (len && k && *k > 0) {
        int64_t split = t == "aten.split.Tensor" ? *k : (*len + *k - 1) / *k;
        if (split > 0) want = static_cast<int>(std::min<int64_t>(std::max<int64_t>(1, (*len + split - 1) / split), kMaxOutputIndex));
      }
    }
  }
  return want;
}

void Importer::bindGetitem(GraphCtx& c, std::string_view name, const TypeInfo* ti, int base, int index, int line) {
  const Ex& bx = arena_[base];
  if (bx.k == Ex::K::Name) {
    auto it = c.names.find(bx.s);
    if (it != c.names.end() && it->second.k == Binding::K::Pending) {
      PendingNode& p = c.pending[static_cast<size_t>(it->second.pending)];
      auto idx = intLiteral(index);
      if (idx && !p.materialized) {
        int64_t i = *idx;
        if (i < 0) {
          int64_t count = std::max<int64_t>(expectedOutputs(p.node), static_cast<int64_t>(p.node->numOutputs()));
          i += count;
          if (i < 0 || count == 0) err(line, "cannot resolve index " + std::to_string(*idx) + " of '" + std::string(bx.s) + "'");
        }
        if (i > kMaxOutputIndex) err(line, "output index " + std::to_string(i) + " is too large");
        Value* v = p.node->output(static_cast<size_t>(i));
        if (!v) v = newValueFor(p.node, static_cast<size_t>(i), ti, name);
        p.folded = true;
        Binding b;
        b.k = Binding::K::Value;
        b.v = v;
        b.line = line;
        b.annotated = ti && ti->shaped;
        c.names[name] = std::move(b);
        return;
      }
    }
  }
  // Indexing a real value (a tensor, a list): an explicit getitem node.
  std::vector<Arg> args;
  args.push_back(Arg{"a", false, toAttr(c, base, line)});
  args.push_back(Arg{"b", false, toAttr(c, index, line)});
  Node* n = c.g->createNode("_operator.getitem", NodeKind::SymPy, std::move(args), 0, nullptr, std::string(name));
  n->loc = c.loc;
  bindResult(c, name, n, ti, line);
}

Node* Importer::emitOperator(GraphCtx& c, int ex, int line, std::string_view name) {
  static const std::pair<std::string_view, const char*> kBinary[] = {
      {"+", "add"}, {"-", "sub"}, {"*", "mul"}, {"/", "truediv"}, {"//", "floordiv"}, {"%", "mod"},
      {"**", "pow"}, {"@", "matmul"}, {"<<", "lshift"}, {">>", "rshift"}, {"&", "and_"}, {"|", "or_"},
      {"^", "xor"}, {"==", "eq"}, {"!=", "ne"}, {"<", "lt"}, {"<=", "le"}, {">", "gt"}, {">=", "ge"},
  };
  const Ex& x = arena_[ex];
  std::string fn;
  if (x.k == Ex::K::Unary) {
    fn = x.s == "-" ? "neg" : x.s == "+" ? "pos" : "invert";
  } else {
    for (const auto& [op, f] : kBinary)
      if (op == x.s) fn = f;
  }
  if (fn.empty()) err(line, "unsupported operator '" + std::string(x.s) + "'");
  std::vector<Arg> args;
  args.push_back(Arg{"a", false, toAttr(c, x.kids[0], line)});
  if (x.kids.size() > 1) args.push_back(Arg{"b", false, toAttr(c, x.kids[1], line)});
  Node* n = c.g->createNode("_operator." + fn, NodeKind::SymPy, std::move(args), 0, nullptr, std::string(name));
  n->loc = c.loc;
  return n;
}

Node* Importer::emitCall(GraphCtx& c, int call, int line, std::string_view name) {
  const Ex& x = arena_[call];
  std::string dotted;
  if (!dottedName(x.kids[0], dotted)) err(line, "unsupported call '" + excerpt(raw(call)) + "'");
  std::vector<std::string_view> parts = splitDots(dotted);
  std::string target;
  std::vector<Attr> pos;
  std::vector<std::pair<std::string, Attr>> kws;
  bool method = false, module_call = false;
  auto local = c.names.find(parts[0]);
  if (parts.size() >= 2 && parts[0] == "torch" && parts[1] == "ops") {
    target = opTarget(parts, line);
  } else if (parts[0] == "self" && parts.size() >= 2) {
    target = "call_module." + dotted.substr(5);
    module_call = true;
  } else if (parts.size() >= 2 && local != c.names.end() && local->second.k != Binding::K::Const) {
    // A method call on a value: `out.to(torch.float16)`, `h.sum(-1)`.
    target = "call_method." + dotted.substr(parts[0].size() + 1);
    pos.push_back(bindingAttr(c, parts[0], local->second, line));
    method = true;
  } else if (parts.size() >= 2 && (parts[0] == "operator" || parts[0] == "_operator")) {
    target = "_operator." + dotted.substr(parts[0].size() + 1);
  } else if (parts.size() == 1) {
    static const std::set<std::string_view> kBuiltins = {
        "getattr", "setattr", "hasattr", "len", "int", "float", "bool", "str", "isinstance", "range", "abs",
        "min", "max", "sum", "round", "pow", "divmod", "tuple", "list", "dict", "print", "all", "any", "type",
    };
    target = kBuiltins.count(dotted) ? "builtins." + dotted : dotted;
  } else {
    target = dotted;
  }
  (void)method;
  for (size_t i = 1; i < x.kids.size(); ++i) {
    const Ex& a = arena_[x.kids[i]];
    if (a.k == Ex::K::Kw) {
      kws.push_back({std::string(a.s), toAttr(c, a.kids[0], line)});
    } else {
      if (!kws.empty()) err(line, "positional argument after keyword argument");
      pos.push_back(toAttr(c, x.kids[i], line));
    }
  }
  NodeKind kind = kindOfTarget(target);
  std::vector<Arg> args;
  const OpSchema* schema = nullptr;
  if (kind == NodeKind::Op || kind == NodeKind::Fxfuse) schema = lookupSchema(m_->op_schemas, target, &schema_cache_);
  if (target == "higher_order.auto_functionalized" || target == "higher_order.auto_functionalized_v2") {
    if (pos.empty() || pos[0].kind != Attr::Kind::Op)
      err(line, target.substr(13) + " needs the mutated operator as its first argument");
    args.push_back(Arg{"_mutable_op", false, pos[0]});
    for (size_t i = 1; i < pos.size(); ++i) args.push_back(Arg{"", false, pos[i]});
    for (auto& [k, v] : kws) args.push_back(Arg{k, true, std::move(v)});
  } else if (schema) {
    // Schema order, positional or by keyword; defaults left out stay out.
    std::vector<bool> used(kws.size(), false);
    for (size_t i = 0; i < schema->args.size(); ++i) {
      const SchemaArg& sa = schema->args[i];
      if (i < pos.size()) {
        args.push_back(Arg{sa.name, sa.kwarg_only, pos[i]});
        continue;
      }
      for (size_t k = 0; k < kws.size(); ++k) {
        if (!used[k] && kws[k].first == sa.name) {
          used[k] = true;
          args.push_back(Arg{sa.name, sa.kwarg_only, kws[k].second});
          break;
        }
      }
    }
    // Extra positionals (schema mismatch) go before any keyword argument.
    auto first_kw = std::find_if(args.begin(), args.end(), [](const Arg& a) { return a.keyword; });
    std::vector<Arg> extra;
    for (size_t i = schema->args.size(); i < pos.size(); ++i) extra.push_back(Arg{"", false, pos[i]});
    args.insert(first_kw, extra.begin(), extra.end());
    for (size_t k = 0; k < kws.size(); ++k)
      if (!used[k]) args.push_back(Arg{kws[k].first, true, kws[k].second});
  } else if (startsWith(target, "_operator.") && pos.size() <= 2) {
    static const char* kNames[] = {"a", "b"};
    for (size_t i = 0; i < pos.size(); ++i) args.push_back(Arg{kNames[i], false, pos[i]});
    for (auto& [k, v] : kws) args.push_back(Arg{k, true, std::move(v)});
  } else {
    for (auto& p : pos) args.push_back(Arg{"", false, std::move(p)});
    for (auto& [k, v] : kws) args.push_back(Arg{k, true, std::move(v)});
  }
  if (module_call) {
    auto it = c.cls->children.find(dotted.substr(5));
    if (it != c.cls->children.end()) args.push_back(Arg{"_graph", true, Attr::ofGraph(it->second)});
  }
  std::string node_name(name);
  if (node_name.empty()) node_name = std::string(parts.back());
  Node* n = c.g->createNode(target, kind, std::move(args), 0, nullptr, node_name);
  n->loc = c.loc;
  return n;
}

// ----------------------------------------------------------------------------- statements

void Importer::handleComment(GraphCtx& c, std::string_view text) {
  std::string_view t = trim(text);
  if (startsWith(t, "No stacktrace found")) {
    c.loc = SourceLoc{};
    return;
  }
  if (!startsWith(t, "File: ")) return;
  t = t.substr(6);
  SourceLoc loc;
  size_t code = t.find(", code: ");
  std::string_view head = t;
  if (code != std::string_view::npos) {
    loc.code = std::string(t.substr(code + 8));
    head = t.substr(0, code);
  }
  // head: "<file>:<line> in <function>"
  size_t best = std::string_view::npos;
  for (size_t k = 0; k < head.size(); ++k) {
    if (head[k] != ':') continue;
    size_t d = k + 1;
    while (d < head.size() && std::isdigit(static_cast<unsigned char>(head[d]))) ++d;
    if (d > k + 1 && (d == head.size() || head[d] == ' ')) best = k;
  }
  if (best != std::string_view::npos) {
    loc.file = std::string(head.substr(0, best));
    std::string digits;
    for (size_t d = best + 1; d < head.size() && std::isdigit(static_cast<unsigned char>(head[d])) && digits.size() < 9; ++d)
      digits += head[d];
    loc.line = std::atoi(digits.c_str());
  } else {
    loc.file = std::string(head);
  }
  if (loc.file.empty()) loc.file = "?";
  c.loc = std::move(loc);
}

void Importer::parseSignature(GraphCtx& c, const LogicalLine& l) {
  const auto& toks = lx_->tokens();
  if (!l.problem.empty()) err(l.lineno, l.problem);
  uint32_t i = l.tb + 2;  // after `def forward`
  if (i >= l.te || lx_->text(toks[i]) != "(") err(l.lineno, "malformed 'def forward'");
  ++i;
  // Parameters up to the matching ')'.
  std::vector<std::pair<uint32_t, uint32_t>> params;
  int depth = 0;
  uint32_t start = i;
  for (; i < l.te; ++i) {
    std::string_view t = lx_->text(toks[i]);
    if (toks[i].k != TK::Op) continue;
    if (t == "(" || t == "[" || t == "{") ++depth;
    if (t == ")" || t == "]" || t == "}") {
      if (depth == 0) break;
      --depth;
    }
    if (t == "," && depth == 0) {
      params.push_back({start, i});
      start = i + 1;
    }
  }
  if (i >= l.te) err(l.lineno, "malformed 'def forward': missing ')'");
  if (start < i) params.push_back({start, i});
  bool first = true;
  for (auto [b, e] : params) {
    if (b >= e) err(l.lineno, "malformed parameter list");
    bool star = false;
    if (toks[b].k == TK::Op && (lx_->text(toks[b]) == "*" || lx_->text(toks[b]) == "**")) {
      star = true;
      ++b;
      if (b >= e) continue;  // a bare `*`
    }
    if (toks[b].k != TK::Name) err(l.lineno, "malformed parameter '" + excerpt(lx_->text(toks[b])) + "'");
    std::string_view name = lx_->text(toks[b]);
    if (first && name == "self") {
      first = false;
      continue;
    }
    first = false;
    // Annotation up to a default `=` at depth 0.
    uint32_t ann_e = e;
    int d2 = 0;
    for (uint32_t k = b + 1; k < e; ++k) {
      std::string_view t = lx_->text(toks[k]);
      if (toks[k].k != TK::Op) continue;
      if (t == "(" || t == "[" || t == "{") ++d2;
      if (t == ")" || t == "]" || t == "}") --d2;
      if (t == "=" && d2 == 0) {
        ann_e = k;
        break;
      }
    }
    const TypeInfo* ti = nullptr;
    if (b + 1 < ann_e) {
      if (lx_->text(toks[b + 1]) != ":") err(l.lineno, "malformed parameter '" + std::string(name) + "'");
      std::string storage;
      ti = &annotation(annotationText(b + 2, ann_e, storage, l.lineno), l.lineno);
    }
    Value* v = c.g->addInput(ti ? ti->kind : ValueKind::Opaque, std::string(name));
    setValueType(v, ti);
    if (star) v->opaque_type = "varargs";
    Binding bd;
    bd.k = Binding::K::Value;
    bd.v = v;
    bd.line = l.lineno;
    bd.annotated = ti && ti->shaped;
    c.names[name] = std::move(bd);
  }
}

void Importer::assign(GraphCtx& c, int line, std::string_view name, const TypeInfo* ti, int rhs) {
  const Ex& x = arena_[rhs];
  switch (x.k) {
    case Ex::K::Call: {
      std::string callee;
      if (dottedName(x.kids[0], callee) && (callee == "operator.getitem" || callee == "_operator.getitem") &&
          x.kids.size() == 3 && arena_[x.kids[1]].k != Ex::K::Kw && arena_[x.kids[2]].k != Ex::K::Kw) {
        bindGetitem(c, name, ti, x.kids[1], x.kids[2], line);
        return;
      }
      if (callee == "device" || callee == "torch.device" || callee == "slice" || callee == "torch.Size") {
        Binding b;
        b.k = Binding::K::Const;
        b.c = callConstant(c, rhs, line);
        b.line = line;
        c.names[name] = std::move(b);
        return;
      }
      bindResult(c, name, emitCall(c, rhs, line, name), ti, line);
      return;
    }
    case Ex::K::Bin:
      bindResult(c, name, emitOperator(c, rhs, line, name), ti, line);
      return;
    case Ex::K::Unary: {
      const Ex& o = arena_[x.kids[0]];
      if (o.k == Ex::K::Num || (o.k == Ex::K::Name && (o.s == "inf" || o.s == "nan") && !c.names.count(o.s))) {
        Binding b;
        b.k = Binding::K::Const;
        b.c = toAttr(c, rhs, line);
        b.line = line;
        c.names[name] = std::move(b);
        return;
      }
      bindResult(c, name, emitOperator(c, rhs, line, name), ti, line);
      return;
    }
    case Ex::K::Sub:
      bindGetitem(c, name, ti, x.kids[0], x.kids[1], line);
      return;
    case Ex::K::Name: {
      auto it = c.names.find(x.s);
      if (it != c.names.end()) {
        // `l_x_ = L_x_`: Dynamo renames its inputs; the placeholder's name is the new one.
        Binding b = it->second;
        if (b.k == Binding::K::Value && b.v->isGraphInput() && b.v->name == x.s) b.v->name = std::string(name);
        c.names[name] = std::move(b);
        return;
      }
      break;
    }
    case Ex::K::Attr: {
      std::string d;
      if (dottedName(rhs, d) && startsWith(d, "self.")) {
        std::string attr = d.substr(5);
        auto it = c.cls->children.find(attr);
        Binding b;
        b.line = line;
        if (it != c.cls->children.end()) {
          b.k = Binding::K::Graph;
          b.graph = it->second;
        } else {
          // get_attr of a tensor constant or a custom object: a module input.
          InputKind ik = ti && ti->kind == ValueKind::Tensor ? InputKind::ConstantTensor : InputKind::CustomObj;
          Value* v = c.g->addInput(ti ? ti->kind : ValueKind::Opaque, std::string(name), ik, attr);
          setValueType(v, ti);
          b.k = Binding::K::Value;
          b.v = v;
          b.annotated = ti && ti->shaped;
        }
        c.names[name] = std::move(b);
        return;
      }
      break;
    }
    default:
      break;
  }
  // A constant.
  Binding b;
  b.k = Binding::K::Const;
  b.c = toAttr(c, rhs, line);
  b.line = line;
  c.names[name] = std::move(b);
}

void Importer::assignTuple(GraphCtx& c, int line, const std::vector<std::string_view>& names, int rhs) {
  const Ex& x = arena_[rhs];
  std::string callee;
  if (x.k == Ex::K::Call && dottedName(x.kids[0], callee) &&
      (callee == "fx_pytree.tree_flatten_spec" || callee == "pytree.tree_flatten_spec" ||
       callee == "torch.fx._pytree.tree_flatten_spec")) {
    // `x, y, = fx_pytree.tree_flatten_spec(([x, y], {}), self._in_spec)`: the flattened inputs.
    std::vector<int> flat;
    std::function<void(int)> walk = [&](int e) {
      const Ex& ee = arena_[e];
      if (ee.k == Ex::K::Tuple || ee.k == Ex::K::List) {
        for (int k : ee.kids) walk(k);
      } else if (ee.k == Ex::K::Name) {
        flat.push_back(e);
      }
    };
    if (x.kids.size() >= 2) walk(x.kids[1]);
    if (flat.size() != names.size()) err(line, "cannot match the flattened inputs of '" + excerpt(raw(rhs)) + "'");
    std::vector<Binding> bs;
    for (int e : flat) {
      auto it = c.names.find(arena_[e].s);
      if (it == c.names.end()) err(line, "undefined name '" + std::string(arena_[e].s) + "'");
      bs.push_back(it->second);
    }
    for (size_t i = 0; i < names.size(); ++i) c.names[names[i]] = bs[i];
    return;
  }
  if (x.k != Ex::K::Call) err(line, "unsupported tuple assignment");
  // `a, b = op(...)`: a multi-output node, outputs folded in.
  Node* n = emitCall(c, rhs, line, names.empty() ? std::string_view{} : names[0]);
  c.pending.push_back(PendingNode{n, false, true});
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == "_") continue;
    Binding b;
    b.k = Binding::K::Value;
    b.v = newValueFor(n, i, nullptr, names[i]);
    b.line = line;
    b.annotated = false;
    c.names[names[i]] = std::move(b);
  }
}

void Importer::handleReturn(GraphCtx& c, const LogicalLine& l, uint32_t b, uint32_t e) {
  if (c.returned) err(l.lineno, "second return statement");
  c.returned = true;
  if (b >= e) return;
  arena_.clear();
  ExprParser p(*lx_, b, e, arena_, path_, l.lineno);
  int ex = p.parseTupleOrExpr();
  p.expectEnd();
  std::string callee;
  if (arena_[ex].k == Ex::K::Call && dottedName(arena_[ex].kids[0], callee) &&
      (callee == "pytree.tree_unflatten" || callee == "torch.utils._pytree.tree_unflatten") && arena_[ex].kids.size() >= 2)
    ex = arena_[ex].kids[1];
  std::vector<int> items;
  std::function<void(int, int)> flatten = [&](int e2, int depth) {
    if (depth > kMaxExprDepth) err(l.lineno, "return value nested too deeply");
    const Ex& x = arena_[e2];
    if (x.k == Ex::K::Tuple || x.k == Ex::K::List) {
      for (int k : x.kids) flatten(k, depth + 1);
    } else {
      items.push_back(e2);
    }
  };
  flatten(ex, 0);
  for (int it : items) {
    const Ex& x = arena_[it];
    if (x.k == Ex::K::Name) {
      auto f = c.names.find(x.s);
      if (f != c.names.end() && f->second.k == Binding::K::Pending && c.pending[f->second.pending].folded) {
        for (Value* v : c.pending[f->second.pending].node->outputs()) {
          if (v) {
            c.g->addOutput(v);
          } else {
            c.g->addConstantOutput(Attr::none());
          }
        }
        continue;
      }
    }
    Attr a = toAttr(c, it, l.lineno);
    if (a.kind == Attr::Kind::Value) {
      c.g->addOutput(a.value);
    } else {
      c.g->addConstantOutput(std::move(a));
    }
  }
}

void Importer::statement(GraphCtx& c, const LogicalLine& l, uint32_t b, uint32_t e) {
  const auto& toks = lx_->tokens();
  if (b >= e) return;
  const int line = l.lineno;
  std::string_view first = lx_->text(toks[b]);
  if (toks[b].k == TK::Name) {
    if (first == "return") return handleReturn(c, l, b + 1, e);
    if (first == "pass" || first == "del") return;
    if (first == "def" || first == "class" || first == "if" || first == "for" || first == "while" || first == "with" ||
        first == "import" || first == "from" || first == "try")
      err(line, "unsupported statement '" + excerpt(l.text) + "'");
  }
  if (c.returned) err(line, "statement after return");
  // Split at '=' outside brackets.
  std::vector<uint32_t> eqs;
  int depth = 0;
  for (uint32_t i = b; i < e; ++i) {
    if (toks[i].k != TK::Op) continue;
    std::string_view t = lx_->text(toks[i]);
    if (t == "(" || t == "[" || t == "{") ++depth;
    if (t == ")" || t == "]" || t == "}") --depth;
    if (t == "=" && depth == 0) eqs.push_back(i);
  }
  arena_.clear();
  if (eqs.empty() && e - b >= 3 && toks[b].k == TK::Name && lx_->text(toks[b + 1]) == ":") {
    // `x: "f32[3, 8]"`: an annotation of an existing name (ep.module() prints its inputs so).
    std::string storage;
    const TypeInfo& ti = annotation(annotationText(b + 2, e, storage, line), line);
    auto it = c.names.find(lx_->text(toks[b]));
    if (it == c.names.end() || it->second.k != Binding::K::Value || !it->second.v->isGraphInput())
      err(line, "annotation of unknown input '" + std::string(lx_->text(toks[b])) + "'");
    setValueType(it->second.v, &ti);
    it->second.annotated = ti.shaped;
    return;
  }
  if (eqs.empty()) {
    // An expression statement: a call whose result is not kept.
    ExprParser p(*lx_, b, e, arena_, path_, line);
    int ex = p.parseExpr();
    p.expectEnd();
    if (arena_[ex].k != Ex::K::Call) err(line, "unsupported statement '" + excerpt(l.text) + "'");
    emitCall(c, ex, line, {});
    return;
  }
  uint32_t rb = eqs.back() + 1;
  ExprParser p(*lx_, rb, e, arena_, path_, line);
  int rhs = p.parseTupleOrExpr();
  p.expectEnd();
  const Ex& rx = arena_[rhs];
  bool rhs_none = rx.k == Ex::K::Name && rx.s == "None";
  // Targets.
  uint32_t tb = b;
  for (size_t k = 0; k < eqs.size(); ++k) {
    uint32_t te = eqs[k];
    if (tb >= te) err(line, "missing assignment target");
    bool simple = te - tb == 1 && toks[tb].k == TK::Name;
    if (rhs_none && simple) {  // `x = y = None`: FX frees values; nothing to import
      tb = te + 1;
      continue;
    }
    if (toks[tb].k != TK::Name) err(line, "unsupported assignment target '" + excerpt(l.text) + "'");
    std::string_view name = lx_->text(toks[tb]);
    if (te - tb >= 2 && lx_->text(toks[tb + 1]) == ":") {
      std::string storage;
      const TypeInfo& ti = annotation(annotationText(tb + 2, te, storage, line), line);
      assign(c, line, name, &ti, rhs);
    } else if (simple) {
      assign(c, line, name, nullptr, rhs);
    } else if (lx_->text(toks[tb + 1]) == ",") {
      std::vector<std::string_view> names;
      for (uint32_t i = tb; i < te; ++i) {
        if (toks[i].k == TK::Name) {
          names.push_back(lx_->text(toks[i]));
        } else if (lx_->text(toks[i]) != "," && lx_->text(toks[i]) != "(" && lx_->text(toks[i]) != ")") {
          err(line, "unsupported assignment target '" + excerpt(l.text) + "'");
        }
      }
      assignTuple(c, line, names, rhs);
    } else {
      err(line, "unsupported assignment target '" + excerpt(l.text) + "'");
    }
    tb = te + 1;
  }
}

void Importer::finishGraph(GraphCtx& c, int last_line) {
  if (!c.returned)
    err(last_line, "forward() of '" + c.cls->name + "' ends without a return statement (truncated file?)");
  for (PendingNode& p : c.pending) {
    if (p.materialized) continue;
    int want = expectedOutputs(p.node);
    if (want > static_cast<int>(p.node->numOutputs()) && want <= kMaxOutputIndex)
      p.node->resizeOutputs(static_cast<size_t>(want));
  }
}

void Importer::buildGraph(const ClassInfo& ci) {
  GraphCtx c;
  c.g = m_->graphs()[static_cast<size_t>(ci.graph)].get();
  c.cls = &ci;
  c.names.reserve((ci.body_e - ci.body_b) * 2 + 16);
  const LogicalLine& def = lines_[static_cast<size_t>(ci.def)];
  parseSignature(c, def);
  int body_indent = -1;
  int last_line = def.lineno;
  const auto& toks = lx_->tokens();
  for (size_t i = ci.body_b; i < ci.body_e; ++i) {
    const LogicalLine& l = lines_[i];
    if (l.comment) {
      handleComment(c, l.text);
      continue;
    }
    if (body_indent < 0) body_indent = l.indent;
    if (l.indent != body_indent) err(l.lineno, "unexpected indentation");
    if (!l.problem.empty()) err(l.lineno, l.problem);
    last_line = l.lineno;
    // Simple statements separated by ';' at bracket depth 0.
    uint32_t start = l.tb;
    int depth = 0;
    for (uint32_t k = l.tb; k <= l.te; ++k) {
      if (k < l.te) {
        if (toks[k].k != TK::Op) continue;
        std::string_view t = lx_->text(toks[k]);
        if (t == "(" || t == "[" || t == "{") ++depth;
        if (t == ")" || t == "]" || t == "}") --depth;
        if (!(t == ";" && depth == 0)) continue;
      }
      statement(c, l, start, k);
      start = k + 1;
    }
  }
  finishGraph(c, last_line);
}

// ----------------------------------------------------------------------------- producer

void Importer::guessProducer() {
  Producer& p = m_->producer;
  p.tool = "fx-readable-text";
  p.source_path = path_;
  p.source_schema = bare_def_ ? "python_code" : "print_readable";
  bool dynamo = false, prims = false, af1 = false, functional = true, non_core = false, inductor_decomp = false;
  for (const auto& g : m_->graphs()) {
    for (const auto& in : g->inputs())
      if (startsWith(in.value->name, "l_") || startsWith(in.value->name, "L_")) dynamo = true;
    for (const auto& np : g->nodes()) {
      const Node& n = *np;
      const std::string& t = n.target;
      if (startsWith(t, "call_method.") || (startsWith(t, "torch.") && !startsWith(t, "torch.sym")) ||
          (n.kind == NodeKind::SymPy && n.output() && n.output()->kind == ValueKind::Tensor))
        dynamo = true;
      if (startsWith(t, "prims.")) prims = true;
      if (t == "higher_order.auto_functionalized") af1 = true;
      if (t == "aten.empty.memory_format" || t == "aten.reshape.default") inductor_decomp = true;
      if (t == "aten.linear.default" || t == "aten.scaled_dot_product_attention.default" ||
          t == "aten.matmul.default" || t == "aten.dropout.default")
        non_core = true;
      if (n.kind != NodeKind::Op) continue;
      if (const OpSchema* s = lookupSchema(m_->op_schemas, t, &schema_cache_)) {
        if (!s->mutableArgs().empty()) functional = false;
      } else if (n.numOutputs() == 0 && std::count(t.begin(), t.end(), '.') == 2 && !startsWith(t, "call_") &&
                 !startsWith(t, "torch.") && !startsWith(t, "builtins.")) {
        functional = false;  // an unknown operator whose result nobody reads: called for its effect
      }
      if (hasSideEffects(n) && n.numOutputs() > 0 && startsWith(t, "aten.") && t != "aten._assert_scalar.default" &&
          t != "aten._assert_tensor_metadata.default" && t != "aten.sym_constrain_range_for_size.default" &&
          t != "aten._assert_async.msg")
        functional = false;
    }
  }
  p.functional = functional && !dynamo;
  std::string_view base = path_;
  if (auto slash = base.rfind('/'); slash != std::string_view::npos) base = base.substr(slash + 1);
  auto named = [&](std::string_view w) { return base.find(w) != std::string_view::npos; };
  std::string_view cls = classes_.empty() ? std::string_view{} : std::string_view(classes_[0].name);
  if (dynamo || named("computation_graph")) {
    p.stage = Stage::Dynamo;
  } else if (named("fx_graph_transformed")) {
    p.stage = Stage::PostGradPost;
  } else if (named("post_grad_pre") || named("fx_graph_readable")) {
    p.stage = Stage::PostGradPre;
  } else if (named("post_grad")) {
    p.stage = Stage::PostGradPost;
  } else if (named("core_aten")) {
    p.stage = Stage::ExportCoreAten;
  } else if (named("train_ir")) {
    p.stage = Stage::ExportTrainIr;
  } else if (cls == "<lambda>") {
    // AOT graphs; Inductor's decompositions (prims, empty.memory_format) and
    // auto_functionalized v1 (what vLLM configures) mark the post-grad stage.
    p.stage = (prims || af1 || inductor_decomp) ? Stage::PostGradPre : Stage::AotForward;
  } else if (cls == "GraphModule") {
    p.stage = (!functional || non_core) ? Stage::ExportTrainIr : Stage::ExportCoreAten;
  }
  if (!cls.empty()) m_->metadata["fx_text.module_class"] = std::string(cls);
  m_->metadata["fx_text.shapes"] = !tensor_annotations_ ? "none"
                                   : missing_strides_ ? "sizes only (strides assumed contiguous)"
                                                      : "sizes and strides";
  if (tensor_annotations_ && missing_device_) m_->metadata["fx_text.devices"] = "not annotated";
  if (unannotated_ > 0) m_->metadata["fx_text.unannotated_values"] = std::to_string(unannotated_);
}

// ----------------------------------------------------------------------------- driver

std::unique_ptr<Module> Importer::run() {
  if (text_.size() >= (1u << 31)) fail("{}: file too large for the FX text importer", path_);
  m_ = std::make_unique<Module>();
  size_t pos = 0;
  int lineno = 1;
  findRoot(pos, lineno);
  lx_ = std::make_unique<Lexer>(text_, pos, lineno);
  LogicalLine root;
  if (!lx_->next(root)) fail("{}: line {}: unexpected end of file", path_, lineno);
  if (!root.problem.empty()) err(root.lineno, root.problem);
  lines_.push_back(root);
  // The module's block: every following line indented deeper than its first line.
  while (true) {
    int ind = lx_->peekCodeIndent();
    if (ind < 0 || ind <= root.indent) break;
    LogicalLine l;
    if (!lx_->next(l)) break;
    lines_.push_back(std::move(l));
  }
  // Is there any shape annotation at all? (Decides between "no annotation" errors and
  // opaque values for the odd unannotated value.)
  {
    const auto& toks = lx_->tokens();
    for (const auto& l : lines_) {
      if (l.comment) continue;
      for (uint32_t k = l.tb; k + 2 < l.te; ++k) {
        if (toks[k].k == TK::Name && toks[k + 1].k == TK::Op && lx_->text(toks[k + 1]) == ":" &&
            toks[k + 2].k == TK::Str) {
          std::string s;
          if (!fxtext::decodeStringLiteral(lx_->text(toks[k + 2]), s)) continue;
          std::string_view sv = trim(s);
          size_t i = 0;
          while (i < sv.size() && std::isalnum(static_cast<unsigned char>(sv[i]))) ++i;
          if (startsWith(sv, "Sym(") || (i > 0 && i < sv.size() && sv[i] == '[' && dtypeFromName(sv.substr(0, i)))) {
            file_annotated_ = true;
            break;
          }
        }
      }
      if (file_annotated_) break;
    }
  }
  if (bare_def_) {
    ClassInfo ci;
    ci.name = "forward";
    ci.path = "main";
    ci.def = 0;
    ci.body_b = 1;
    ci.body_e = lines_.size();
    ci.graph = 0;
    m_->addGraph("main");
    if (!lineIs(lines_[0], "def")) err(lines_[0].lineno, "malformed 'def forward'");
    classes_.push_back(std::move(ci));
  } else {
    parseClass(0, "main", 0);
  }
  for (const ClassInfo& ci : classes_) buildGraph(ci);
  guessProducer();
  // Values are defined before use by construction (the text is read in order); the
  // verifier runs where modules are consumed (CLI, tests, fuzzers), not here.
  return std::move(m_);
}

}  // namespace

std::unique_ptr<Module> importFxText(std::string_view text, const std::string& path) {
  try {
    Importer imp(text, path);
    return imp.run();
  } catch (const FxError&) {
    throw;
  } catch (const std::bad_alloc&) {
    fail("{}: out of memory while reading FX text", path);
  } catch (const std::exception& e) {
    fail("{}: {}", path, e.what());
  }
}

bool looksLikeFxText(std::string_view text) {
  // A `def forward(self` line, followed by an annotated assignment (`name: "..." =`) or
  // a call of a torch op; and not one of the other text formats.
  std::string_view head = trim(text.substr(0, 256));
  if (startsWith(head, "fxfuse.module") || startsWith(head, "{") || startsWith(head, "[")) return false;
  bool in_forward = false;
  size_t p = 0;
  while (p < text.size()) {
    size_t eol = text.find('\n', p);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = trim(text.substr(p, eol - p));
    p = eol + 1;
    if (!in_forward) {
      if (startsWith(line, "def forward(self")) in_forward = true;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    size_t i = 0;
    while (i < line.size() && (std::isalnum(static_cast<unsigned char>(line[i])) || line[i] == '_')) ++i;
    if (i > 0 && line.substr(i, 3) == ": \"") return true;
    if (line.find("= torch.ops.") != std::string_view::npos) return true;
    if (startsWith(line, "return")) return false;
  }
  return false;
}

}  // namespace fxfuse::ir
