// torch.export JSON → fxfuse IR.
//
// The ExportedProgram JSON names values instead of numbering them: a TensorArgument
// refers to a key of `graph.tensor_values`, a SymIntArgument to `sym_int_values`, and so
// on. Nodes list their outputs directly (no getitem). We map names to Values as nodes
// define them; a reference to a name no node or input defined is an error ("dangling").
// JSON is parsed with simdjson (DOM); archives are read with libzip.
#include "ir/importers/export_json.h"

#include <zip.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <simdjson.h>
#include <unordered_map>

#include "ir/io.h"
#include "ir/op_schema.h"
#include "ir/checked_math.h"
#include "ir/status.h"

namespace fxfuse::ir {

namespace {

namespace dom = simdjson::dom;

constexpr size_t kMaxMemberBytes = size_t{4} << 30;  // 4 GiB
constexpr int kMaxGraphDepth = 32;

// Argument names, subgraph names and device types must be plain identifiers so that the
// module prints as .fxg and parses back.
bool isIdentifier(std::string_view s) { return isValidSymbolName(s); }

std::string stripTorchOps(std::string_view t) {
  if (t.rfind("torch.ops.", 0) == 0) return std::string(t.substr(10));
  return std::string(t);
}

// Where in the input we are, for error messages; the string is only built on error.
struct Ctx {
  std::string where;  // "file: member" or "file: member: subgraph g"
  std::string node;   // current node name, empty outside nodes
  std::string str() const { return node.empty() ? where : where + ": node " + node; }
};

// A JSON element with the context needed for one-line errors.
class J {
 public:
  J(dom::element e, const Ctx* ctx) : e_(e), ctx_(ctx) {}

  [[noreturn]] void error(const std::string& what) const { fail("{}: {}", ctx_->str(), what); }

  bool isNull() const { return e_.is_null(); }
  bool isObject() const { return e_.is_object(); }
  bool isArray() const { return e_.is_array(); }
  bool isString() const { return e_.is_string(); }
  dom::element raw() const { return e_; }

  bool has(std::string_view key) const {
    dom::object o;
    if (e_.get(o) != simdjson::SUCCESS) return false;
    dom::element v;
    return o.at_key(key).get(v) == simdjson::SUCCESS;
  }
  J at(std::string_view key) const {
    dom::object o;
    if (e_.get(o) != simdjson::SUCCESS) error("expected an object with key '" + std::string(key) + "'");
    dom::element v;
    if (o.at_key(key).get(v) != simdjson::SUCCESS) error("missing key '" + std::string(key) + "'");
    return J(v, ctx_);
  }
  // Missing or null → nullopt.
  std::optional<J> opt(std::string_view key) const {
    dom::object o;
    if (e_.get(o) != simdjson::SUCCESS) return std::nullopt;
    dom::element v;
    if (o.at_key(key).get(v) != simdjson::SUCCESS || v.is_null()) return std::nullopt;
    return J(v, ctx_);
  }
  std::string_view str() const {
    std::string_view s;
    if (e_.get(s) != simdjson::SUCCESS) error("expected a string");
    return s;
  }
  int64_t integer() const {
    int64_t i;
    if (e_.get(i) == simdjson::SUCCESS) return i;
    uint64_t u;
    if (e_.get(u) == simdjson::SUCCESS && u <= static_cast<uint64_t>(INT64_MAX)) return static_cast<int64_t>(u);
    // A whole float inside int64's range (2^63 is the first double past it; NaN fails both).
    double d;
    if (e_.get(d) == simdjson::SUCCESS && d >= -9223372036854775808.0 && d < 9223372036854775808.0 &&
        d == std::trunc(d))
      return static_cast<int64_t>(d);
    error("expected an integer");
  }
  // Floats: numbers, or the strings "Infinity"/"-Infinity"/"NaN" torch writes.
  double number() const {
    double d;
    if (e_.get(d) == simdjson::SUCCESS) return d;
    int64_t i;
    if (e_.get(i) == simdjson::SUCCESS) return static_cast<double>(i);
    std::string_view s;
    if (e_.get(s) == simdjson::SUCCESS) {
      if (s == "Infinity" || s == "inf") return std::numeric_limits<double>::infinity();
      if (s == "-Infinity" || s == "-inf") return -std::numeric_limits<double>::infinity();
      if (s == "NaN" || s == "nan") return std::numeric_limits<double>::quiet_NaN();
    }
    error("expected a number");
  }
  bool boolean() const {
    bool b;
    if (e_.get(b) != simdjson::SUCCESS) error("expected a boolean");
    return b;
  }
  std::vector<J> array() const {
    dom::array a;
    if (e_.get(a) != simdjson::SUCCESS) error("expected an array");
    std::vector<J> out;
    out.reserve(a.size());
    for (dom::element x : a) out.emplace_back(x, ctx_);
    return out;
  }
  std::vector<std::pair<std::string_view, J>> items() const {
    dom::object o;
    if (e_.get(o) != simdjson::SUCCESS) error("expected an object");
    std::vector<std::pair<std::string_view, J>> out;
    for (auto kv : o) out.emplace_back(kv.key, J(kv.value, ctx_));
    return out;
  }
  // The single key of a union object ({"as_tensor": {...}}).
  std::pair<std::string_view, J> unionKey() const {
    dom::object o;
    if (e_.get(o) != simdjson::SUCCESS) error("expected a union object");
    if (o.size() != 1) {
      for (auto kv : o)
        if (kv.key == "$type") error("old union encoding ('$type'/'$value', schema < 5.1) is not supported");
      error("expected a union object with exactly one key, got " + std::to_string(o.size()));
    }
    auto kv = *o.begin();
    return {kv.key, J(kv.value, ctx_)};
  }

