// IR → torch.export PT2 archive (ExportedProgram JSON + carried-over weights).
//
// Values are written under their IR names (made unique and identifier-safe per graph);
// every tensor gets a `tensor_values` entry, every symbolic value a `sym_*_values` entry
// with its expression in sympy `srepr` form. Op nodes list their arguments in schema
// order (positional until the first omitted argument, keyword after it and for
// keyword-only arguments), their outputs one per schema return. fxfuse ops return the
// dtypes their torch reference implementations return (naturalDType below, the contract
// with tools/fxfuse_torch); where the IR value has a narrower dtype a `_to_copy` is
// written after the op, which rounds exactly once like the IR op does.
#include "ir/pt2_writer.h"

#include <zip.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <list>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "ir/io.h"
#include "ir/op_schema.h"
#include "ir/status.h"
#include "ir/torch_save.h"

namespace fxfuse::ir {

namespace {

using json = nlohmann::ordered_json;

// Newest schema version fxfuse reads (torch 2.11 writes 8.17); used when the input was
// not a torch.export program.
constexpr int kDefaultSchemaMajor = 8;
constexpr int kDefaultSchemaMinor = 17;
constexpr int kLayoutStrided = 7;
constexpr int kArgPositional = 1;
constexpr int kArgKeyword = 2;

// ------------------------------------------------------------------ sympy srepr

std::string symbolRepr(const std::string& name) {
  // Backed sizes (s*) are positive integers, unbacked ones (u*) integers, as torch makes them.
  if (!name.empty() && name[0] == 'u') return "Symbol('" + name + "', integer=True)";
  return "Symbol('" + name + "', integer=True, positive=True)";
}

std::string srepr(const SymExpr& e) {
  using K = SymExpr::Kind;
  auto call = [&](const std::string& fn) {
    std::string s = fn + "(";
    for (size_t i = 0; i < e.args().size(); ++i) s += (i ? ", " : "") + srepr(e.args()[i]);
    return s + ")";
  };
  switch (e.kind()) {
    case K::Int: return "Integer(" + std::to_string(e.intValue()) + ")";
    case K::Real: return fmt::format("Float('{:.17g}', precision=53)", e.realValue());
    case K::Bool: return e.boolValue() ? "true" : "false";
    case K::Sym: return symbolRepr(e.name());
    case K::Add: return call("Add");
    case K::Mul: return call("Mul");
    case K::FloorDiv: return call("FloorDiv");
    case K::Mod: return call("Mod");
    case K::Pow: return call("Pow");
    case K::Min: return call("Min");
    case K::Max: return call("Max");
    case K::CeilDiv: return call("CeilDiv");
    case K::TrueDiv: return call("IntTrueDiv");
    case K::Eq: return call("Eq");
    case K::Ne: return call("Ne");
    case K::Lt: return call("StrictLessThan");
    case K::Le: return call("LessThan");
    case K::Gt: return call("StrictGreaterThan");
    case K::Ge: return call("GreaterThan");
    case K::And: return call("And");
    case K::Or: return call("Or");
    case K::Not: return call("Not");
    case K::Ite: return call("Piecewise");
    case K::Opaque: return call(e.name());
  }
  return "Integer(0)";
}

// ------------------------------------------------------------------ dtypes

DType promoteFloat(DType a, DType b) {
  if (a == b || b == DType::DTYPE_UNSPECIFIED) return a;
  if (a == DType::DTYPE_UNSPECIFIED) return b;
  if (a == DType::F64 || b == DType::F64) return DType::F64;
  return DType::F32;  // f32 with anything 16-bit, or f16 with bf16
}

std::string bareOp(const std::string& target) {
  const std::string suffix = ".default";
  if (target.size() > suffix.size() && target.compare(target.size() - suffix.size(), suffix.size(), suffix) == 0)
    return target.substr(0, target.size() - suffix.size());
  return target;
}

DType tensorArgDType(const Node& n, const char* name) {
  const Attr* a = n.arg(name);
  return a && a->isValue() && a->value->isTensor() ? a->value->type.dtype : DType::DTYPE_UNSPECIFIED;
}

// The dtype the fxfuse op's torch reference implementation returns in output `slot`
// (tools/fxfuse_torch/fxfuse_torch/reference.py implements the same rules).
DType naturalDType(const Node& n, size_t slot) {
  const std::string op = bareOp(n.target);
  auto dt = [&](const char* name) { return tensorArgDType(n, name); };
  auto normDType = [&](DType fallback) {
    const Attr* a = n.arg("norm_dtype");
    return a && a->kind == Attr::Kind::DType ? a->dtype : fallback;
  };
  auto normOut = [&](DType norm) { return dt("weight") == DType::DTYPE_UNSPECIFIED ? norm : promoteFloat(norm, dt("weight")); };
  DType residual_or_input = dt("residual") != DType::DTYPE_UNSPECIFIED ? dt("residual") : dt("input");
  if (op == "fxfuse.rms_norm") return normOut(normDType(dt("input")));
  if (op == "fxfuse.fused_add_rms_norm") return slot == 0 ? normOut(normDType(dt("residual"))) : dt("residual");
  if (op == "fxfuse.quant_fp8" || op == "fxfuse.rms_norm_quant") return slot == 0 ? DType::F8E4M3FN : DType::F32;
  if (op == "fxfuse.fused_add_rms_norm_quant")
    return slot == 0 ? DType::F8E4M3FN : slot == 1 ? dt("residual") : DType::F32;
  if (op == "fxfuse.silu_and_mul") return promoteFloat(dt("input"), dt("up"));
  if (op == "fxfuse.silu_and_mul_quant" || op == "fxfuse.attention_quant") return DType::F8E4M3FN;
  if (op == "fxfuse.attention") return dt("query");
  if (op == "fxfuse.all_reduce") return dt("input");
  if (op == "fxfuse.all_reduce_rms_norm") return slot == 0 ? normOut(normDType(residual_or_input)) : residual_or_input;
  if (op == "fxfuse.all_reduce_rms_norm_quant") return slot == 0 ? DType::F8E4M3FN : residual_or_input;
  return DType::DTYPE_UNSPECIFIED;  // not an fxfuse op: the IR dtype is what torch returns
}

// torch.export's ScalarType number of `t` (the inverse of dtypeFromExportScalarType).
std::optional<int> exportScalarType(DType t) {
  constexpr int kMaxScalarType = 64;
  for (int id = 1; id <= kMaxScalarType; ++id)
    if (dtypeFromExportScalarType(id) == t) return id;
  return std::nullopt;
}

int exportDType(DType t, const std::string& where) {
  auto id = exportScalarType(t);
  if (!id) fail("{}: dtype {} has no torch.export ScalarType number", where, std::string(dtypeName(t)));
  return *id;
}

std::string safeIdentifier(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_') ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "v_" + out;
  return out;
}

json floatJson(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return d;
}

// ------------------------------------------------------------------ one graph

class GraphWriter;

struct ArchiveContext {
  const Module& m;
  std::string out;  // output path, for messages
  Pt2WriteOptions opts;
  bool from_export = false;  // node metadata in torch.export's own spelling
  std::map<std::string, OpSchema, std::less<>> schema_cache;
  const OpSchema* schema(const std::string& target) { return lookupSchema(m.op_schemas, target, &schema_cache); }
};

class GraphWriter {
 public:
  GraphWriter(ArchiveContext& ctx, const Graph& g) : ctx_(ctx), g_(g) {}

