#include "ir/proto_io.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <map>
#include <set>

#include "ir/status.h"

namespace fxfuse::ir {

namespace pb = fxfuse::ir::v1;

namespace {

// --------------------------------------------------------------------------- names
// Names that .fxg writes bare (targets, argument names, graph and symbol names, device
// types, node names) must be spelled so that the text reads back; anything else in a
// protobuf file is rejected here rather than producing unreadable .fxg.

bool isIdent(const std::string& s, const char* extra, bool digit_first) {
  if (s.empty()) return false;
  if (!digit_first && std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && (c == '\0' || !std::strchr(extra, c))) return false;
  return true;
}

void checkName(const std::string& s, const char* what, const std::string& ctx) {
  bool ok = true;
  std::string_view w(what);
  if (w == "target" || w == "graph name") {
    ok = isIdent(s, ".:", true);
  } else if (w == "argument name") {
    ok = s.empty() || isIdent(s, "", false);
  } else if (w == "symbol") {
    static const char* const kReserved[] = {"True", "true", "False", "false", "BooleanTrue", "BooleanFalse",
                                            "sympy.true", "sympy.false", "oo", "int_oo"};
    ok = isIdent(s, ".", false) && s.back() != '.';
    for (const char* r : kReserved) ok = ok && s != r;
  } else if (w == "device type") {
    ok = s.empty() || isIdent(s, "", false);
  } else if (w == "node name") {
    ok = !s.empty() && s.front() != ' ' && s.back() != ' ';
    for (char c : s) ok = ok && static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
  }
  if (!ok) fail("{}: malformed {} '{}'", ctx, what, s.substr(0, 80));
}

// --------------------------------------------------------------------------- SymExpr

void symToProto(const SymExpr& e, pb::SymExpr* out) {
  using K = SymExpr::Kind;
  switch (e.kind()) {
    case K::Int: out->set_int_(e.intValue()); return;
    case K::Real: out->set_real(e.realValue()); return;
    case K::Bool: out->set_boolean(e.boolValue()); return;
    case K::Sym: out->set_sym(e.name()); return;
    default: break;
  }
  auto* ap = out->mutable_apply();
  pb::Fn fn = pb::OPAQUE;
  switch (e.kind()) {
    case K::Add: fn = pb::ADD; break;
    case K::Mul: fn = pb::MUL; break;
    case K::FloorDiv: fn = pb::FLOOR_DIV; break;
    case K::Mod: fn = pb::MOD; break;
    case K::Pow: fn = pb::POW; break;
    case K::Min: fn = pb::MIN; break;
    case K::Max: fn = pb::MAX; break;
    case K::CeilDiv: fn = pb::CEIL_DIV; break;
    case K::TrueDiv: fn = pb::TRUE_DIV; break;
    case K::Eq: fn = pb::EQ; break;
    case K::Ne: fn = pb::NE; break;
    case K::Lt: fn = pb::LT; break;
    case K::Le: fn = pb::LE; break;
    case K::Gt: fn = pb::GT; break;
    case K::Ge: fn = pb::GE; break;
    case K::And: fn = pb::AND; break;
    case K::Or: fn = pb::OR; break;
    case K::Not: fn = pb::NOT; break;
    case K::Ite: fn = pb::ITE; break;
    default: fn = pb::OPAQUE; ap->set_opaque_name(e.name()); break;
  }
  ap->set_fn(fn);
  for (const auto& a : e.args()) symToProto(a, ap->add_args());
}

SymExpr symFromProto(const pb::SymExpr& p, const std::string& ctx, int depth = 0) {
  using K = SymExpr::Kind;
  if (depth > 200) fail("{}: symbolic expression nested too deeply", ctx);
  switch (p.k_case()) {
    case pb::SymExpr::kInt: return SymExpr::integer(p.int_());
    case pb::SymExpr::kReal: return SymExpr::real(p.real());
    case pb::SymExpr::kBoolean: return SymExpr::boolean(p.boolean());
    case pb::SymExpr::kSym:
      if (p.sym().empty()) fail("{}: empty symbol name", ctx);
      checkName(p.sym(), "symbol", ctx);
      return SymExpr::symbol(p.sym());
    case pb::SymExpr::kApply: break;
    default: fail("{}: empty symbolic expression", ctx);
  }
  std::vector<SymExpr> args;
  for (const auto& a : p.apply().args()) args.push_back(symFromProto(a, ctx, depth + 1));
  K k;
  switch (p.apply().fn()) {
    case pb::ADD: k = K::Add; break;
    case pb::MUL: k = K::Mul; break;
    case pb::FLOOR_DIV: k = K::FloorDiv; break;
    case pb::MOD: k = K::Mod; break;
    case pb::POW: k = K::Pow; break;
    case pb::MIN: k = K::Min; break;
    case pb::MAX: k = K::Max; break;
    case pb::NEG: return -(args.empty() ? SymExpr::integer(0) : args[0]);
    case pb::CEIL_DIV: k = K::CeilDiv; break;
    case pb::TRUE_DIV: k = K::TrueDiv; break;
    case pb::EQ: k = K::Eq; break;
    case pb::NE: k = K::Ne; break;
    case pb::LT: k = K::Lt; break;
    case pb::LE: k = K::Le; break;
    case pb::GT: k = K::Gt; break;
    case pb::GE: k = K::Ge; break;
    case pb::AND: k = K::And; break;
    case pb::OR: k = K::Or; break;
    case pb::NOT: k = K::Not; break;
    case pb::ITE: k = K::Ite; break;
    case pb::OPAQUE: {
      // The constants of infinity the text form parses into zero-argument opaque calls (a
      // symbol range's bound, or a dimension a graph spells "oo") round-trip as they are.
      const std::string& name = p.apply().opaque_name();
      if (!(args.empty() && (name == "oo" || name == "int_oo"))) checkName(name, "symbol", ctx);
      return SymExpr::apply(K::Opaque, std::move(args), name);
    }
    default: fail("{}: unknown symbolic function {}", ctx, static_cast<int>(p.apply().fn()));
  }
  if (k == K::Add || k == K::Mul || k == K::Min || k == K::Max || k == K::And || k == K::Or) {
    if (args.empty()) fail("{}: symbolic function without arguments", ctx);
  } else {
    size_t want = k == K::Not ? 1 : k == K::Ite ? 3 : 2;
    if (args.size() != want) fail("{}: symbolic function takes {} arguments, got {}", ctx, want, args.size());
  }
  return SymExpr::apply(k, std::move(args));
}

// --------------------------------------------------------------------------- enums

pb::DType dtypeToProto(DType t) { return static_cast<pb::DType>(static_cast<int>(t)); }
DType dtypeFromProto(pb::DType t, const std::string& ctx) {
  int v = static_cast<int>(t);
  if (v < 0 || v > static_cast<int>(kLastDType)) fail("{}: unknown dtype {}", ctx, v);
  return static_cast<DType>(v);
}

void deviceToProto(const Device& d, pb::Device* out) {
  out->set_type(d.type);
  out->set_index(d.index);
}
Device deviceFromProto(const pb::Device& d, const std::string& ctx) {
  checkName(d.type(), "device type", ctx);
  return Device{d.type(), d.index()};
}

void typeToProto(const TensorType& t, pb::TensorType* out) {
  out->set_dtype(dtypeToProto(t.dtype));
  for (const auto& d : t.shape) symToProto(d, out->add_shape());
  for (const auto& d : t.stride) symToProto(d, out->add_stride());
  if (!(t.storage_offset.isInt() && t.storage_offset.intValue() == 0)) symToProto(t.storage_offset, out->mutable_storage_offset());
  if (!t.device.type.empty()) deviceToProto(t.device, out->mutable_device());
  out->set_layout(pb::STRIDED);
  out->set_requires_grad(t.requires_grad);
}

TensorType typeFromProto(const pb::TensorType& p, const std::string& ctx) {
  TensorType t;
  t.dtype = dtypeFromProto(p.dtype(), ctx);
  for (const auto& d : p.shape()) t.shape.push_back(symFromProto(d, ctx));
  for (const auto& d : p.stride()) t.stride.push_back(symFromProto(d, ctx));
  if (t.stride.empty()) t.stride = TensorType::contiguousStrides(t.shape);
  if (t.stride.size() != t.shape.size())
    fail("{}: tensor has {} dims but {} strides", ctx, t.shape.size(), t.stride.size());
  if (p.has_storage_offset()) t.storage_offset = symFromProto(p.storage_offset(), ctx);
  if (p.has_device()) {
    t.device = deviceFromProto(p.device(), ctx);
    if (!t.device.type.empty() && !isKnownDeviceType(t.device.type))
      fail("{}: unsupported tensor device type '{}'", ctx, t.device.type.substr(0, 80));
  }
  t.requires_grad = p.requires_grad();
  return t;
}

// --------------------------------------------------------------------------- Attr

void attrToProto(const Attr& a, pb::Attr* out) {
  switch (a.kind) {
    case Attr::Kind::None: out->set_none(true); break;
    case Attr::Kind::Value: out->set_value(a.value->id); break;
    case Attr::Kind::Int: out->set_i(a.i); break;
    case Attr::Kind::Float: out->set_f(a.f); break;
    case Attr::Kind::Bool: out->set_b(a.b); break;
    case Attr::Kind::String: out->set_s(a.s); break;
    case Attr::Kind::DType: out->set_dtype(dtypeToProto(a.dtype)); break;
    case Attr::Kind::Device: deviceToProto(a.device, out->mutable_device()); break;
    case Attr::Kind::Layout: out->set_layout(static_cast<pb::Layout>(static_cast<int>(a.layout) == 4 ? 9 : static_cast<int>(a.layout))); break;
    case Attr::Kind::MemoryFormat: out->set_memory_format(static_cast<pb::MemoryFormat>(static_cast<int>(a.memory_format))); break;
    case Attr::Kind::Sym: symToProto(*a.sym, out->mutable_sym()); break;
    case Attr::Kind::List: {
      auto* l = out->mutable_list();
      for (const auto& x : a.list) attrToProto(x, l->add_items());
      break;
    }
    case Attr::Kind::Op: out->set_op(a.s); break;
    case Attr::Kind::Graph: out->set_graph(static_cast<uint32_t>(a.graph)); break;
    case Attr::Kind::Opaque: {
      auto* o = out->mutable_opaque();
      o->set_type(a.s);
      o->set_repr(a.s2);
      break;
    }
    case Attr::Kind::SpecialFloat: out->set_special_float(a.s); break;
  }
}

Attr attrFromProto(const pb::Attr& p, const std::map<uint32_t, Value*>& values, size_t num_graphs,
                   const std::string& ctx, int depth = 0) {
  if (depth > 64) fail("{}: argument lists nested too deeply", ctx);
  switch (p.v_case()) {
    case pb::Attr::kValue: {
      auto it = values.find(p.value());
      if (it == values.end()) fail("{}: reference to undefined value id {}", ctx, p.value());
      return Attr::ofValue(it->second);
    }
    case pb::Attr::kI: return Attr::ofInt(p.i());
    case pb::Attr::kF: return Attr::ofFloat(p.f());
    case pb::Attr::kB: return Attr::ofBool(p.b());
    case pb::Attr::kS: return Attr::ofString(p.s());
    case pb::Attr::kDtype: return Attr::ofDType(dtypeFromProto(p.dtype(), ctx));
    case pb::Attr::kDevice: return Attr::ofDevice(deviceFromProto(p.device(), ctx));
    case pb::Attr::kLayout: {
      Attr a;
      a.kind = Attr::Kind::Layout;
      int v = static_cast<int>(p.layout());
      a.layout = v == 9 ? Layout::Other : v <= 3 && v >= 0 ? static_cast<Layout>(v) : Layout::Other;
      return a;
    }
    case pb::Attr::kMemoryFormat: {
      Attr a;
      a.kind = Attr::Kind::MemoryFormat;
      int v = static_cast<int>(p.memory_format());
      a.memory_format = v >= 0 && v <= 4 ? static_cast<MemoryFormat>(v) : MemoryFormat::Unspecified;
      return a;
    }
    case pb::Attr::kSym: return Attr::ofSym(symFromProto(p.sym(), ctx));
    case pb::Attr::kList: {
      std::vector<Attr> items;
      for (const auto& x : p.list().items()) items.push_back(attrFromProto(x, values, num_graphs, ctx, depth + 1));
      return Attr::ofList(std::move(items));
    }
    case pb::Attr::kNone: return Attr::none();
    case pb::Attr::kOp: checkName(p.op(), "target", ctx); return Attr::ofOp(p.op());
    case pb::Attr::kGraph:
      if (p.graph() >= num_graphs) fail("{}: reference to graph {} but the module has {}", ctx, p.graph(), num_graphs);
      return Attr::ofGraph(static_cast<int>(p.graph()));
    case pb::Attr::kOpaque: return Attr::ofOpaque(p.opaque().type(), p.opaque().repr());
    case pb::Attr::kSpecialFloat: {
      const std::string& s = p.special_float();
      if (s != "inf" && s != "-inf" && s != "nan") fail("{}: bad special float '{}'", ctx, s);
      return Attr::ofSpecialFloat(s);
    }
    default: return Attr::none();
  }
}

ValueKind valueKindFromProto(pb::ValueKind k) {
  switch (k) {
    case pb::SYM_INT: return ValueKind::SymInt;
    case pb::SYM_FLOAT: return ValueKind::SymFloat;
    case pb::SYM_BOOL: return ValueKind::SymBool;
    case pb::OPAQUE_VALUE: return ValueKind::Opaque;
    default: return ValueKind::Tensor;
  }
}

pb::ValueKind valueKindToProto(ValueKind k) {
  switch (k) {
    case ValueKind::SymInt: return pb::SYM_INT;
    case ValueKind::SymFloat: return pb::SYM_FLOAT;
    case ValueKind::SymBool: return pb::SYM_BOOL;
    case ValueKind::Opaque: return pb::OPAQUE_VALUE;
    default: return pb::TENSOR;
  }
}

void valueToProto(const Value& v, pb::Value* out) {
  out->set_id(v.id);
  out->set_name(v.name);
  out->set_kind(valueKindToProto(v.kind));
  if (v.kind == ValueKind::Tensor) typeToProto(v.type, out->mutable_tensor());
  if (v.sym) symToProto(*v.sym, out->mutable_sym_value());
  if (!v.opaque_type.empty()) out->set_opaque_type(v.opaque_type);
}

void fillValue(Value* v, const pb::Value& p, const std::string& ctx) {
  v->name = p.name();
  v->kind = valueKindFromProto(p.kind());
  if (v->kind == ValueKind::Tensor) {
    if (!p.has_tensor()) fail("{}: tensor value {} has no type", ctx, p.id());
    v->type = typeFromProto(p.tensor(), ctx + " value " + (p.name().empty() ? std::to_string(p.id()) : p.name()));
  }
  if (p.has_sym_value()) v->sym = symFromProto(p.sym_value(), ctx);
  v->opaque_type = p.opaque_type();
}

}  // namespace

// Public entry points for other protobuf schemas that embed SymExpr (proto/fxfuse_plan.proto).
void symExprToProto(const SymExpr& e, fxfuse::ir::v1::SymExpr* out) { symToProto(e, out); }
SymExpr symExprFromProto(const fxfuse::ir::v1::SymExpr& p, const std::string& context) {
  return symFromProto(p, context);
}

void moduleToProto(Module& m, pb::Module* out) {
  out->set_ir_major(1);
  out->set_ir_minor(0);
  auto* pr = out->mutable_producer();
  pr->set_tool(m.producer.tool);
  pr->set_torch_version(m.producer.torch_version);
  pr->set_source_schema(m.producer.source_schema);
  pr->set_stage(static_cast<pb::Stage>(static_cast<int>(m.producer.stage)));
  pr->set_functional(m.producer.functional);
  pr->set_source_path(m.producer.source_path);
  for (const auto& [name, s] : m.symbols.all()) {
    auto* ps = out->add_symbols();
    ps->set_name(name);
    if (s.min) ps->set_min(*s.min);
    if (s.max) ps->set_max(*s.max);
    if (s.hint) ps->set_hint(*s.hint);
    ps->set_source(s.source);
  }
  for (const auto& [t, s] : m.op_schemas) {
    auto* os = out->add_op_schemas();
    os->set_name(t);
    os->set_schema(s);
  }
  for (const auto& w : m.weights) {
    auto* pw = out->add_weights();
    pw->set_fqn(w.fqn);
    typeToProto(w.type, pw->mutable_type());
    pw->set_is_param(w.is_param);
    if (!w.member.empty()) {
      auto* e = pw->mutable_external();
      e->set_path(w.archive_path);
      e->set_member(w.member);
      e->set_offset(w.offset);
      e->set_length(w.length);
    }
  }
  for (const auto& [k, v] : m.metadata) (*out->mutable_metadata())[k] = v;
  for (const auto& gd : m.guards) *out->add_guards() = guardToProto(gd);
  for (auto& gp : m.graphs()) {
    Graph& g = *gp;
    g.renumber();
    auto* pg = out->add_graphs();
    pg->set_name(g.name);
    for (const auto& in : g.inputs()) {
      valueToProto(*in.value, pg->add_values());
      auto* pi = pg->add_inputs();
      pi->set_value(in.value->id);
      pi->set_kind(static_cast<pb::InputKind>(static_cast<int>(in.kind) + 1));
      pi->set_target(in.target);
      if (in.value->scalar_value) pi->set_scalar_value(*in.value->scalar_value);
    }
    for (const auto& np : g.nodes()) {
      const Node& n = *np;
      auto* pn = pg->add_nodes();
      pn->set_name(n.name);
      pn->set_target(n.target);
      pn->set_kind(static_cast<pb::NodeKind>(static_cast<int>(n.kind) + 1));
      for (const auto& a : n.args()) {
        auto* pa = pn->add_args();
        pa->set_name(a.name);
        pa->set_keyword(a.keyword);
        attrToProto(a.value, pa->mutable_value());
      }
      for (Value* v : n.outputs()) {
        pn->add_outputs(v ? v->id : 0);
        if (v) valueToProto(*v, pg->add_values());
      }
      for (const auto& [k, v] : n.meta) (*pn->mutable_meta())[k] = v;
      if (!n.loc.empty()) {
        pn->mutable_loc()->set_file(n.loc.file);
        pn->mutable_loc()->set_line(n.loc.line);
        pn->mutable_loc()->set_code(n.loc.code);
      }
    }
    for (const auto& o : g.outputs()) {
      auto* po = pg->add_outputs();
      po->set_value(o.value ? o.value->id : 0);
      po->set_kind(static_cast<pb::OutputKind>(o.kind == OutputKind::Other ? 9 : static_cast<int>(o.kind) + 1));
      po->set_target(o.target);
      if (!o.value) attrToProto(o.constant, po->mutable_constant());
    }
  }
}

std::unique_ptr<Module> moduleFromProto(const pb::Module& pm, const std::string& source) {
  if (pm.ir_major() > 1) fail("{}: fxfuse IR major version {} is newer than this fxfuse (1)", source, pm.ir_major());
  auto m = std::make_unique<Module>();
  const auto& pr = pm.producer();
  m->producer.tool = pr.tool();
  m->producer.torch_version = pr.torch_version();
  m->producer.source_schema = pr.source_schema();
  int st = static_cast<int>(pr.stage());
  m->producer.stage = st >= 0 && st <= static_cast<int>(Stage::FxfuseCompiled) ? static_cast<Stage>(st) : Stage::Unspecified;
  m->producer.functional = pr.functional();
  m->producer.source_path = pr.source_path();
  for (const auto& ps : pm.symbols()) {
    if (ps.name().empty()) fail("{}: symbol without a name", source);
    checkName(ps.name(), "symbol", source);
    auto& s = m->symbols.getOrAdd(ps.name());
    if (ps.has_min()) s.min = ps.min();
    if (ps.has_max()) s.max = ps.max();
    if (ps.has_hint()) s.hint = ps.hint();
    s.source = ps.source();
  }
  for (const auto& os : pm.op_schemas()) m->op_schemas[os.name()] = os.schema();
  for (const auto& pw : pm.weights()) {
    WeightInfo w;
    w.fqn = pw.fqn();
    w.type = typeFromProto(pw.type(), source + " weight " + pw.fqn());
    w.is_param = pw.is_param();
    w.archive_path = pw.external().path();
    w.member = pw.external().member();
    w.offset = pw.external().offset();
    w.length = pw.external().length();
    m->weights.push_back(std::move(w));
  }
  for (const auto& [k, v] : pm.metadata()) m->metadata[k] = v;
  for (const auto& pg : pm.guards()) m->addGuard(symExprFromProto(pg.condition(), source + ": guard"), pg.reason());
  if (pm.graphs_size() == 0) fail("{}: module has no graph", source);
  size_t num_graphs = static_cast<size_t>(pm.graphs_size());
  for (const auto& pg : pm.graphs()) {
    checkName(pg.name().empty() ? "main" : pg.name(), "graph name", source);
    Graph* g = m->addGraph(pg.name().empty() ? "main" : pg.name());
    std::string gctx = source + ": graph " + g->name;
    std::map<uint32_t, const pb::Value*> decl;
    for (const auto& pv : pg.values()) {
      if (pv.id() == 0) fail("{}: value '{}' has id 0", gctx, pv.name());
      if (!decl.emplace(pv.id(), &pv).second) fail("{}: value id {} declared twice", gctx, pv.id());
    }
    std::map<uint32_t, Value*> values;
    for (const auto& pi : pg.inputs()) {
      auto it = decl.find(pi.value());
      if (it == decl.end()) fail("{}: input refers to undeclared value id {}", gctx, pi.value());
      if (values.count(pi.value())) fail("{}: value id {} is both an input and defined again", gctx, pi.value());
      int ik = static_cast<int>(pi.kind());
      InputKind kind = ik >= 1 && ik <= 6 ? static_cast<InputKind>(ik - 1) : InputKind::UserInput;
      Value* v = g->addInput(ValueKind::Tensor, it->second->name(), kind, pi.target());
      fillValue(v, *it->second, gctx);
      if (pi.has_scalar_value()) {
        if (!v->isTensor() || v->type.rank() != 0)
          fail("{}: input '{}' records a scalar value but is not a 0-d tensor", gctx, v->name);
        v->scalar_value = pi.scalar_value();
      }
      values[pi.value()] = v;
    }
    for (const auto& pn : pg.nodes()) {
      std::string nctx = gctx + ": node " + (pn.name().empty() ? pn.target() : pn.name());
      if (pn.target().empty()) fail("{}: node has no target", nctx);
      checkName(pn.target(), "target", nctx);
      if (!pn.name().empty()) checkName(pn.name(), "node name", nctx);
      std::vector<Arg> args;
      for (const auto& pa : pn.args()) {
        checkName(pa.name(), "argument name", nctx);
        args.push_back(Arg{pa.name(), pa.keyword(), attrFromProto(pa.value(), values, num_graphs, nctx)});
      }
      int nk = static_cast<int>(pn.kind());
      NodeKind kind = nk >= 1 && nk <= 4 ? static_cast<NodeKind>(nk - 1) : NodeKind::Op;
      Node* n = g->createNode(pn.target(), kind, std::move(args), static_cast<size_t>(pn.outputs_size()), nullptr,
                              pn.name().empty() ? "node" : pn.name());
      for (int i = 0; i < pn.outputs_size(); ++i) {
        uint32_t id = pn.outputs(i);
        if (id == 0) continue;
        auto it = decl.find(id);
        if (it == decl.end()) fail("{}: output refers to undeclared value id {}", nctx, id);
        if (values.count(id)) fail("{}: value id {} defined twice", nctx, id);
        Value* v = n->setOutput(static_cast<size_t>(i), valueKindFromProto(it->second->kind()));
        fillValue(v, *it->second, nctx);
        values[id] = v;
      }
      for (const auto& [k, v] : pn.meta()) n->meta[k] = v;
      n->loc.file = pn.loc().file();
      n->loc.line = pn.loc().line();
      n->loc.code = pn.loc().code();
    }
    for (const auto& po : pg.outputs()) {
      int ok = static_cast<int>(po.kind());
      OutputKind kind = ok == 9 ? OutputKind::Other : ok >= 1 && ok <= 4 ? static_cast<OutputKind>(ok - 1) : OutputKind::UserOutput;
      if (po.value() == 0) {
        g->addConstantOutput(po.has_constant() ? attrFromProto(po.constant(), values, num_graphs, gctx) : Attr::none(), kind);
        continue;
      }
      auto it = values.find(po.value());
      if (it == values.end()) fail("{}: output refers to undefined value id {}", gctx, po.value());
      g->addOutput(it->second, kind, po.target());
    }
  }
  return m;
}

std::string moduleToBinary(Module& m) {
  pb::Module pm;
  moduleToProto(m, &pm);
  std::string out;
  if (!pm.SerializeToString(&out)) fail("failed to serialize module");
  return out;
}

std::string moduleToJson(Module& m) {
  pb::Module pm;
  moduleToProto(m, &pm);
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.preserve_proto_field_names = true;
  auto st = google::protobuf::util::MessageToJsonString(pm, &out, opts);
  if (!st.ok()) fail("failed to write module as JSON: {}", st.ToString());
  return out;
}

std::unique_ptr<Module> moduleFromBinary(const std::string& bytes, const std::string& source) {
  pb::Module pm;
  if (!pm.ParseFromString(bytes)) fail("{}: not a valid fxfuse protobuf module (binary parse failed)", source);
  return moduleFromProto(pm, source);
}

std::unique_ptr<Module> moduleFromJson(const std::string& json, const std::string& source) {
  pb::Module pm;
  google::protobuf::util::JsonParseOptions opts;
  opts.ignore_unknown_fields = true;
  auto st = google::protobuf::util::JsonStringToMessage(json, &pm, opts);
  if (!st.ok()) {
    std::string msg = st.ToString();
    for (auto& c : msg)
      if (c == '\n') c = ' ';
    fail("{}: malformed fxfuse JSON: {}", source, msg);
  }
  return moduleFromProto(pm, source);
}

pb::Guard guardToProto(const Guard& g) {
  pb::Guard out;
  symExprToProto(g.condition, out.mutable_condition());
  out.set_reason(g.reason);
  return out;
}

std::vector<Guard> guardsFromProto(const google::protobuf::RepeatedPtrField<pb::Guard>& guards,
                                   const std::string& context) {
  std::vector<Guard> out;
  for (const auto& pg : guards) out.push_back(Guard{symExprFromProto(pg.condition(), context + ": guard"), pg.reason()});
  return out;
}

}  // namespace fxfuse::ir