 private:
  dom::element e_;
  const Ctx* ctx_;
};

class ExportImporter {
 public:
  ExportImporter(const std::string& path, const std::string& member) : path_(path), member_(member) {
    base_ctx_ = member.empty() ? path : path + ": " + member;
    ctx_.where = base_ctx_;
  }

  std::unique_ptr<Module> run(std::string_view json, bool padded) {
    dom::element doc;
    simdjson::error_code err;
    simdjson::padded_string copy;
    if (padded) {
      err = parser_.parse(reinterpret_cast<const uint8_t*>(json.data()), json.size(), false).get(doc);
    } else {
      copy = simdjson::padded_string(json);
      err = parser_.parse(copy).get(doc);
    }
    if (err) fail("{}: malformed JSON: {}", base_ctx_, simdjson::error_message(err));
    J root(doc, &ctx_);
    if (!root.isObject()) fail("{}: not a torch.export program (top level is not an object)", base_ctx_);
    if (!root.has("graph_module")) fail("{}: not a torch.export program (no 'graph_module')", base_ctx_);

    module_ = std::make_unique<Module>();
    module_->producer.tool = "torch.export-json";
    module_->producer.source_path = path_;
    if (auto sv = root.opt("schema_version")) {
      int64_t major = sv->at("major").integer();
      int64_t minor = sv->opt("minor") ? sv->at("minor").integer() : 0;
      if (major < 5 || major > 8)
        fail("{}: unsupported torch.export schema major version {} (fxfuse reads 5 to 8)", base_ctx_, major);
      module_->producer.source_schema = "export " + std::to_string(major) + "." + std::to_string(minor);
    }
    if (auto tv = root.opt("torch_version")) module_->producer.torch_version = std::string(tv->str());

    if (auto rc = root.opt("range_constraints")) {
      for (auto& [name, r] : rc->items()) {
        if (!isValidSymbolName(name)) fail("{}: range_constraints: symbol name '{}' is not an identifier", base_ctx_, std::string(name.substr(0, 200)));
        SymbolInfo& s = module_->symbols.getOrAdd(std::string(name));
        if (auto lo = r.opt("min_val")) s.min = clampBound(*lo);
        if (auto hi = r.opt("max_val")) s.max = clampBound(*hi);
      }
    }

    J gm = root.at("graph_module");
    J graph = gm.at("graph");
    Graph* g = module_->addGraph("main");
    importGraph(graph, g, 0);

    // Signature: input/output roles.
    if (auto sig = gm.opt("signature")) applySignature(*sig, g);

    finishProducer();
    return std::move(module_);
  }

  static std::optional<int64_t> clampBound(const J& v) {
    double d;
    if (v.raw().get(d) == simdjson::SUCCESS && !v.raw().is_int64()) {
      if (std::isinf(d) || std::abs(d) > 9.2e18) return std::nullopt;
      return static_cast<int64_t>(d);
    }
    int64_t i;
    if (v.raw().get(i) == simdjson::SUCCESS) {
      if (i >= (int64_t{1} << 62) || i <= -(int64_t{1} << 62)) return std::nullopt;  // int_oo
      return i;
    }
    return std::nullopt;
  }

 private:
  // Name → JSON element of one of the graph's value tables. simdjson's DOM key lookup is
  // a linear scan, so each table is indexed once.
  using Index = std::unordered_map<std::string_view, dom::element>;

  struct Scope {
    J graph;
    std::unordered_map<std::string, Value*> values;
    Index tensor_values, sym_int_values, sym_bool_values, sym_float_values;
    bool has_tensor_values = false;
  };

  Index indexTable(const std::optional<J>& table) {
    Index idx;
    if (!table) return idx;
    dom::object o;
    if (table->raw().get(o) != simdjson::SUCCESS) fail("{}: value table is not an object", ctx_.str());
    idx.reserve(o.size());
    for (auto kv : o) idx.emplace(kv.key, kv.value);
    return idx;
  }

  SymExpr symFromJson(const J& s) {
    // SymInt union: {"as_int": N} | {"as_expr": {"expr_str": ..., "hint": {...}}}
    auto [k, v] = s.unionKey();
    if (k == "as_int") return SymExpr::integer(v.integer());
    if (k == "as_expr") {
      std::string_view text = v.at("expr_str").str();
      auto cached = expr_cache_.find(text);
      if (cached == expr_cache_.end()) {
        SymExpr parsed = parseSymExpr(text, ctx_.str());
        noteSymbols(parsed);
        cached = expr_cache_.emplace(text, parsed).first;
      }
      SymExpr e = cached->second;
      if (e.isSym()) {
        if (auto h = v.opt("hint")) {
          auto [hk, hv] = h->unionKey();
          if (hk == "as_int") module_->symbols.getOrAdd(e.name()).hint = hv.integer();
        }
      }
      return e;
    }
    if (k == "as_float") return SymExpr::real(v.number());
    if (k == "as_bool") return SymExpr::boolean(v.boolean());
    s.error("unknown symbolic value kind '" + std::string(k) + "'");
  }