  json run() {
    for (const auto& in : g_.inputs()) {
      define(in.value);
      inputs_.push_back(ref(in.value));
    }
    for (const auto& np : g_.nodes()) emitNode(*np);
    for (const auto& out : g_.outputs()) {
      if (out.value) outputs_.push_back(ref(out.value));
      else outputs_.push_back(argJson(out.constant, nullptr));
    }
    json g;
    g["inputs"] = inputs_;
    g["outputs"] = outputs_;
    g["nodes"] = nodes_;
    g["tensor_values"] = tensor_values_;
    g["sym_int_values"] = sym_int_values_;
    g["sym_bool_values"] = sym_bool_values_;
    g["is_single_tensor_return"] = false;
    g["custom_obj_values"] = json::object();
    g["sym_float_values"] = sym_float_values_;
    return g;
  }

  const std::string& nameOf(const Value* v) const { return names_.at(v); }

 private:
  [[noreturn]] void nodeError(const Node& n, const std::string& what) const {
    fail("{}: node {} ({}): {}", ctx_.out, n.name, n.target, what);
  }

  std::string fresh(const std::string& base) {
    std::string b = safeIdentifier(base), name = b;
    for (int i = 1; used_.count(name); ++i) name = b + "_" + std::to_string(i);
    used_.insert(name);
    return name;
  }

  json symJson(const SymExpr& e, bool hint) {
    if (e.isInt()) return {{"as_int", e.intValue()}};
    json expr = {{"expr_str", srepr(e)}};
    if (hint) {
      std::set<std::string> syms;
      e.collectSymbols(syms);
      std::map<std::string, int64_t> env;
      // torch's deserializer needs a hint for every backed symbol; a graph without one (an FX
      // text dump) gets exampleSize's.
      for (const auto& s : syms) env[s] = exampleSize(ctx_.m.symbols.find(s));
      if (auto v = e.evaluate(env)) expr["hint"] = {{"as_int", *v}};
    }
    return {{"as_expr", expr}};
  }

  json tensorMeta(const TensorType& t) {
    json sizes = json::array(), strides = json::array();
    for (const auto& s : t.shape) sizes.push_back(symJson(s, true));
    for (const auto& s : t.stride) strides.push_back(symJson(s, true));
    // Unknown devices (FX text without device annotations) are written as cuda:0, where
    // the graphs fxfuse compiles run.
    json device = {{"type", t.device.type.empty() ? "cuda" : t.device.type}};
    device["index"] = t.device.type.empty() ? json(0) : t.device.index >= 0 ? json(t.device.index) : json(nullptr);
    return {{"dtype", exportDType(t.dtype, ctx_.out)}, {"sizes", sizes},   {"requires_grad", t.requires_grad},
            {"device", device},                       {"strides", strides}, {"storage_offset", symJson(t.storage_offset, true)},
            {"layout", kLayoutStrided}};
  }

  // Registers `v` under a unique name with its metadata.
  void define(const Value* v, const std::string& base = {}) {
    std::string name = fresh(base.empty() ? (v->name.empty() ? "v" : v->name) : base);
    names_[v] = name;
    switch (v->kind) {
      case ValueKind::Tensor: tensor_values_[name] = tensorMeta(v->type); break;
      case ValueKind::SymInt:
        if (!v->sym) fail("{}: symbolic value '{}' has no expression to write", ctx_.out, v->name);
        sym_int_values_[name] = symJson(*v->sym, true);
        break;
      case ValueKind::SymBool:
        if (!v->sym) fail("{}: symbolic value '{}' has no expression to write", ctx_.out, v->name);
        sym_bool_values_[name] = v->sym->kind() == SymExpr::Kind::Bool ? json{{"as_bool", v->sym->boolValue()}}
                                                                       : json{{"as_expr", {{"expr_str", srepr(*v->sym)}}}};
        break;
      case ValueKind::SymFloat:
        if (!v->sym) fail("{}: symbolic value '{}' has no expression to write", ctx_.out, v->name);
        sym_float_values_[name] = v->sym->kind() == SymExpr::Kind::Real ? json{{"as_float", v->sym->realValue()}}
                                                                        : json{{"as_expr", {{"expr_str", srepr(*v->sym)}}}};
        break;
      case ValueKind::Opaque:
        fail("{}: value '{}' is an opaque {} (custom objects and constant inputs are not written)", ctx_.out, v->name,
             v->opaque_type);
    }
  }

  std::string defineTemp(const std::string& base, const TensorType& t) {
    std::string name = fresh(base);
    tensor_values_[name] = tensorMeta(t);
    return name;
  }

  json ref(const Value* v) const {
    const std::string& name = names_.at(v);
    switch (v->kind) {
      case ValueKind::Tensor: return {{"as_tensor", {{"name", name}}}};
      case ValueKind::SymInt: return {{"as_sym_int", {{"as_name", name}}}};
      case ValueKind::SymBool: return {{"as_sym_bool", {{"as_name", name}}}};
      case ValueKind::SymFloat: return {{"as_sym_float", {{"as_name", name}}}};
      case ValueKind::Opaque: break;
    }
    return {{"as_none", true}};
  }

  json symElement(const Attr& a, const std::string& where) const {
    if (a.isValue()) return {{"as_name", names_.at(a.value)}};
    if (auto i = a.asInt()) return {{"as_int", *i}};
    if (a.kind == Attr::Kind::Float) return {{"as_float", a.f}};
    if (a.kind == Attr::Kind::Bool) return {{"as_bool", a.b}};
    fail("{}: {}: a symbolic list element is neither a value nor a constant", ctx_.out, where);
  }