  void noteSymbols(const SymExpr& e) {
    std::set<std::string> syms;
    e.collectSymbols(syms);
    for (const auto& s : syms) module_->symbols.getOrAdd(s);
  }

  DType dtypeFrom(const J& v) {
    if (v.isString()) {
      auto d = dtypeFromExportScalarTypeName(v.str());
      if (!d) v.error("unknown scalar type '" + std::string(v.str()) + "'");
      return *d;
    }
    int64_t i = v.integer();
    auto d = dtypeFromExportScalarType(i);
    if (!d) v.error("unknown scalar type " + std::to_string(i));
    return *d;
  }

  void tensorMeta(const J& meta, TensorType& t) {
    t.dtype = dtypeFrom(meta.at("dtype"));
    for (const J& d : meta.at("sizes").array()) t.shape.push_back(symFromJson(d));
    if (auto st = meta.opt("strides")) {
      for (const J& d : st->array()) t.stride.push_back(symFromJson(d));
    }
    if (t.stride.empty()) t.stride = TensorType::contiguousStrides(t.shape);
    if (t.stride.size() != t.shape.size()) meta.error("tensor metadata has different numbers of sizes and strides");
    if (auto off = meta.opt("storage_offset")) t.storage_offset = symFromJson(*off);
    if (auto dev = meta.opt("device")) {
      t.device.type = std::string(dev->at("type").str());
      if (!isKnownDeviceType(t.device.type)) meta.error("unknown device type '" + t.device.type.substr(0, 200) + "'");
      if (auto idx = dev->opt("index")) t.device.index = static_cast<int>(idx->integer());
    }
    if (auto rg = meta.opt("requires_grad")) t.requires_grad = rg->boolean();
  }

  // Creates or returns the value `name` of the given kind, filling its metadata from the
  // scope's value tables.
  void describe(Scope& sc, Value* v, ValueKind kind, const std::string& name) {
    v->name = name;
    v->kind = kind;
    switch (kind) {
      case ValueKind::Tensor: {
        if (!sc.has_tensor_values) fail("{}: no tensor_values table for tensor '{}'", ctx_.str(), name);
        auto it = sc.tensor_values.find(name);
        if (it == sc.tensor_values.end()) fail("{}: tensor '{}' has no entry in tensor_values", ctx_.str(), name);
        tensorMeta(J(it->second, &ctx_), v->type);
        break;
      }
      case ValueKind::SymInt:
      case ValueKind::SymBool:
      case ValueKind::SymFloat: {
        const Index& table = kind == ValueKind::SymInt ? sc.sym_int_values : kind == ValueKind::SymBool ? sc.sym_bool_values
                                                                                                        : sc.sym_float_values;
        auto it = table.find(name);
        if (it != table.end() && !it->second.is_null()) v->sym = symFromJson(J(it->second, &ctx_));
        break;
      }
      case ValueKind::Opaque:
        v->opaque_type = "custom_obj";
        break;
    }
  }

  Value* lookup(Scope& sc, std::string_view name, const char* what) {
    auto it = sc.values.find(std::string(name));
    if (it == sc.values.end()) fail("{}: reference to undefined {} '{}'", ctx_.str(), what, std::string(name));
    return it->second;
  }

  Attr symArg(Scope& sc, const J& v, const char* what) {
    // SymIntArgument: {"as_name": n} | {"as_int": i}; SymBool/SymFloat alike.
    auto [k, x] = v.unionKey();
    if (k == "as_name") return Attr::ofValue(lookup(sc, x.str(), what));
    if (k == "as_int") return Attr::ofInt(x.integer());
    if (k == "as_bool") return Attr::ofBool(x.boolean());
    if (k == "as_float") return Attr::ofFloat(x.number());
    v.error("unknown symbolic argument kind '" + std::string(k) + "'");
  }

  Attr floatAttr(const J& v) {
    double d = v.number();
    if (std::isinf(d)) return Attr::ofSpecialFloat(d > 0 ? "inf" : "-inf");
    if (std::isnan(d)) return Attr::ofSpecialFloat("nan");
    return Attr::ofFloat(d);
  }

  Attr argument(Scope& sc, const J& arg, int depth) {
    auto [k, v] = arg.unionKey();
    if (k == "as_none") return Attr::none();
    if (k == "as_tensor") return Attr::ofValue(lookup(sc, v.at("name").str(), "tensor"));
    if (k == "as_tensors") {
      std::vector<Attr> items;
      for (const J& t : v.array()) items.push_back(Attr::ofValue(lookup(sc, t.at("name").str(), "tensor")));
      return Attr::ofList(std::move(items));
    }
    if (k == "as_optional_tensor") {
      auto [ok, ov] = v.unionKey();
      if (ok == "as_none") return Attr::none();
      return Attr::ofValue(lookup(sc, ov.at("name").str(), "tensor"));
    }
    if (k == "as_optional_tensors") {
      std::vector<Attr> items;
      for (const J& t : v.array()) {
        auto [ok, ov] = t.unionKey();
        items.push_back(ok == "as_none" ? Attr::none() : Attr::ofValue(lookup(sc, ov.at("name").str(), "tensor")));
      }
      return Attr::ofList(std::move(items));
    }
    if (k == "as_int") return Attr::ofInt(v.integer());
    if (k == "as_ints") {
      std::vector<Attr> items;
      for (const J& x : v.array()) items.push_back(Attr::ofInt(x.integer()));
      return Attr::ofList(std::move(items));
    }
    if (k == "as_float") return floatAttr(v);
    if (k == "as_floats") {
      std::vector<Attr> items;
      for (const J& x : v.array()) items.push_back(floatAttr(x));
      return Attr::ofList(std::move(items));
    }
    if (k == "as_bool") return Attr::ofBool(v.boolean());
    if (k == "as_bools") {
      std::vector<Attr> items;
      for (const J& x : v.array()) items.push_back(Attr::ofBool(x.boolean()));
      return Attr::ofList(std::move(items));
    }
    if (k == "as_string") return Attr::ofString(std::string(v.str()));
    if (k == "as_strings") {
      std::vector<Attr> items;
      for (const J& x : v.array()) items.push_back(Attr::ofString(std::string(x.str())));
      return Attr::ofList(std::move(items));
    }
    if (k == "as_sym_int") return symArg(sc, v, "symint");
    if (k == "as_sym_bool") return symArg(sc, v, "symbool");
    if (k == "as_sym_float") return symArg(sc, v, "symfloat");
    if (k == "as_sym_ints" || k == "as_sym_bools" || k == "as_sym_floats") {
      std::vector<Attr> items;
      for (const J& x : v.array()) items.push_back(symArg(sc, x, "symbolic value"));
      return Attr::ofList(std::move(items));
    }
    if (k == "as_scalar_type") return Attr::ofDType(dtypeFrom(v));
    if (k == "as_memory_format") {
      Attr a;
      a.kind = Attr::Kind::MemoryFormat;
      int64_t m = v.isString() ? 0 : v.integer();
      a.memory_format = m >= 1 && m <= 4 ? static_cast<MemoryFormat>(m) : MemoryFormat::Unspecified;
      return a;
    }
    if (k == "as_layout") {
      Attr a;
      a.kind = Attr::Kind::Layout;
      int64_t l = v.isString() ? 7 : v.integer();
      a.layout = l == 7 ? Layout::Strided : l == 1 ? Layout::SparseCoo : l == 2 ? Layout::SparseCsr : Layout::Other;
      return a;
    }
    if (k == "as_device") {
      Device d;
      d.type = std::string(v.at("type").str());
      if (!isKnownDeviceType(d.type)) arg.error("unknown device type '" + d.type.substr(0, 200) + "'");
      if (auto idx = v.opt("index")) d.index = static_cast<int>(idx->integer());
      return Attr::ofDevice(d);
    }
    if (k == "as_operator") {
      std::string op = stripTorchOps(v.str());
      if (!isValidTarget(op)) arg.error("invalid operator reference '" + op.substr(0, 200) + "'");
      return Attr::ofOp(op);
    }
    if (k == "as_graph") {
      if (depth >= kMaxGraphDepth) arg.error("higher-order op bodies nested too deeply");
      std::string name(v.at("name").str());
      if (!isIdentifier(name)) arg.error("subgraph name '" + name.substr(0, 200) + "' is not an identifier");
      Graph* sub = module_->addGraph(name);
      int index = static_cast<int>(module_->graphs().size()) - 1;
      Ctx saved = ctx_;
      ctx_ = Ctx{base_ctx_ + ": subgraph " + name, ""};
      importGraph(v.at("graph"), sub, depth + 1);
      ctx_ = saved;
      return Attr::ofGraph(index);
    }
    if (k == "as_custom_obj") return Attr::ofValue(lookup(sc, v.at("name").str(), "custom object"));
    if (k == "as_int_lists") {
      std::vector<Attr> items;
      for (const J& l : v.array()) {
        std::vector<Attr> inner;
        for (const J& x : l.array()) inner.push_back(Attr::ofInt(x.integer()));
        items.push_back(Attr::ofList(std::move(inner)));
      }
      return Attr::ofList(std::move(items));
    }
    if (k == "as_complex") return Attr::ofOpaque("complex", simdjson::to_string(v.raw()));
    // Kept, never dropped: anything newer than this importer knows.
    return Attr::ofOpaque(std::string(k), simdjson::to_string(v.raw()).substr(0, 4096));
  }