  json listJson(const Attr& a, const SchemaArg* sa) const {
    const std::string type = sa ? sa->type : "";
    bool any_value = false, any_tensor = false, any_none = false, any_float = false, any_bool = false, any_string = false;
    bool any_sym = false, any_list = false;
    for (const auto& x : a.list) {
      if (x.isValue()) {
        any_value = true;
        if (x.value->isTensor()) any_tensor = true;
        else any_sym = true;
      } else if (x.isNone()) {
        any_none = true;
      } else if (x.kind == Attr::Kind::Float || x.kind == Attr::Kind::SpecialFloat) {
        any_float = true;
      } else if (x.kind == Attr::Kind::Bool) {
        any_bool = true;
      } else if (x.kind == Attr::Kind::String) {
        any_string = true;
      } else if (x.kind == Attr::Kind::Sym && !x.asInt()) {
        any_sym = true;
      } else if (x.kind == Attr::Kind::List) {
        any_list = true;
      }
    }
    (void)any_value;
    json items = json::array();
    if (any_tensor || type.rfind("Tensor", 0) == 0) {
      bool optional = any_none || type.find("Tensor?") == 0;
      for (const auto& x : a.list) {
        if (x.isValue()) items.push_back(optional ? json{{"as_tensor", {{"name", names_.at(x.value)}}}} : json{{"name", names_.at(x.value)}});
        else items.push_back({{"as_none", true}});
      }
      return {{optional ? "as_optional_tensors" : "as_tensors", items}};
    }
    if (any_list) {
      for (const auto& x : a.list) {
        auto ints = x.asIntList();
        if (!ints) fail("{}: nested list argument that is not a list of int lists", ctx_.out);
        items.push_back(*ints);
      }
      return {{"as_int_lists", items}};
    }
    if (any_sym) {
      const char* key = type.rfind("SymFloat", 0) == 0 ? "as_sym_floats" : type.rfind("SymBool", 0) == 0 ? "as_sym_bools" : "as_sym_ints";
      for (const auto& x : a.list) items.push_back(symElement(x, "list argument"));
      return {{key, items}};
    }
    if (any_float || type.rfind("float", 0) == 0) {
      for (const auto& x : a.list) items.push_back(floatJson(x.asDouble().value_or(0.0)));
      return {{"as_floats", items}};
    }
    if (any_bool || type.rfind("bool", 0) == 0) {
      for (const auto& x : a.list) items.push_back(x.b);
      return {{"as_bools", items}};
    }
    if (any_string || type.rfind("str", 0) == 0) {
      for (const auto& x : a.list) items.push_back(x.s);
      return {{"as_strings", items}};
    }
    for (const auto& x : a.list) items.push_back(x.asInt().value_or(0));
    return {{"as_ints", items}};
  }

 public:
  // One argument value. `sa` (may be null) is the schema argument it binds to.
  json argJson(const Attr& a, const SchemaArg* sa) {
    switch (a.kind) {
      case Attr::Kind::None: return {{"as_none", true}};
      case Attr::Kind::Value: return ref(a.value);
      case Attr::Kind::Int:
        if (sa && (sa->type == "float" || sa->type == "float?")) return {{"as_float", static_cast<double>(a.i)}};
        return {{"as_int", a.i}};
      case Attr::Kind::Float: return {{"as_float", floatJson(a.f)}};
      case Attr::Kind::SpecialFloat: return {{"as_float", floatJson(*a.asDouble())}};
      case Attr::Kind::Bool: return {{"as_bool", a.b}};
      case Attr::Kind::String: return {{"as_string", a.s}};
      case Attr::Kind::DType: return {{"as_scalar_type", exportDType(a.dtype, ctx_.out)}};
      case Attr::Kind::Device: {
        json d = {{"type", a.device.type}};
        d["index"] = a.device.index >= 0 ? json(a.device.index) : json(nullptr);
        return {{"as_device", d}};
      }
      case Attr::Kind::Layout: {
        int l = a.layout == Layout::SparseCoo ? 1 : a.layout == Layout::SparseCsr ? 2 : kLayoutStrided;
        return {{"as_layout", l}};
      }
      case Attr::Kind::MemoryFormat: return {{"as_memory_format", static_cast<int>(a.memory_format)}};
      case Attr::Kind::Sym:
        if (auto i = a.asInt()) return {{"as_int", *i}};
        fail("{}: a symbolic expression argument '{}' has no value to refer to", ctx_.out, a.sym ? a.sym->str() : "?");
      case Attr::Kind::List: return listJson(a, sa);
      case Attr::Kind::Op: return {{"as_operator", "torch.ops." + a.s}};
      case Attr::Kind::Graph: {
        const Graph& sub = *ctx_.m.graphs().at(static_cast<size_t>(a.graph));
        GraphWriter w(ctx_, sub);
        return {{"as_graph", {{"name", sub.name}, {"graph", w.run()}}}};
      }
      case Attr::Kind::Opaque: {
        json parsed = json::parse(a.s2, nullptr, /*allow_exceptions=*/false);
        if (parsed.is_discarded()) fail("{}: opaque argument of kind '{}' cannot be written back", ctx_.out, a.s);
        return {{a.s, parsed}};
      }
    }
    return {{"as_none", true}};
  }

 private:
  json metadataOf(const Node& n) const {
    json md = json::object();
    static const char* kKeys[] = {"stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn"};
    for (const char* k : kKeys) {
      auto it = n.meta.find(k);
      if (it == n.meta.end()) continue;
      // Only torch.export's own spellings parse back; other producers keep the stack trace.
      if (std::string(k) != "stack_trace" && !ctx_.from_export) continue;
      md[k] = it->second;
    }
    return md;
  }

  json outputRef(const Value* v) const { return v ? ref(v) : json{{"as_none", true}}; }

  // Arguments in schema order: positional up to the first omitted argument.
  // `from` maps a schema argument to the node argument it is read from when the names differ.
  json schemaInputs(const Node& n, const OpSchema& s, const std::map<std::string, std::string>& from = {}) {
    json inputs = json::array();
    bool positional = true;
    std::set<std::string> seen;
    for (const auto& sa : s.args) {
      const Attr* a = nullptr;
      auto f = from.find(sa.name);
      const std::string& want = f == from.end() ? sa.name : f->second;
      for (const auto& arg : n.args())
        if (arg.name == want) a = &arg.value;
      if (!a) {
        positional = false;
        continue;
      }
      seen.insert(want);
      bool pos = positional && !sa.kwarg_only;
      inputs.push_back({{"name", sa.name}, {"arg", argJson(*a, &sa)}, {"kind", pos ? kArgPositional : kArgKeyword}});
    }
    for (const auto& arg : n.args())
      if (!seen.count(arg.name)) nodeError(n, "argument '" + arg.name + "' is not in the op's schema");
    return inputs;
  }

  json rawInputs(const Node& n) {
    json inputs = json::array();
    for (const auto& arg : n.args()) {
      bool pos = arg.name.empty() || arg.name == "_mutable_op" || !arg.keyword;
      std::string name = arg.name == "_mutable_op" ? "" : arg.name;
      if (n.kind == NodeKind::Hop) pos = name.empty();
      inputs.push_back({{"name", name}, {"arg", argJson(arg.value, nullptr)}, {"kind", pos ? kArgPositional : kArgKeyword}});
    }
    return inputs;
  }