  // Defines the values an Argument in an output (or graph input) position names.
  void defineOutputs(Scope& sc, const J& arg, Node* n, std::vector<std::pair<ValueKind, std::string>>& slots) {
    auto [k, v] = arg.unionKey();
    (void)n;
    if (k == "as_none") {
      slots.push_back({ValueKind::Tensor, ""});
    } else if (k == "as_tensor") {
      slots.push_back({ValueKind::Tensor, std::string(v.at("name").str())});
    } else if (k == "as_tensors") {
      for (const J& t : v.array()) slots.push_back({ValueKind::Tensor, std::string(t.at("name").str())});
    } else if (k == "as_optional_tensors") {
      for (const J& t : v.array()) {
        auto [ok, ov] = t.unionKey();
        slots.push_back({ValueKind::Tensor, ok == "as_none" ? "" : std::string(ov.at("name").str())});
      }
    } else if (k == "as_sym_int" || k == "as_sym_bool" || k == "as_sym_float") {
      ValueKind kind = k == "as_sym_int" ? ValueKind::SymInt : k == "as_sym_bool" ? ValueKind::SymBool : ValueKind::SymFloat;
      auto [sk, sv] = v.unionKey();
      slots.push_back({kind, sk == "as_name" ? std::string(sv.str()) : ""});
    } else if (k == "as_sym_ints" || k == "as_sym_bools" || k == "as_sym_floats") {
      ValueKind kind = k == "as_sym_ints" ? ValueKind::SymInt : k == "as_sym_bools" ? ValueKind::SymBool : ValueKind::SymFloat;
      for (const J& x : v.array()) {
        auto [sk, sv] = x.unionKey();
        slots.push_back({kind, sk == "as_name" ? std::string(sv.str()) : ""});
      }
    } else if (k == "as_custom_obj") {
      slots.push_back({ValueKind::Opaque, std::string(v.at("name").str())});
    } else if (k == "as_int" || k == "as_float" || k == "as_bool" || k == "as_string") {
      slots.push_back({ValueKind::Tensor, ""});  // constant returns: nothing to define
    } else {
      arg.error("unsupported output kind '" + std::string(k) + "'");
    }
    (void)sc;
  }

  void importGraph(const J& graph, Graph* g, int depth) {
    Scope sc{graph, {}, indexTable(graph.opt("tensor_values")), indexTable(graph.opt("sym_int_values")),
             indexTable(graph.opt("sym_bool_values")), indexTable(graph.opt("sym_float_values")),
             graph.opt("tensor_values").has_value()};
    sc.values.reserve(sc.tensor_values.size() + sc.sym_int_values.size() + 16);
    for (const J& in : graph.at("inputs").array()) {
      std::vector<std::pair<ValueKind, std::string>> slots;
      auto [k, v] = in.unionKey();
      if (k == "as_int" || k == "as_float" || k == "as_bool" || k == "as_string" || k == "as_none") {
        // Constant inputs (constant_input specs): represented as a user input without value.
        Value* val = g->addInput(ValueKind::Opaque, "const_input");
        val->opaque_type = std::string(k);
        continue;
      }
      defineOutputs(sc, in, nullptr, slots);
      for (const auto& [kind, name] : slots) {
        if (name.empty()) continue;
        if (sc.values.count(name)) fail("{}: graph input '{}' defined twice", ctx_.str(), name);
        Value* val = g->addInput(kind, name);
        describe(sc, val, kind, name);
        sc.values[name] = val;
      }
    }
    for (const J& node : graph.at("nodes").array()) {
      std::string target = stripTorchOps(node.at("target").str());
      std::string name = node.opt("name") ? std::string(node.at("name").str()) : std::string();
      ctx_.node = name.empty() ? target : name;
      if (!isValidTarget(target)) fail("{}: invalid op target '{}'", ctx_.str(), target.substr(0, 200));
      std::vector<Arg> args;
      for (const J& na : node.at("inputs").array()) {
        Arg a;
        a.name = na.opt("name") ? std::string(na.at("name").str()) : std::string();
        if (!a.name.empty() && !isIdentifier(a.name)) na.error("argument name '" + a.name.substr(0, 200) + "' is not an identifier");
        a.keyword = na.opt("kind") && na.at("kind").integer() == 2;
        a.value = argument(sc, na.at("arg"), depth);
        args.push_back(std::move(a));
      }
      std::vector<std::pair<ValueKind, std::string>> slots;
      for (const J& out : node.at("outputs").array()) defineOutputs(sc, out, nullptr, slots);
      NodeKind kind = NodeKind::Op;
      if (target.rfind("higher_order.", 0) == 0) kind = NodeKind::Hop;
      else if (target.rfind("_operator.", 0) == 0 || target.rfind("math.", 0) == 0 || target.rfind("torch.sym", 0) == 0 ||
               target.rfind("builtins.", 0) == 0)
        kind = NodeKind::SymPy;
      if (name.empty()) {
        for (const auto& s : slots)
          if (!s.second.empty()) {
            name = s.second;
            break;
          }
        if (name.empty()) name = "node";
      }
      Node* n = g->createNode(target, kind, std::move(args), slots.size(), nullptr, name);
      for (size_t i = 0; i < slots.size(); ++i) {
        const auto& [vk, vname] = slots[i];
        if (vname.empty()) continue;
        if (sc.values.count(vname)) fail("{}: value '{}' defined twice", ctx_.str(), vname);
        Value* v = n->setOutput(i, vk);
        describe(sc, v, vk, vname);
        sc.values[vname] = v;
      }
      if (auto md = node.opt("metadata")) {
        for (auto& [mk, mv] : md->items()) {
          if (!mv.isString()) continue;
          if (mk == "stack_trace" || mk == "nn_module_stack" || mk == "source_fn_stack" || mk == "torch_fn")
            n->meta[std::string(mk)] = std::string(mv.str());
        }
        auto it = n->meta.find("stack_trace");
        if (it != n->meta.end()) n->loc = locationFromStackTrace(it->second);
      }
      ctx_.node.clear();
    }
    for (const J& out : graph.at("outputs").array()) {
      auto [k, v] = out.unionKey();
      if (k == "as_tensor") {
        g->addOutput(lookup(sc, v.at("name").str(), "tensor"));
      } else if (k == "as_sym_int" || k == "as_sym_bool" || k == "as_sym_float") {
        Attr a = symArg(sc, v, "symbolic value");
        if (a.isValue()) g->addOutput(a.value);
        else g->addConstantOutput(a);
      } else if (k == "as_tensors") {
        for (const J& t : v.array()) g->addOutput(lookup(sc, t.at("name").str(), "tensor"));
      } else if (k == "as_none") {
        g->addConstantOutput(Attr::none());
      } else {
        g->addConstantOutput(argument(sc, out, depth));
      }
    }
  }