  std::string serializedTarget(const Node& n) const {
    if (n.kind == NodeKind::SymPy) {
      if (n.target.rfind("_operator.", 0) == 0 || n.target.rfind("torch.", 0) == 0) return n.target;
      fail("{}: node {} ({}): this Python-level call has no torch.export spelling", ctx_.out, n.name, n.target);
    }
    if (n.target.rfind("#", 0) == 0) return n.target;
    return "torch.ops." + n.target;
  }

  void pushNode(const std::string& target, json inputs, json outputs, json metadata, const std::string& name,
                bool hop) {
    json node = {{"target", target}, {"inputs", std::move(inputs)}, {"outputs", std::move(outputs)},
                 {"metadata", std::move(metadata)}};
    node["is_hop_single_tensor_return"] = hop ? json(false) : json(nullptr);
    node["name"] = name;
    nodes_.push_back(std::move(node));
  }

  // The type of element `i` of a split: the input's type with the split dimension's size
  // (a view: same strides, offset past the elements before it).
  TensorType unusedSplitType(const Node& n, size_t i) const {
    const Value* self = n.input("self");
    const Attr* sizes = n.arg("split_sizes");
    if (!self || !sizes || sizes->kind != Attr::Kind::List || i >= sizes->list.size())
      nodeError(n, "an unused element of a Tensor[] result has no type to write");
    const Attr* dim_attr = n.arg("dim");
    int64_t dim = dim_attr && dim_attr->asInt() ? *dim_attr->asInt() : 0;
    if (dim < 0) dim += static_cast<int64_t>(self->type.rank());
    if (dim < 0 || dim >= static_cast<int64_t>(self->type.rank())) nodeError(n, "split dimension out of range");
    auto sizeOf = [&](size_t k) -> SymExpr {
      if (auto e = sizes->list[k].asSize()) return *e;
      nodeError(n, "split size of an unused element is not known");
    };
    TensorType t = self->type;
    SymExpr offset = t.storage_offset;
    for (size_t k = 0; k < i; ++k) offset = offset + sizeOf(k) * t.stride[static_cast<size_t>(dim)];
    t.shape[static_cast<size_t>(dim)] = sizeOf(i);
    t.storage_offset = offset;
    return t;
  }

  // Outputs of an op with a schema: one per return; a single `Tensor[]` return is a list.
  json schemaOutputs(const Node& n, const OpSchema* s, const std::vector<std::string>& slot_names) {
    auto slot = [&](size_t i) -> json {
      const Value* v = n.output(i);
      if (!v) return {{"as_none", true}};
      if (!slot_names.empty() && !slot_names[i].empty()) return {{"as_tensor", {{"name", slot_names[i]}}}};
      return ref(v);
    };
    json outs = json::array();
    if (s && s->returns.size() == 1 && s->returns[0].is_list && s->returns[0].is_tensor) {
      json list = json::array();
      for (size_t i = 0; i < n.numOutputs(); ++i) {
        if (n.output(i)) {
          list.push_back({{"name", names_.at(n.output(i))}});
          continue;
        }
        // torch names an unused element `<node>_unused_<i>` and still describes it.
        std::string name = defineTemp(n.name + "_unused_" + std::to_string(i), unusedSplitType(n, i));
        list.push_back({{"name", name}});
      }
      outs.push_back({{"as_tensors", list}});
      return outs;
    }
    if (s && s->returns.size() != n.numOutputs())
      nodeError(n, fmt::format("{} outputs for a schema with {} returns", n.numOutputs(), s->returns.size()));
    for (size_t i = 0; i < n.numOutputs(); ++i) outs.push_back(slot(i));
    return outs;
  }

  // Whether torch can view the input of this aten.view as the output's shape without a copy:
  // a contiguous input always can; otherwise only when the output keeps the input's shape.
  static bool viewable(const Node& n) {
    const Value* self = n.input("self");
    const Value* out = n.output(0);
    if (!self || !out || !self->isTensor()) return true;
    if (self->type.stride == TensorType::contiguousStrides(self->type.shape)) return true;
    return self->type.shape == out->type.shape;
  }

  void emitNode(const Node& n) {
    for (size_t i = 0; i < n.numOutputs(); ++i)
      if (n.output(i)) define(n.output(i));
    if (ctx_.opts.vllm_op_names && emitVllm(n)) return;
    const OpSchema* s = n.kind == NodeKind::Op || n.kind == NodeKind::Fxfuse ? ctx_.schema(n.target) : nullptr;
    std::string target = serializedTarget(n);
    std::map<std::string, std::string> from;
    if (n.target == "aten.view.default" && !viewable(n)) {
      // fxfuse's passes reason about values, so a view may now read a value whose strides
      // torch cannot view (a copy the passes removed as a no-op); reshape copies there.
      s = ctx_.schema("aten.reshape.default");
      target = "torch.ops.aten.reshape.default";
      from = {{"shape", "size"}};
    }
    json inputs = s ? schemaInputs(n, *s, from) : rawInputs(n);
    json metadata = metadataOf(n);
    if (!from.empty()) metadata["fxfuse_view_as_reshape"] = "true";  // counted by tests/pt2
    // A single-result node carries its result's name (as torch writes it); a node of several
    // results, a Tensor[] result or a higher-order op (its results are a tuple even when there
    // is one) gets a name of its own: torch names the call node after it and each result's
    // getitem after the result, so sharing one would define a name twice.
    bool list_return = s && s->returns.size() == 1 && s->returns[0].is_list;
    bool single = n.kind != NodeKind::Hop && n.numOutputs() == 1 && !list_return && n.output(0) &&
                  names_.count(n.output(0));
    std::string name = single ? names_.at(n.output(0)) : fresh(n.name.empty() ? n.target : n.name);
    if (n.kind == NodeKind::SymPy) {
      pushNode(target, inputs, json::array({outputRef(n.output(0))}), metadata, name, false);
      return;
    }
    if (n.kind == NodeKind::Hop) {
      json outs = json::array();
      for (size_t i = 0; i < n.numOutputs(); ++i) outs.push_back(outputRef(n.output(i)));
      pushNode(target, inputs, outs, metadata, name, true);
      return;
    }
    // fxfuse ops return their natural dtype; a narrower IR dtype gets one exact rounding after.
    std::vector<std::string> slot_names(n.numOutputs());
    std::vector<std::pair<size_t, std::string>> casts;
    if (n.kind == NodeKind::Fxfuse) {
      for (size_t i = 0; i < n.numOutputs(); ++i) {
        const Value* v = n.output(i);
        if (!v || !v->isTensor()) continue;
        DType natural = naturalDType(n, i);
        if (natural == DType::DTYPE_UNSPECIFIED || natural == v->type.dtype) continue;
        if (natural != DType::F32 || !isFloating(v->type.dtype))
          nodeError(n, fmt::format("output {} is {} where the op library returns {}", i, dtypeName(v->type.dtype),
                                   dtypeName(natural)));
        TensorType t = v->type;
        t.dtype = natural;
        slot_names[i] = defineTemp(names_.at(v) + "_f32", t);
        casts.emplace_back(i, slot_names[i]);
      }
    }
    if (!slot_names.empty() && !slot_names[0].empty()) name = slot_names[0];  // the cast takes the IR name
    pushNode(target, inputs, schemaOutputs(n, s, slot_names), metadata, name, false);
    for (const auto& [i, tmp] : casts) {
      const Value* v = n.output(i);
      json in = json::array({{{"name", "self"}, {"arg", {{"as_tensor", {{"name", tmp}}}}}, {"kind", kArgPositional}},
                             {{"name", "dtype"}, {"arg", {{"as_scalar_type", exportDType(v->type.dtype, ctx_.out)}}}, {"kind", kArgKeyword}}});
      pushNode("torch.ops.aten._to_copy.default", in, json::array({ref(v)}), metadata, names_.at(v), false);
    }
  }

  // ---------------------------------------------------------------- vLLM op names

  // A SymInt argument for dimension `d` of `want`: a constant, or a sym_size of a dimension
  // of `src` with the same size.
  json dimArg(const Value* src, const SymExpr& size, const Node& n) {
    if (size.isInt()) return {{"as_int", size.intValue()}};
    for (size_t j = 0; j < src->type.rank(); ++j) {
      if (src->type.shape[j] != size) continue;
      auto key = std::make_pair(src, j);
      auto it = sym_sizes_.find(key);
      if (it == sym_sizes_.end()) {
        std::string name = fresh("sym_size_int");
        sym_int_values_[name] = symJson(size, true);
        json in = json::array({{{"name", "self"}, {"arg", ref(src)}, {"kind", kArgPositional}},
                               {{"name", "dim"}, {"arg", {{"as_int", static_cast<int64_t>(j)}}}, {"kind", kArgPositional}}});
        pushNode("torch.ops.aten.sym_size.int", in, json::array({{{"as_sym_int", {{"as_name", name}}}}}), json::object(), name,
                 false);
        it = sym_sizes_.emplace(key, name).first;
      }
      return {{"as_name", it->second}};
    }
    nodeError(n, "size " + size.str() + " of a vLLM output buffer is not a size of the input");
  }

  // `aten.empty.memory_format` of type `t` (contiguous), sizes taken from `src`.
  std::string emitEmpty(const std::string& base, TensorType t, const Value* src, const Node& n) {
    json sizes = json::array();
    bool symbolic = false;
    for (const auto& s : t.shape) {
      sizes.push_back(dimArg(src, s, n));
      symbolic |= !s.isInt();
    }
    if (!symbolic) {
      json ints = json::array();
      for (const auto& s : t.shape) ints.push_back(s.intValue());
      sizes = ints;
    }
    t.stride = TensorType::contiguousStrides(t.shape);
    t.storage_offset = SymExpr::integer(0);
    if (t.device.type.empty()) t.device = src->type.device;
    std::string name = defineTemp(base, t);
    json device = {{"type", t.device.type.empty() ? "cuda" : t.device.type}};
    device["index"] = t.device.index >= 0 ? json(t.device.index) : json(t.device.type.empty() ? json(0) : json(nullptr));
    json in = json::array({{{"name", "size"}, {"arg", {{symbolic ? "as_sym_ints" : "as_ints", sizes}}}, {"kind", kArgPositional}},
                           {{"name", "dtype"}, {"arg", {{"as_scalar_type", exportDType(t.dtype, ctx_.out)}}}, {"kind", kArgKeyword}},
                           {{"name", "device"}, {"arg", {{"as_device", device}}}, {"kind", kArgKeyword}},
                           {{"name", "pin_memory"}, {"arg", {{"as_bool", false}}}, {"kind", kArgKeyword}}});
    pushNode("torch.ops.aten.empty.memory_format", in, json::array({{{"as_tensor", {{"name", name}}}}}), json::object(), name,
             false);
    return name;
  }

  // auto_functionalized(op, **kwargs): outputs are the op's (empty) return then one tensor
  // per mutable argument, named by `mutated` (argument name → output value or null).
  void emitAutoFunctionalized(const Node& n, const std::string& vllm_target, const std::vector<std::pair<std::string, json>>& kwargs,
                              const std::map<std::string, const Value*>& mutated) {
    const OpSchema* s = ctx_.schema(vllm_target);
    if (!s) nodeError(n, "no schema for " + vllm_target);
    json inputs = json::array({{{"name", ""}, {"arg", {{"as_operator", "torch.ops." + vllm_target}}}, {"kind", kArgPositional}}});
    for (const auto& [k, v] : kwargs) inputs.push_back({{"name", k}, {"arg", v}, {"kind", kArgKeyword}});
    json outs = json::array({{{"as_none", true}}});
    for (int idx : s->mutableArgs()) {
      const std::string& an = s->args[static_cast<size_t>(idx)].name;
      auto it = mutated.find(an);
      outs.push_back(it == mutated.end() || !it->second ? json{{"as_none", true}} : ref(it->second));
    }
    pushNode("torch.ops.higher_order.auto_functionalized", inputs, outs, metadataOf(n), fresh("auto_functionalized"), true);
  }