  // Last frame of a stack trace: `File "demo/m.py", line 43, in forward\n    code`.
  static SourceLoc locationFromStackTrace(const std::string& st) {
    SourceLoc loc;
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
      if (a != std::string::npos) loc.code = st.substr(a, b == std::string::npos ? std::string::npos : b - a);
    }
    return loc;
  }

  void applySignature(const J& sig, Graph* g) {
    auto specs = sig.opt("input_specs");
    if (specs) {
      auto list = specs->array();
      // Inputs are listed in the same order as graph.inputs (constants included).
      size_t n = std::min(list.size(), g->inputs().size());
      for (size_t i = 0; i < n; ++i) {
        auto [k, v] = list[i].unionKey();
        InputKind kind = InputKind::UserInput;
        std::string target;
        if (k == "parameter") {
          kind = InputKind::Parameter;
          target = std::string(v.at("parameter_name").str());
        } else if (k == "buffer") {
          kind = InputKind::Buffer;
          target = std::string(v.at("buffer_name").str());
        } else if (k == "tensor_constant") {
          kind = InputKind::ConstantTensor;
          target = std::string(v.at("tensor_constant_name").str());
        } else if (k == "custom_obj") {
          kind = InputKind::CustomObj;
          if (auto cn = v.opt("custom_obj_name")) target = std::string(cn->str());
        } else if (k == "token") {
          kind = InputKind::Token;
        }
        setInputRole(g, i, kind, target);
      }
    }
    if (auto os = sig.opt("output_specs")) {
      auto list = os->array();
      size_t n = std::min(list.size(), g->outputs().size());
      for (size_t i = 0; i < n; ++i) {
        auto [k, v] = list[i].unionKey();
        OutputKind kind = OutputKind::UserOutput;
        std::string target;
        if (k == "buffer_mutation") {
          kind = OutputKind::BufferMutation;
          target = std::string(v.at("buffer_name").str());
        } else if (k == "user_input_mutation") {
          kind = OutputKind::UserInputMutation;
          target = std::string(v.at("user_input_name").str());
        } else if (k == "loss_output") {
          kind = OutputKind::LossOutput;
        } else if (k != "user_output") {
          kind = OutputKind::Other;
        }
        setOutputRole(g, i, kind, target);
      }
    }
  }

  static void setInputRole(Graph* g, size_t i, InputKind kind, const std::string& target) {
    g->setInputRole(i, kind, target);
  }
  static void setOutputRole(Graph* g, size_t i, OutputKind kind, const std::string& target) {
    g->setOutputRole(i, kind, target);
  }

  void finishProducer() {
    // Training IR keeps mutating ops and non-core ops (aten.linear, to.dtype, ...).
    static const std::set<std::string> kNonCore = {
        "aten.linear.default", "aten.to.dtype", "aten.to.dtype_layout", "aten.empty_like.default",
        "aten.scaled_dot_product_attention.default", "aten.dropout.default", "aten.layer_norm.default",
        "aten.matmul.default", "aten.contiguous.default", "aten.silu.default", "aten.rms_norm.default",
    };
    std::map<std::string, OpSchema, std::less<>> cache;
    bool functional = true, non_core = false;
    for (const auto& gp : module_->graphs()) {
      for (const auto& np : gp->nodes()) {
        if (kNonCore.count(np->target)) non_core = true;
        if (np->kind != NodeKind::Op) continue;
        const OpSchema* s = lookupSchema(module_->op_schemas, np->target, &cache);
        if ((s && !s->mutableArgs().empty()) || (!s && np->numOutputs() == 0)) functional = false;
      }
    }
    module_->producer.functional = functional;
    module_->producer.stage = (functional && !non_core) ? Stage::ExportCoreAten : Stage::ExportTrainIr;
  }