  bool emitVllm(const Node& n) {
    const std::string op = bareOp(n.target);
    auto str = [&](const char* k) { const Attr* a = n.arg(k); return a && a->kind == Attr::Kind::String ? a->s : std::string(); };
    auto flag = [&](const char* k) { const Attr* a = n.arg(k); return a && a->kind == Attr::Kind::Bool && a->b; };
    // an absent bool takes its schema default (fused_add_rms_norm_quant: variance_of_rounded_sum=True)
    auto flagOr = [&](const char* k, bool dflt) {
      const Attr* a = n.arg(k);
      return a && a->kind == Attr::Kind::Bool ? a->b : dflt;
    };
    auto isNone = [&](const char* k) { const Attr* a = n.arg(k); return !a || a->isNone(); };
    auto intArg = [&](const char* k) { const Attr* a = n.arg(k); return a ? a->asInt().value_or(0) : 0; };
    auto tensor = [&](const char* k) -> const Value* { const Attr* a = n.arg(k); return a && a->isValue() ? a->value : nullptr; };
    const Attr* eps = n.arg("epsilon");
    bool float_eps = eps && (eps->kind == Attr::Kind::Float || eps->kind == Attr::Kind::Int);
    const Value* input = tensor("input");
    auto arg = [&](const char* k) { return argJson(*n.arg(k), nullptr); };
    auto epsJson = [&] { return json{{"as_float", eps->asDouble().value_or(0.0)}}; };
    bool norm_plain = isNone("norm_dtype") || (n.arg("norm_dtype")->kind == Attr::Kind::DType && input &&
                                                 n.arg("norm_dtype")->dtype == input->type.dtype);
    bool norm_quant_ok = input && isHalf16(input->type.dtype) && tensor("weight") && float_eps && norm_plain &&
                         intArg("group_size") == 0 && n.output(0) && n.output(0)->type.dtype == DType::F8E4M3FN;
    auto result = [&](const Value* like_src) { return emitEmpty("result", n.output(0)->type, like_src, n); };
    auto tensorRef = [&](const std::string& name) { return json{{"as_tensor", {{"name", name}}}}; };

    if ((op == "fxfuse.rms_norm_quant" || op == "fxfuse.fused_add_rms_norm_quant") && norm_quant_ok) {
      bool add = op == "fxfuse.fused_add_rms_norm_quant";
      const Value* residual_out = add ? n.output(1) : nullptr;
      const Value* scale_out = n.output(add ? 2 : 1);
      // A vLLM kernel stands in only where it rounds as the fused op does (docs/pt2-output.md):
      // the static fused-add kernel takes the variance of the rounded sum and multiplies by the
      // scale's reciprocal; the per-token kernel divides and takes the unrounded sum's.
      const bool rounded_sum = add && flagOr("variance_of_rounded_sum", true);
      if (str("kind") == "static_tensor" && !flag("divide") && isNone("scale_ub") && tensor("scale") &&
          (!add || rounded_sum)) {
        std::string r = result(input);
        std::vector<std::pair<std::string, json>> kw = {{"result", tensorRef(r)}, {"input", arg("input")}};
        if (add) kw.push_back({"residual", arg("residual")});
        kw.push_back({"weight", arg("weight")});
        kw.push_back({"scale", arg("scale")});
        kw.push_back({"epsilon", epsJson()});
        std::map<std::string, const Value*> mut = {{"result", n.output(0)}};
        if (add) mut["residual"] = residual_out;
        emitAutoFunctionalized(n, add ? "_C.fused_add_rms_norm_static_fp8_quant.default" : "_C.rms_norm_static_fp8_quant.default",
                               kw, mut);
        return true;
      }
      if (str("kind") == "dynamic_token" && scale_out && flag("divide") && !rounded_sum) {
        std::string r = result(input);
        std::string s = emitEmpty("scale", scale_out->type, input, n);
        std::vector<std::pair<std::string, json>> kw = {{"result", tensorRef(r)}, {"input", arg("input")}, {"weight", arg("weight")},
                                                        {"scale", tensorRef(s)}, {"epsilon", epsJson()},
                                                        {"scale_ub", isNone("scale_ub") ? json{{"as_none", true}} : arg("scale_ub")},
                                                        {"residual", add ? arg("residual") : json{{"as_none", true}}}};
        std::map<std::string, const Value*> mut = {{"result", n.output(0)}, {"scale", scale_out}, {"residual", residual_out}};
        emitAutoFunctionalized(n, "_C.rms_norm_dynamic_per_token_quant.default", kw, mut);
        return true;
      }
      return false;
    }
    if (op == "fxfuse.silu_and_mul_quant" && isNone("up") && input && isHalf16(input->type.dtype) && n.output(0) &&
        n.output(0)->type.dtype == DType::F8E4M3FN) {
      std::string r = result(input);
      emitAutoFunctionalized(n, "_C.silu_and_mul_quant.default",
                             {{"result", tensorRef(r)}, {"input", arg("input")}, {"scale", arg("scale")}},
                             {{"result", n.output(0)}});
      return true;
    }
    if (op == "fxfuse.attention_quant" && str("layout") == "vllm" && n.output(0)) {
      std::string out = result(tensor("query"));
      emitAutoFunctionalized(n, "vllm.unified_attention_with_output.default",
                             {{"query", arg("query")}, {"key", arg("key")}, {"value", arg("value")}, {"output", tensorRef(out)},
                              {"layer_name", {{"as_string", str("layer_name")}}}, {"output_scale", arg("output_scale")},
                              {"output_block_scale", {{"as_none", true}}}},
                             {{"output", n.output(0)}});
      return true;
    }
    return false;
  }