  std::string path_, member_, base_ctx_;
  Ctx ctx_;
  // One parser per thread, reused across imports: its buffers (several times the input
  // size) are allocated once instead of page-faulted in for every file.
  static dom::parser& threadParser() {
    thread_local dom::parser parser;
    return parser;
  }
  dom::parser& parser_ = threadParser();
  std::unordered_map<std::string_view, SymExpr> expr_cache_;  // views into the parsed document
  std::unique_ptr<Module> module_;
};

// ------------------------------------------------------------------------------ archives

class ZipReader {
 public:
  ZipReader(const std::string& bytes, const std::string& path) : path_(path), archive_bytes_(bytes.size()) {
    zip_error_t err;
    zip_error_init(&err);
    src_ = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &err);
    if (!src_) {
      zip_error_fini(&err);
      fail("{}: cannot read archive", path);
    }
    za_ = zip_open_from_source(src_, ZIP_RDONLY | ZIP_CHECKCONS, &err);
    if (!za_) {
      std::string msg = zip_error_strerror(&err);
      zip_error_fini(&err);
      zip_source_free(src_);
      fail("{}: not a valid zip archive ({})", path, msg);
    }
    zip_error_fini(&err);
    zip_int64_t n = zip_get_num_entries(za_, 0);
    for (zip_int64_t i = 0; i < n; ++i) {
      const char* name = zip_get_name(za_, static_cast<zip_uint64_t>(i), 0);
      if (name) names_.emplace_back(name);
    }
  }
  ~ZipReader() {
    if (za_) zip_discard(za_);  // also frees the source
  }
  ZipReader(const ZipReader&) = delete;
  ZipReader& operator=(const ZipReader&) = delete;

  const std::vector<std::string>& names() const { return names_; }

  // The member's uncompressed size; -1 when it is missing.
  int64_t size(const std::string& member) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat(za_, member.c_str(), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE)) return -1;
    return static_cast<int64_t>(st.size);
  }

  // Reads a member whole, at most decompressedBudget(archive size) bytes: the declared size
  // is checked before anything is allocated, and data is read in bounded chunks so a member
  // that lies about its size cannot make the reader allocate more than it really holds.
  // libzip checks the member's CRC-32 when a read reaches the member's end.
  std::string read(const std::string& member) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat(za_, member.c_str(), 0, &st) != 0) fail("{}: {}: member missing", path_, member);
    if (!(st.valid & ZIP_STAT_SIZE)) fail("{}: {}: member size unknown", path_, member);
    const size_t budget = std::min(kMaxMemberBytes, decompressedBudget(archive_bytes_));
    if (st.size > budget)
      fail("{}: {}: member declares {} bytes, more than {} for a {}-byte archive: refusing a likely zip bomb", path_,
           member, st.size, budget, archive_bytes_);
    zip_file_t* f = zip_fopen(za_, member.c_str(), 0);
    if (!f) fail("{}: {}: cannot open member ({})", path_, member, zip_strerror(za_));
    const size_t size = static_cast<size_t>(st.size);
    constexpr size_t kChunk = size_t{16} << 20;
    std::string out;
    out.reserve(std::min(size, kChunk) + 64);  // 64 bytes of parse padding
    std::string msg;
    while (out.size() < size) {
      size_t want = std::min(kChunk, size - out.size());
      size_t at = out.size();
      out.resize(at + want);
      zip_int64_t got = zip_fread(f, out.data() + at, want);
      if (got <= 0) {
        out.resize(at);
        msg = got < 0 ? zip_file_strerror(f) : "truncated member";
        break;
      }
      out.resize(at + static_cast<size_t>(got));
    }
    if (msg.empty()) {
      // The CRC-32 check happens when a read reaches the end: read once more past it.
      char extra;
      zip_int64_t more = zip_fread(f, &extra, 1);
      if (more != 0) msg = more < 0 ? zip_file_strerror(f) : "longer than its recorded size";
    }
    zip_fclose(f);
    if (!msg.empty()) fail("{}: {}: cannot read member ({})", path_, member, msg);
    out.resize(size + 64, '\0');  // zeroed padding kept as capacity
    out.resize(size);
    return out;
  }

 private:
  std::string path_;
  size_t archive_bytes_;
  zip_source_t* src_ = nullptr;
  zip_t* za_ = nullptr;
  std::vector<std::string> names_;
};

// A weight's strided view must lie inside its payload member (negative strides or sizes,
// or a view past the end, would make the interpreter read outside the bytes it loaded).
void checkWeightBounds(const WeightInfo& w, int64_t member_bytes, const std::string& where) {
  if (member_bytes < 0) return;  // a missing payload: the weight gets random values
  std::vector<int64_t> shape, stride;
  for (const auto& d : w.type.shape) shape.push_back(d.intValue());
  for (const auto& d : w.type.stride) stride.push_back(d.intValue());
  std::string what = fmt::format("{}: weight '{}'", where, w.fqn);
  // The payload holds the view's own elements from its start (the interpreter reads it so).
  int64_t need = bytesOrFail(extentOrFail(shape, stride, 0, what), dtypeBytes(w.type.dtype), what);
  if (need > member_bytes)
    fail("{}: its sizes and strides span {} bytes, its payload {} has {}", what, need, w.member, member_bytes);
}

bool endsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::unique_ptr<Module> importExportJson(std::string_view json, const std::string& path, const std::string& member,
                                         bool padded) {
  return ExportImporter(path, member).run(json, padded);
}

// Reads one tensor config of a torch.export archive (`data/weights/<model>_weights_config.json`
// or `data/constants/<model>_constants_config.json`: buffers and lifted tensor constants) into
// m.weights: each entry's dtype, sizes, strides and payload member under `dir`. An archive
// without the config has nothing to add.
void readTensorConfig(ZipReader& zip, const std::string& path, const std::string& dir, const std::string& name,
                      Module& m) {
  std::string cfg = dir + name;
  bool has_cfg = false;
  for (const auto& n : zip.names())
    if (n == cfg) has_cfg = true;
  if (!has_cfg) return;
  std::string text = zip.read(cfg);
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  Ctx ctx{path + ": " + cfg, ""};
  if (p.parse(simdjson::padded_string(text)).get(doc)) fail("{}: malformed JSON", ctx.where);
  J root_j(doc, &ctx);
  auto c = root_j.opt("config");
  if (!c) return;
  for (auto& [fqn, meta] : c->items()) {
    WeightInfo w;
    w.fqn = std::string(fqn);
    w.is_param = meta.opt("is_param") ? meta.at("is_param").boolean() : false;
    if (meta.opt("use_pickle") && meta.at("use_pickle").boolean()) continue;  // tensor subclasses: not read
    if (auto pn = meta.opt("path_name")) {
      w.archive_path = path;
      w.member = dir + std::string(pn->str());
    }
    if (auto tm = meta.opt("tensor_meta")) {
      w.type.dtype = DType::DTYPE_UNSPECIFIED;
      auto d = tm->at("dtype");
      auto dt = d.isString() ? dtypeFromExportScalarTypeName(d.str()) : dtypeFromExportScalarType(d.integer());
      if (!dt) tm->error("unknown weight dtype");
      w.type.dtype = *dt;
      for (const J& s : tm->at("sizes").array()) {
        auto [k, v] = s.unionKey();
        if (k != "as_int") s.error("weights must have static sizes");
        w.type.shape.push_back(SymExpr::integer(v.integer()));
      }
      w.type.stride = TensorType::contiguousStrides(w.type.shape);
      if (auto st = tm->opt("strides")) {
        w.type.stride.clear();
        for (const J& s : st->array()) w.type.stride.push_back(SymExpr::integer(s.unionKey().second.integer()));
      }
    }
    if (!w.member.empty()) checkWeightBounds(w, zip.size(w.member), ctx.where);
    m.weights.push_back(std::move(w));
  }
}

// A 0-d CPU constant the archive stores (a lifted tensor constant such as a `torch.tensor(True)`
// attribute) is a lifted scalar whose value is known: it is recorded as the input's value.
void recordConstantScalars(ZipReader& zip, Module& m) {
  if (m.graphs().empty()) return;
  for (const auto& in : m.entry().inputs()) {
    if (in.kind != InputKind::ConstantTensor && in.kind != InputKind::Buffer) continue;
    if (!in.value || in.value->scalar_value || !in.value->isTensor() || in.value->type.rank() != 0 ||
        in.value->type.device.type != "cpu")
      continue;
    for (const WeightInfo& w : m.weights) {
      if (w.fqn != in.target || w.member.empty() || w.type.rank() != 0) continue;
      if (auto v = scalarFromBytes(w.type.dtype, zip.read(w.member))) in.value->scalar_value = *v;
    }
  }
}

std::unique_ptr<Module> importExportArchive(const std::string& bytes, const std::string& path) {
  ZipReader zip(bytes, path);
  // PT2 archive (torch >= 2.8): <root>/models/<name>.json, prefer "model".
  std::string model_member, root;
  for (const auto& n : zip.names()) {
    auto pos = n.find("/models/");
    if (pos != std::string::npos && endsWith(n, ".json") && n.find('/', pos + 8) == std::string::npos) {
      if (model_member.empty() || endsWith(n, "/models/model.json")) {
        model_member = n;
        root = n.substr(0, pos);
      }
    }
  }
  if (model_member.empty()) {
    for (const auto& n : zip.names())
      if (n == "serialized_exported_program.json" || endsWith(n, "/serialized_exported_program.json")) model_member = n;
  }
  if (model_member.empty()) {
    bool pt2 = false;
    for (const auto& n : zip.names())
      if (endsWith(n, "/archive_format")) pt2 = true;
    fail("{}: {}", path,
         pt2 ? "PT2 archive without a models/<name>.json member (AOTInductor package or damaged archive?)"
             : "zip archive is not a torch.export archive (no models/model.json or serialized_exported_program.json)");
  }
  std::string json = zip.read(model_member);
  auto m = importExportJson(json, path, model_member, /*padded=*/true);
  // Weight and constant metadata (payloads stay in the archive; fxfuse reads them lazily).
  if (!root.empty()) {
    std::string stem = model_member.substr(model_member.rfind('/') + 1);
    stem = stem.substr(0, stem.size() - 5);
    readTensorConfig(zip, path, root + "/data/weights/", stem + "_weights_config.json", *m);
    readTensorConfig(zip, path, root + "/data/constants/", stem + "_constants_config.json", *m);
    recordConstantScalars(zip, *m);
  }
  return m;
}

}  // namespace fxfuse::ir