  ArchiveContext& ctx_;
  const Graph& g_;
  std::unordered_map<const Value*, std::string> names_;
  std::set<std::string> used_;
  std::map<std::pair<const Value*, size_t>, std::string> sym_sizes_;
  json inputs_ = json::array(), outputs_ = json::array(), nodes_ = json::array();
  json tensor_values_ = json::object(), sym_int_values_ = json::object(), sym_bool_values_ = json::object(),
       sym_float_values_ = json::object();
};

// ------------------------------------------------------------------ the program

// Every member of a zip archive in memory: (name, contents), directories left out.
std::vector<std::pair<std::string, std::string>> readZipMembers(const std::string& bytes, const std::string& path) {
  zip_error_t err;
  zip_error_init(&err);
  zip_source_t* src = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &err);
  zip_t* za = src ? zip_open_from_source(src, ZIP_RDONLY, &err) : nullptr;
  zip_error_fini(&err);
  if (!za) {
    if (src) zip_source_free(src);
    fail("{}: cannot reopen the input archive to carry its weights over", path);
  }
  std::vector<std::pair<std::string, std::string>> out;
  zip_int64_t n = zip_get_num_entries(za, 0);
  for (zip_uint64_t i = 0; i < static_cast<zip_uint64_t>(n); ++i) {
    zip_stat_t st;
    if (zip_stat_index(za, i, 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) || !(st.valid & ZIP_STAT_SIZE)) continue;
    std::string name = st.name;
    if (name.empty() || name.back() == '/') continue;
    std::string data(static_cast<size_t>(st.size), '\0');
    zip_file_t* f = zip_fopen_index(za, i, 0);
    zip_int64_t got = f && st.size ? zip_fread(f, data.data(), st.size) : 0;
    if (f) zip_fclose(f);
    if (!f || got != static_cast<zip_int64_t>(st.size)) {
      zip_discard(za);
      fail("{}: {}: cannot read member", path, name);
    }
    out.emplace_back(std::move(name), std::move(data));
  }
  zip_discard(za);
  return out;
}

struct SourceArchive {
  std::vector<std::pair<std::string, std::string>> members;
  std::string root;        // "<root>" of "<root>/models/model.json"
  std::string model_stem;  // "model"
  json program;            // the input's ExportedProgram JSON, or null
};

SourceArchive readSource(const Module& m) {
  SourceArchive src;
  const std::string& path = m.producer.source_path;
  if (path.empty() || m.producer.tool != "torch.export-json") return src;
  std::string bytes = readFile(path);
  if (bytes.size() < 4 || bytes.compare(0, 2, "PK") != 0) {
    src.program = json::parse(bytes, nullptr, false);
    if (src.program.is_discarded()) src.program = nullptr;
    return src;
  }
  src.members = readZipMembers(bytes, path);
  for (const auto& [name, data] : src.members) {
    auto pos = name.find("/models/");
    if (pos == std::string::npos || name.size() < 5 || name.compare(name.size() - 5, 5, ".json") != 0) continue;
    if (!src.root.empty() && name.find("/models/model.json") == std::string::npos) continue;
    src.root = name.substr(0, pos);
    src.model_stem = name.substr(pos + 8, name.size() - pos - 8 - 5);
    src.program = json::parse(data, nullptr, false);
    if (src.program.is_discarded()) fail("{}: {}: malformed JSON", path, name);
  }
  return src;
}

json leafSpec() { return {{"type", nullptr}, {"context", nullptr}, {"children_spec", json::array()}}; }

json tupleSpec(size_t n) {
  json children = json::array();
  for (size_t i = 0; i < n; ++i) children.push_back(leafSpec());
  return {{"type", "builtins.tuple"}, {"context", "null"}, {"children_spec", children}};
}

// module_call_graph for a program that did not come from torch.export: forward(*inputs)
// returning a tuple of the outputs.
json defaultModuleCallGraph(const Graph& g, const GraphWriter& w) {
  size_t n_in = 0, n_out = 0;
  json names = json::array();
  for (const auto& in : g.inputs())
    if (in.kind == InputKind::UserInput) {
      ++n_in;
      names.push_back(w.nameOf(in.value));
    }
  for (const auto& out : g.outputs())
    if (out.kind == OutputKind::UserOutput) ++n_out;
  json in_spec = {{"type", "builtins.tuple"}, {"context", "null"},
                  {"children_spec", json::array({tupleSpec(n_in), {{"type", "builtins.dict"}, {"context", "[]"}, {"children_spec", json::array()}}})}};
  json sig = {{"inputs", json::array()}, {"outputs", json::array()}, {"in_spec", json::array({1, in_spec}).dump()},
              {"out_spec", json::array({1, tupleSpec(n_out)}).dump()}, {"forward_arg_names", names}};
  return json::array({{{"fqn", ""}, {"signature", sig}}});
}

json signatureJson(const Graph& g, const GraphWriter& w, const json& source_sig, const std::string& out) {
  // Buffers keep their `persistent` flag from the input program.
  std::map<std::string, bool> persistent;
  if (source_sig.is_object() && source_sig.contains("input_specs"))
    for (const auto& s : source_sig["input_specs"])
      if (s.contains("buffer")) persistent[s["buffer"].value("buffer_name", "")] = s["buffer"].value("persistent", true);
  json ins = json::array(), outs = json::array();
  for (const auto& in : g.inputs()) {
    const std::string& name = w.nameOf(in.value);
    json arg = {{"name", name}};
    switch (in.kind) {
      case InputKind::UserInput: {
        json a = in.value->kind == ValueKind::Tensor ? json{{"as_tensor", arg}}
                 : in.value->kind == ValueKind::SymFloat ? json{{"as_sym_float", {{"as_name", name}}}}
                                                          : json{{"as_sym_int", {{"as_name", name}}}};
        ins.push_back({{"user_input", {{"arg", a}}}});
        break;
      }
      case InputKind::Parameter: ins.push_back({{"parameter", {{"arg", arg}, {"parameter_name", in.target}}}}); break;
      case InputKind::Buffer: {
        bool p = persistent.count(in.target) ? persistent[in.target] : true;
        ins.push_back({{"buffer", {{"arg", arg}, {"buffer_name", in.target}, {"persistent", p}}}});
        break;
      }
      case InputKind::ConstantTensor:
        ins.push_back({{"tensor_constant", {{"arg", arg}, {"tensor_constant_name", in.target}}}});
        break;
      case InputKind::Token: ins.push_back({{"token", {{"arg", arg}}}}); break;
      case InputKind::CustomObj: fail("{}: custom-object inputs are not written", out);
    }
  }
  for (const auto& o : g.outputs()) {
    json arg = o.value ? json{{"name", w.nameOf(o.value)}} : json{{"name", ""}};
    switch (o.kind) {
      case OutputKind::UserOutput:
        if (!o.value) outs.push_back({{"user_output", {{"arg", {{"as_none", true}}}}}});
        else if (o.value->kind == ValueKind::Tensor) outs.push_back({{"user_output", {{"arg", {{"as_tensor", arg}}}}}});
        else outs.push_back({{"user_output", {{"arg", {{"as_sym_int", {{"as_name", arg["name"]}}}}}}}});
        break;
      case OutputKind::BufferMutation: outs.push_back({{"buffer_mutation", {{"arg", arg}, {"buffer_name", o.target}}}}); break;
      case OutputKind::UserInputMutation:
        outs.push_back({{"user_input_mutation", {{"arg", arg}, {"user_input_name", o.target}}}});
        break;
      case OutputKind::LossOutput: outs.push_back({{"loss_output", {{"arg", arg}}}}); break;
      case OutputKind::Other: fail("{}: an output of an unknown kind cannot be written", out);
    }
  }
  return {{"input_specs", ins}, {"output_specs", outs}};
}

json rangeConstraints(const Module& m) {
  json rc = json::object();
  for (const auto& [name, info] : m.symbols.all()) {
    json r;
    // Unknown lower bounds: torch's defaults, 2 for backed sizes (0 and 1 are specialized),
    // 0 for unbacked ones.
    r["min_val"] = info.min ? json(*info.min) : json(!name.empty() && name[0] == 'u' ? 0 : 2);
    r["max_val"] = info.max ? json(*info.max) : json(nullptr);
    rc[name] = r;
  }
  return rc;
}

json programJson(const Module& m, const std::string& out, const Pt2WriteOptions& opts, const json& source) {
  ArchiveContext ctx{m, out, opts, m.producer.tool == "torch.export-json", {}};
  const Graph& main = m.entry();
  GraphWriter w(ctx, main);
  json graph = w.run();
  bool has_src = source.is_object();
  json src_gm = has_src ? source.value("graph_module", json::object()) : json::object();

  json gm;
  gm["graph"] = graph;
  gm["signature"] = signatureJson(main, w, src_gm.value("signature", json()), out);
  gm["module_call_graph"] = src_gm.contains("module_call_graph") ? src_gm["module_call_graph"] : defaultModuleCallGraph(main, w);
  gm["metadata"] = src_gm.value("metadata", json::object());
  gm["treespec_namedtuple_fields"] = src_gm.value("treespec_namedtuple_fields", json::object());

  json p;
  p["graph_module"] = gm;
  p["opset_version"] = has_src && source.contains("opset_version") ? source["opset_version"] : json{{"aten", 10}};
  p["range_constraints"] = rangeConstraints(m);
  json sv = {{"major", kDefaultSchemaMajor}, {"minor", kDefaultSchemaMinor}};
  if (has_src && source.contains("schema_version")) sv = source["schema_version"];
  p["schema_version"] = sv;
  // Schema 8 calls the dialect list `verifiers`; older majors wrote one `dialect` string.
  if (has_src && source.contains("dialect") && !source.contains("verifiers")) p["dialect"] = source["dialect"];
  else p["verifiers"] = has_src && source.contains("verifiers") ? source["verifiers"] : json::array({"ATEN"});
  p["torch_version"] = has_src && source.contains("torch_version") ? source["torch_version"] : json("2.11.0");
  if (has_src && source.contains("guards_code")) p["guards_code"] = source["guards_code"];
  return p;
}

std::string archiveRoot(const std::string& out_path) {
  std::string base = out_path.substr(out_path.find_last_of('/') == std::string::npos ? 0 : out_path.find_last_of('/') + 1);
  if (base.size() > 4 && base.compare(base.size() - 4, 4, ".pt2") == 0) base.resize(base.size() - 4);
  return safeIdentifier(base);
}

class ZipWriter {
 public:
  explicit ZipWriter(const std::string& out) : out_(out) {
    zip_error_t err;
    zip_error_init(&err);
    src_ = zip_source_buffer_create(nullptr, 0, 0, &err);
    if (!src_ || !(za_ = zip_open_from_source(src_, ZIP_TRUNCATE, &err))) {
      zip_error_fini(&err);
      fail("{}: cannot create a zip archive", out);
    }
    zip_error_fini(&err);
    zip_source_keep(src_);
  }
  ~ZipWriter() {
    if (za_) zip_discard(za_);
    if (src_) zip_source_free(src_);
  }
  ZipWriter(const ZipWriter&) = delete;
  ZipWriter& operator=(const ZipWriter&) = delete;

  // Members are stored uncompressed, as torch writes them (weights can be mapped in place).
  void add(const std::string& name, const std::string& data) {
    buffers_.push_back(data);
    const std::string& b = buffers_.back();
    zip_source_t* s = zip_source_buffer(za_, b.data(), b.size(), 0);
    zip_int64_t idx = s ? zip_file_add(za_, name.c_str(), s, ZIP_FL_OVERWRITE | ZIP_FL_ENC_UTF_8) : -1;
    if (idx < 0) {
      if (s) zip_source_free(s);
      fail("{}: cannot add archive member {} ({})", out_, name, zip_strerror(za_));
    }
    zip_set_file_compression(za_, static_cast<zip_uint64_t>(idx), ZIP_CM_STORE, 0);
    zip_file_set_mtime(za_, static_cast<zip_uint64_t>(idx), 0, 0);
  }

  std::string finish() {
    if (zip_close(za_) != 0) fail("{}: cannot write the zip archive ({})", out_, zip_strerror(za_));
    za_ = nullptr;
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_source_stat(src_, &st) != 0 || zip_source_open(src_) != 0) fail("{}: cannot read back the zip archive", out_);
    std::string bytes(static_cast<size_t>(st.size), '\0');
    zip_int64_t got = st.size ? zip_source_read(src_, bytes.data(), st.size) : 0;
    zip_source_close(src_);
    if (got != static_cast<zip_int64_t>(st.size)) fail("{}: cannot read back the zip archive", out_);
    return bytes;
  }

 private:
  std::string out_;
  zip_source_t* src_ = nullptr;
  zip_t* za_ = nullptr;
  std::list<std::string> buffers_;  // kept alive until zip_close
};

// A stable id for `.data/serialization_id` (torch writes a random 40-digit number).
std::string serializationId(const std::string& content) {
  uint64_t h1 = std::hash<std::string>{}(content), h2 = std::hash<std::string>{}(content + "#");
  return fmt::format("{:020}{:020}", h1, h2);
}

}  // namespace

std::string pt2ProgramJson(const Module& m, const std::string& out_path, const Pt2WriteOptions& opts) {
  SourceArchive src = readSource(m);
  return programJson(m, out_path, opts, src.program).dump();
}

std::string pt2ArchiveBytes(const Module& m, const std::string& out_path, const Pt2WriteOptions& opts) {
  SourceArchive src = readSource(m);
  std::string program = programJson(m, out_path, opts, src.program).dump();
  std::string root = src.root.empty() ? archiveRoot(out_path) : src.root;
  std::string stem = src.model_stem.empty() ? "model" : src.model_stem;
  std::map<std::string, std::string> carried;  // path below the root → bytes
  for (const auto& [name, data] : src.members) {
    if (name.compare(0, src.root.size() + 1, src.root + "/") != 0) continue;
    std::string rel = name.substr(src.root.size() + 1);
    if (rel.rfind("data/", 0) == 0 || rel == "archive_version" || rel == ".data/version" || rel == "byteorder") carried[rel] = data;
  }
  ZipWriter zip(out_path);
  auto member = [&](const std::string& rel, const std::string& fallback) {
    auto it = carried.find(rel);
    zip.add(root + "/" + rel, it != carried.end() ? it->second : fallback);
  };
  member("archive_format", "pt2");
  member("archive_version", "0");
  member("byteorder", "little");
  zip.add(root + "/models/" + stem + ".json", program);
  for (const auto& [rel, data] : carried)
    if (rel.rfind("data/", 0) == 0) zip.add(root + "/" + rel, data);
  // torch.export.load requires both tensor configs; a graph that came without an archive has
  // no weights or constants to list.
  for (const char* kind : {"weights", "constants"}) {
    std::string cfg = fmt::format("data/{}/{}_{}_config.json", kind, stem, kind);
    if (!carried.count(cfg)) zip.add(root + "/" + cfg, "{\"config\": {}}");
  }
  // torch.export.load requires sample inputs; a graph that came without them gets zeros.
  std::string sample = "data/sample_inputs/" + stem + ".pt";
  if (!carried.count(sample) && !m.graphs().empty()) {
    ZipWriter inner(out_path);
    for (const auto& [rel, data] : zeroSampleInputRecords(m.entry(), m.symbols, out_path)) inner.add("archive/" + rel, data);
    zip.add(root + "/" + sample, inner.finish());
  }
  member(".data/version", "6\n");
  zip.add(root + "/.data/serialization_id", serializationId(program));
  return zip.finish();
}

void savePt2Archive(const Module& m, const std::string& path, const Pt2WriteOptions& opts) {
  writeFileAtomic(path, pt2ArchiveBytes(m, path, opts));
}

}  // namespace fxfuse::ir
