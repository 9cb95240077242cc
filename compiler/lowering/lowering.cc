#include "compiler/lowering/lowering.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>

#include "compiler/lowering/codegen.h"
#include "compiler/lowering/memory_planner.h"
#include "ir/lifted_scalar.h"
#include "ir/op_schema.h"
#include "kernels/attention/attention.h"
#include "kernels/types.h"
#include "ir/proto_io.h"
#include "ir/status.h"

namespace fxfuse::lowering {

namespace pb = fxfuse::plan::v1;
using ir::Attr;
using ir::DType;
using ir::Node;
using ir::SymExpr;
using ir::Value;

pb::DType toPlanDType(DType t) {
  switch (t) {
    case DType::Bool: return pb::BOOL;
    case DType::U8: return pb::U8;
    case DType::I8: return pb::I8;
    case DType::I16: return pb::I16;
    case DType::I32: return pb::I32;
    case DType::I64: return pb::I64;
    case DType::F16: return pb::F16;
    case DType::BF16: return pb::BF16;
    case DType::F32: return pb::F32;
    case DType::F64: return pb::F64;
    case DType::F8E4M3FN: return pb::F8E4M3FN;
    case DType::F8E5M2: return pb::F8E5M2;
    default: fail("launch plans do not support dtype {}", ir::dtypeName(t));
  }
}

DType fromPlanDType(pb::DType t) {
  switch (t) {
    case pb::BOOL: return DType::Bool;
    case pb::U8: return DType::U8;
    case pb::I8: return DType::I8;
    case pb::I16: return DType::I16;
    case pb::I32: return DType::I32;
    case pb::I64: return DType::I64;
    case pb::F16: return DType::F16;
    case pb::BF16: return DType::BF16;
    case pb::F32: return DType::F32;
    case pb::F64: return DType::F64;
    case pb::F8E4M3FN: return DType::F8E4M3FN;
    case pb::F8E5M2: return DType::F8E5M2;
    default: return DType::Undefined;
  }
}

namespace {

SymExpr I(int64_t v) { return SymExpr::integer(v); }
bool isOne(const SymExpr& e) { return e.isInt() && e.intValue() == 1; }
std::string shapeText(const std::vector<SymExpr>& shape) {
  std::string s;
  for (const auto& d : shape) s += (s.empty() ? "" : ", ") + d.str();
  return s;
}

std::vector<SymExpr> contiguousStrides(const std::vector<SymExpr>& shape) {
  return ir::TensorType::contiguousStrides(shape);
}

// Targets grouped by how they lower.
const std::set<std::string>& noopTargets() {
  static const std::set<std::string> s = {
      "aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
      "aten.sym_constrain_range_for_size.default", "aten._assert_async.msg",
  };
  return s;
}

bool isIdentityTarget(const std::string& t) {
  static const std::set<std::string> s = {
      "aten.alias.default", "aten.detach.default", "aten.clone.default", "aten.lift_fresh_copy.default",
      "aten.contiguous.default", "aten.to.device", "aten.dropout.default", "_c10d_functional.wait_tensor.default",
      "aten.detach_.default", "aten.positive.default",
  };
  return s.count(t) > 0;
}

struct TRef {
  int buffer = -1;
  DType dtype = DType::Undefined;
  std::vector<SymExpr> shape, stride;
  SymExpr offset;
  std::string name;
};

struct Buf {
  pb::BufferKind kind = pb::ARENA;
  int input = -1;
  SymExpr size;
  int first = -1, last = -1;
  std::string name;
  int trefs = 0;  // TensorRefs on it (donation needs exactly one)
};

struct Group {
  bool open = false;
  std::vector<int> members;             // gnodes
  std::set<const Node*> nodes;
  std::map<const Value*, int> values;   // pending graph values -> gnode
  std::vector<SymExpr> domain;
  int kred = 0;
};

class Lowerer {
 public:
  Lowerer(ir::Module& m, const LowerOptions& o) : m_(m), g_(m.entry()), opts_(o) {
    env_ = hintEnv(m.symbols);
  }

  pb::Plan run(LowerStats* stats);

 private:
  // ------------------------------------------------------------------ small helpers
  [[noreturn]] void unsupported(const Node& n, const std::string& why) {
    fail("lowering: node '{}' ({}): {}", n.name, n.target, why);
  }
  const Attr* arg(const Node& n, const std::string& name) {
    const ir::OpSchema* s = ir::lookupSchema(m_.op_schemas, n.target, &schema_cache_);
    int pos = s ? s->argIndex(name) : -1;
    const Attr* a = n.arg(name, pos);
    if (a && a->isNone()) return nullptr;
    return a;
  }
  Value* valArg(const Node& n, const std::string& name) {
    const Attr* a = arg(n, name);
    return a && a->isValue() ? a->value : nullptr;
  }
  // A lifted scalar's value (the plan is specialized for it; the runtime checks it when the
  // input is bound); refuses an unknown one with the --const hint.
  std::optional<double> liftedValue(const Node& n, const std::string& name, Value* v) {
    Value* in = ir::liftedScalarSource(v);
    if (!in) return std::nullopt;
    if (!in->scalar_value) unsupported(n, "argument '" + name + "': " + ir::constFlagHint(*in));
    return in->scalar_value;
  }
  // A tensor argument that must be there (one line naming the node otherwise).
  Value* tensorArg(const Node& n, const std::string& name) {
    Value* v = valArg(n, name);
    if (!v || v->kind != ir::ValueKind::Tensor) unsupported(n, "argument '" + name + "' must be a tensor");
    return v;
  }
  double num(const Node& n, const std::string& name, double def) {
    const Attr* a = arg(n, name);
    if (!a) return def;
    if (auto d = a->asDouble()) return *d;
    if (a->isValue())
      if (auto d = liftedValue(n, name, a->value)) return *d;
    if (a->isValue() && a->value->kind != ir::ValueKind::Tensor) {
      SymExpr e = symOf(a->value, n);
      if (auto v = e.evaluate({})) return static_cast<double>(*v);
    }
    unsupported(n, "argument '" + name + "' must be a constant number");
  }
  int64_t intArg(const Node& n, const std::string& name, int64_t def) {
    const Attr* a = arg(n, name);
    if (!a) return def;
    if (auto v = a->asInt()) return *v;
    unsupported(n, "argument '" + name + "' must be a constant integer");
  }
  bool flag(const Node& n, const std::string& name, bool def) {
    const Attr* a = arg(n, name);
    if (!a) return def;
    if (a->kind == Attr::Kind::Bool) return a->b;
    if (auto v = a->asInt()) return *v != 0;
    return def;
  }
  std::string str(const Node& n, const std::string& name, const std::string& def) {
    const Attr* a = arg(n, name);
    if (!a) return def;
    if (a->kind == Attr::Kind::String) return a->s;
    return def;
  }
  std::optional<SymExpr> sizeArg(const Node& n, const std::string& name) {
    const Attr* a = arg(n, name);
    if (!a) return std::nullopt;
    if (a->isValue()) return symOf(a->value, n);
    if (auto s = a->asSize()) return *s;
    unsupported(n, "argument '" + name + "' must be a size");
  }
  SymExpr requiredSize(const Node& n, const std::string& name) {
    if (auto s = sizeArg(n, name)) return *s;
    unsupported(n, "missing argument '" + name + "'");
  }
  std::vector<SymExpr> sizeList(const Node& n, const std::string& name) {
    const Attr* a = arg(n, name);
    std::vector<SymExpr> out;
    if (!a) return out;
    if (a->kind != Attr::Kind::List) {
      if (auto s = a->asSize()) return {*s};
      unsupported(n, "argument '" + name + "' must be a list of sizes");
    }
    for (const auto& e : a->list) {
      if (e.isValue()) {
        out.push_back(symOf(e.value, n));
      } else if (auto s = e.asSize()) {
        out.push_back(*s);
      } else {
        unsupported(n, "argument '" + name + "' has a non-size element");
      }
    }
    return out;
  }
  std::vector<int64_t> intList(const Node& n, const std::string& name) {
    const Attr* a = arg(n, name);
    if (!a) return {};
    if (auto v = a->asIntList()) return *v;
    if (auto v = a->asInt()) return {*v};
    unsupported(n, "argument '" + name + "' must be a list of integers");
  }
  std::optional<DType> dtypeArg(const Node& n, const std::string& name) {
    const Attr* a = arg(n, name);
    if (!a || a->kind != Attr::Kind::DType) return std::nullopt;
    return a->dtype;
  }
  int64_t normDim(const Node& n, int64_t d, size_t rank) {
    int64_t r = static_cast<int64_t>(rank);
    if (d < 0) d += r;
    if (d < 0 || d >= std::max<int64_t>(r, 1)) unsupported(n, "dimension out of range");
    return d;
  }
  // A slice is lowered with its declared output size; where start, step and sizes are known,
  // that many elements must fit in the input dim, else the plan would read outside the tensor.
  void checkSliceFits(const Node& n, const SymExpr& start, const SymExpr& step, const SymExpr& in_dim,
                      const SymExpr& out_dim) {
    // Symbolic sizes are checked at the symbols' hints: a slice consistent for every binding
    // is consistent there, and a start past the dim (INT64_MAX) makes a view no kernel may read.
    int64_t s = start.isInt() ? start.intValue() : hint(start), k = step.isInt() ? step.intValue() : hint(step);
    int64_t d = in_dim.isInt() ? in_dim.intValue() : hint(in_dim), o = out_dim.isInt() ? out_dim.intValue() : hint(out_dim);
    if (o <= 0 || s < 0) return;
    if (k <= 0 || s >= d || o - 1 > (d - 1 - s) / k)
      unsupported(n, fmt::format("{} elements from {} by step {} do not fit a dim of size {}", o, s, k, d));
  }
  // `from` broadcasts to `to` (right-aligned, each dim equal or 1): a generated kernel reading
  // `from` at `to`'s coordinates stays inside it.
  void checkBroadcastsTo(const Node& n, const std::vector<SymExpr>& from, const std::vector<SymExpr>& to,
                         const std::string& what) {
    bool ok = from.size() <= to.size();
    for (size_t k = 0; ok && k < from.size(); ++k) {
      const SymExpr& f = from[from.size() - 1 - k];
      const SymExpr& t = to[to.size() - 1 - k];
      ok = isOne(f) || f == t || hint(f) == hint(t);  // symbolic spellings differ: compare at hints
    }
    if (!ok) unsupported(n, what + " does not broadcast to the output's shape");
  }
  int64_t hint(const SymExpr& e) {
    std::set<std::string> syms;
    e.collectSymbols(syms);
    auto env = env_;
    for (const auto& s : syms)
      if (!env.count(s)) env[s] = 64;
    auto v = e.evaluate(env);
    return v ? *v : 0;
  }
  SymExpr symOf(Value* v, const Node& ctx) {
    auto it = syms_.find(v);
    if (it != syms_.end()) return it->second;
    if (v->sym) return *v->sym;
    unsupported(ctx, "symbolic value '" + v->name + "' has no known expression");
  }

  // ------------------------------------------------------------------ tensors and buffers
  int newBuffer(const SymExpr& bytes, const std::string& name) {
    Buf b;
    b.size = bytes;
    b.name = name;
    bufs_.push_back(b);
    return static_cast<int>(bufs_.size()) - 1;
  }
  int newTRef(TRef t) {
    if (t.buffer >= 0) bufs_[static_cast<size_t>(t.buffer)].trefs++;
    trefs_.push_back(std::move(t));
    return static_cast<int>(trefs_.size()) - 1;
  }
  // A fresh contiguous tensor in its own arena buffer.
  int freshTensor(DType dt, const std::vector<SymExpr>& shape, const std::string& name) {
    SymExpr bytes = numelOf(shape) * I(ir::dtypeBytes(dt));
    TRef t;
    t.buffer = newBuffer(bytes, name);
    t.dtype = dt;
    t.shape = shape;
    t.stride = contiguousStrides(shape);
    t.offset = I(0);
    t.name = name;
    return newTRef(std::move(t));
  }
  int freshFor(const Value* v) { return freshTensor(v->type.dtype, v->type.shape, v->name); }
  void touch(int tref, int step) {
    Buf& b = bufs_[static_cast<size_t>(trefs_[static_cast<size_t>(tref)].buffer)];
    if (b.first < 0 || step < b.first) b.first = step;
    b.last = std::max(b.last, step);
  }
  bool isContiguous(const TRef& t) {
    auto cs = contiguousStrides(t.shape);
    for (size_t k = 0; k < t.shape.size(); ++k)
      if (!isOne(t.shape[k]) && t.stride[k] != cs[k]) return false;
    return true;
  }
  // Rows of the last dim: stride[-1] == 1 and the leading dims collapse to one row stride.
  std::optional<SymExpr> rowStride(const TRef& t) {
    size_t r = t.shape.size();
    if (r == 0) return std::nullopt;
    if (!isOne(t.shape[r - 1]) && !isOne(t.stride[r - 1])) return std::nullopt;
    if (r == 1) return t.shape[0];
    SymExpr rs = t.stride[r - 2];
    for (size_t k = 0; k + 2 < r; ++k)
      if (!isOne(t.shape[k]) && t.stride[k] != t.stride[k + 1] * t.shape[k + 1]) return std::nullopt;
    if (isOne(t.shape[r - 2]) && r == 2) rs = t.shape[r - 1];
    return rs;
  }

  // ------------------------------------------------------------------ steps
  pb::Step* addStep(const std::vector<std::string>& nodes, const std::string& comment) {
    pb::Step* s = plan_.add_steps();
    for (const auto& n : nodes) s->add_nodes(n);
    if (!comment.empty()) s->set_comment(comment);
    return s;
  }
  int stepIndex() const { return plan_.steps_size() - 1; }
  void argT(pb::KernelLaunch* k, const std::string& name, int tref) {
    auto* a = k->add_args();
    a->set_name(name);
    a->set_tensor(tref);
    touch(tref, stepIndex());
  }
  void argI(pb::KernelLaunch* k, const std::string& name, const SymExpr& e) {
    auto* a = k->add_args();
    a->set_name(name);
    ir::symExprToProto(e, a->mutable_int_());
  }
  void argF(pb::KernelLaunch* k, const std::string& name, double v) {
    auto* a = k->add_args();
    a->set_name(name);
    a->set_real(v);
  }
  // A float argument of a library kernel: a number, or a lifted scalar input read when the
  // plan's inputs are bound (its value unknown at compile time).
  void argScalar(pb::KernelLaunch* k, const Node& n, const std::string& name, double def) {
    const Attr* a = arg(n, name);
    Value* in = a && a->isValue() ? ir::liftedScalarSource(a->value) : nullptr;
    if (in && !in->scalar_value) {
      auto* ka = k->add_args();
      ka->set_name(name);
      ka->set_scalar_input(scalar_inputs_.at(in));
      return;
    }
    argF(k, name, num(n, name, def));
  }
  void argB(pb::KernelLaunch* k, const std::string& name, bool v) {
    auto* a = k->add_args();
    a->set_name(name);
    a->set_flag(v);
  }
  void argS(pb::KernelLaunch* k, const std::string& name, const std::string& v) {
    auto* a = k->add_args();
    a->set_name(name);
    a->set_str(v);
  }
  void argD(pb::KernelLaunch* k, const std::string& name, DType t) {
    auto* a = k->add_args();
    a->set_name(name);
    a->set_dtype(toPlanDType(t));
  }

  // ------------------------------------------------------------------ values
  bool pending(const Value* v) const { return grp_.open && grp_.values.count(v); }
  // The value in memory (closes the open group when it holds the value).
  int mat(Value* v, const Node& ctx) {
    if (!v) unsupported(ctx, "a tensor argument is missing");
    if (pending(v)) closeGroup();
    auto it = mat_.find(v);
    if (it == mat_.end()) unsupported(ctx, "operand '" + v->name + "' has no lowered value");
    return it->second;
  }
  // A contiguous copy of tref (generated kernel) when it is not contiguous.
  int contiguous(int tref, const std::string& why_node) {
    if (isContiguous(trefs_[static_cast<size_t>(tref)])) return tref;
    return copyTo(tref, why_node);
  }
  int copyTo(int tref, const std::string& node) {
    closeGroup();
    const TRef t = trefs_[static_cast<size_t>(tref)];
    int g = loadOf(tref);
    GNode c;
    c.op = "cast";
    c.in = {g};
    c.dtype = t.dtype;
    c.shape = t.shape;
    c.origin = node;
    int id = cg_.add(c);
    int out = freshTensor(t.dtype, t.shape, t.name + "_contig");
    emitKernel({id}, t.shape, 0, {{id, out}});
    return out;
  }
  int loadOf(int tref) {
    auto it = loads_.find(tref);
    if (it != loads_.end()) return it->second;
    const TRef& t = trefs_[static_cast<size_t>(tref)];
    MemTensor mt{tref, t.dtype, t.shape, t.stride, t.offset};
    GNode g;
    g.op = "load";
    g.mem = cg_.addMem(mt);
    g.dtype = t.dtype;
    g.shape = t.shape;
    int id = cg_.add(g);
    loads_[tref] = id;
    return id;
  }
  // Operand for a generated node: pending gnode, or a load of the materialized tensor.
  int operand(Value* v, const Node& ctx) {
    if (!v) unsupported(ctx, "a tensor argument is missing");
    auto it = grp_.values.find(v);
    if (grp_.open && it != grp_.values.end()) return it->second;
    if (v->kind != ir::ValueKind::Tensor) return constSym(symOf(v, ctx));
    if (auto d = liftedValue(ctx, v->name, v)) return constNum(*d, v->type.dtype);
    auto m = mat_.find(v);
    if (m == mat_.end()) unsupported(ctx, "operand '" + v->name + "' has no lowered value");
    return loadOf(m->second);
  }
  int constNum(double v, DType dt) {
    GNode g;
    g.op = "const";
    g.f = {v};
    g.dtype = dt;
    return cg_.add(g);
  }
  int constSym(const SymExpr& e) {
    if (e.isInt()) return constNum(static_cast<double>(e.intValue()), DType::I64);
    GNode g;
    g.op = "const";
    g.f = {0};
    g.sv = {e};
    g.dtype = DType::I64;
    return cg_.add(g);
  }
  // A scalar/tensor argument as a gnode.
  int scalarOrTensor(const Node& n, const std::string& name) {
    const Attr* a = arg(n, name);
    if (!a) unsupported(n, "missing argument '" + name + "'");
    if (a->isValue()) return operand(a->value, n);
    if (a->kind == Attr::Kind::Bool) return constNum(a->b ? 1 : 0, DType::Bool);
    if (a->kind == Attr::Kind::Int) return constNum(static_cast<double>(a->i), DType::I64);
    if (auto d = a->asDouble()) return constNum(*d, DType::F64);
    if (auto s = a->asSize()) return constSym(*s);
    unsupported(n, "argument '" + name + "' is not a number or tensor");
  }
  int gnode(const std::string& op, const std::string& s, std::vector<int> in, DType dt, std::vector<SymExpr> shape,
            const std::string& origin) {
    GNode g;
    g.op = op;
    g.s = s;
    g.in = std::move(in);
    g.dtype = dt;
    g.shape = std::move(shape);
    g.origin = origin;
    return cg_.add(g);
  }

  // ------------------------------------------------------------------ generated groups
  struct Req {
    std::vector<SymExpr> shape;
    int kred = 0;
  };
  bool depReduce(int id) {
    auto it = dep_red_.find(id);
    if (it != dep_red_.end()) return it->second;
    const GNode& g = cg_.node(id);
    bool r = g.op == "reduce";
    if (!r && g.op != "load")
      for (int a : g.in) r = r || depReduce(a);
    dep_red_[id] = r;
    return r;
  }
  bool consumesPending(const Node& n) {
    for (Value* v : n.operands())
      if (pending(v)) return true;
    return false;
  }
  bool operandsDependOnReduce(const Node& n) {
    for (Value* v : n.operands())
      if (pending(v) && depReduce(grp_.values.at(v))) return true;
    return false;
  }
  // Whether node `n` (requirement `q`) may join the open group. Stored values whose shape
  // does not fit the group's domain get their own kernel at close time, so a node of another
  // shape may join when it reads the group's values (slices feeding a cat, a reshape).
  bool canJoin(const Node& n, const Req& q, bool index_remap) {
    if (!grp_.open || !opts_.fuse) return false;
    const auto& D = grp_.domain;
    bool reads = consumesPending(n);
    if (index_remap && operandsDependOnReduce(n)) return false;
    int64_t c = 1;
    for (Value* v : n.operands())
      if (pending(v)) c += cg_.cost(grp_.values.at(v));
    if (c > 4096) return false;
    if (q.kred > 0) {
      if (grp_.kred > 0) return q.kred == grp_.kred && q.shape == D;
      // A pointwise group becomes a row group only when nothing it holds is wider.
      if (!(q.shape == D || broadcastsTo(D, q.shape))) return false;
      for (int m : grp_.members)
        if (!broadcastsTo(cg_.node(m).shape, q.shape)) return false;
      return true;
    }
    if (grp_.kred > 0) return broadcastsTo(q.shape, D) || (reads && !operandsDependOnReduce(n));
    if (q.shape == D || broadcastsTo(q.shape, D) || broadcastsTo(D, q.shape)) return true;
    return reads;
  }
  void prepareGroup(const Node& n, const Req& q, bool index_remap) {
    if (grp_.open && !canJoin(n, q, index_remap)) closeGroup();
    if (!grp_.open) {
      grp_ = Group();
      grp_.open = true;
      grp_.domain = q.shape;
      grp_.kred = q.kred;
    } else if (q.kred > 0 && grp_.kred == 0) {
      grp_.kred = q.kred;
      grp_.domain = q.shape;
    } else if (grp_.kred == 0 && q.shape != grp_.domain) {
      // The domain is the largest shape in the group (values of other shapes that must be
      // stored get their own kernel at close).
      bool grow = broadcastsTo(grp_.domain, q.shape) || hint(numelOf(q.shape)) > hint(numelOf(grp_.domain));
      bool reshape = q.shape.size() > grp_.domain.size() && numelOf(q.shape) == numelOf(grp_.domain);
      if (grow || reshape) grp_.domain = q.shape;
    }
    grp_.nodes.insert(&n);
  }
  void member(int gn) { grp_.members.push_back(gn); }
  void define(const Value* v, int gn) {
    grp_.values[v] = gn;
    member(gn);
  }
  static bool usedOutside(const Value* v, const Group& g) {
    if (v->graphOutputUses() > 0) return true;
    for (const Node* u : v->users())
      if (!g.nodes.count(u)) return true;
    return false;
  }
  void closeGroup() {
    if (!grp_.open) return;
    Group gr = std::move(grp_);
    grp_ = Group();
    std::vector<std::pair<int, int>> outs;
    std::vector<std::pair<const Value*, int>> stored;
    // In value-id order, not the map's pointer order: buffer numbering, the kernel's output
    // order and so its source and hash must not depend on heap addresses.
    std::vector<std::pair<const Value*, int>> values(gr.values.begin(), gr.values.end());
    std::sort(values.begin(), values.end(), [](const auto& a, const auto& b) { return a.first->id < b.first->id; });
    for (const auto& [v, gn] : values) {
      if (!usedOutside(v, gr)) continue;
      int t = freshFor(v);
      outs.push_back({gn, t});
      stored.push_back({v, t});
    }
    std::sort(outs.begin(), outs.end(), [&](auto& a, auto& b) { return a.second < b.second; });
    std::vector<std::pair<int, int>> main, extra;
    for (auto& ot : outs) {
      const auto& s = cg_.node(ot.first).shape;
      if (broadcastsTo(s, gr.domain) || numelOf(s) == numelOf(gr.domain) || storedPerRow(s, gr.domain, gr.kred))
        main.push_back(ot);
      else
        extra.push_back(ot);
    }
    if (!main.empty()) emitKernel(gr.members, gr.domain, gr.kred, main);
    for (auto& ot : extra) {
      if (depReduce(ot.first))
        fail("lowering: node '{}': a value of shape [{}] computed from a row reduction over [{}] cannot be stored",
             cg_.node(ot.first).origin, shapeText(cg_.node(ot.first).shape), shapeText(gr.domain));
      emitKernel(gr.members, cg_.node(ot.first).shape, 0, {ot});
    }
    for (auto& [v, t] : stored) mat_[v] = t;
  }
  void emitKernel(const std::vector<int>& members, const std::vector<SymExpr>& domain, int kred,
                  const std::vector<std::pair<int, int>>& outs) {
    std::vector<StoredOutput> so;
    for (auto& [gn, t] : outs) {
      const TRef& tr = trefs_[static_cast<size_t>(t)];
      so.push_back({gn, MemTensor{t, tr.dtype, tr.shape, tr.stride, tr.offset}});
    }
    std::string name = "fx_k" + std::to_string(plan_.kernels_size());
    KernelSource ks = cg_.emit(name, members, domain, kred, so);
    auto* gk = plan_.add_kernels();
    gk->set_name(ks.name);
    gk->set_source(ks.source);
    gk->set_hash(sourceHash(ks.source));
    gk->set_kind(ks.kind);
    for (const auto& nn : ks.nodes) gk->add_nodes(nn);
    pb::Step* st = addStep(ks.nodes, ks.kind + " kernel, " + std::to_string(ks.nodes.size()) + " nodes");
    auto* k = st->mutable_kernel();
    k->set_kernel("gen." + ks.name);
    k->set_generated(plan_.kernels_size() - 1);
    for (const auto& e : ks.grid) ir::symExprToProto(e, k->add_grid());
    for (const auto& e : ks.block) ir::symExprToProto(e, k->add_block());
    ir::symExprToProto(I(0), k->mutable_shared_bytes());
    for (size_t q = 0; q < ks.tensor_args.size(); ++q) argT(k, "p" + std::to_string(q), ks.tensor_args[q]);
    for (size_t q = 0; q < ks.int_args.size(); ++q) argI(k, "e" + std::to_string(q), ks.int_args[q]);
    stats_.generated++;
    stats_.fused_nodes += static_cast<int64_t>(ks.nodes.size());
  }

  // ------------------------------------------------------------------ per-node lowering
  void lowerNode(Node& n);
  bool tryAlias(Node& n);
  void lowerGenerated(Node& n);
  bool lowerRowComposite(Node& n);
  void lowerConvolution(Node& n, DType odt, const std::vector<SymExpr>& osh, const std::string& o, Value* out);
  int trailingSource(Node& n, Value* x, const std::set<int64_t>& dims, std::vector<SymExpr>* shape);
  void lowerMatmul(Node& n);
  void batchOperands(Node& n, int& ta, TRef& A, int& tb, TRef& B);
  void lowerAttention(Node& n);
  attention::AttentionShapeFacts attentionFacts(int q4, int k4, int v4, int o4, bool has_mask, bool fp8_out) const;
  bool lowerFxfuseLibrary(Node& n);
  int inPlaceResidual(Node& n, Value* residual, const std::vector<SymExpr>& shape, DType dt, Value* res_out);
  bool lowerFusedAllReduceNorm(Node& n);
  void lowerFxfuseGenerated(Node& n);
  void lowerRotary(Node& n);
  void finish();

  // Generated-code building blocks for composite ops (used inside an open group).
  int gUnary(const std::string& f, int a, DType dt, const std::vector<SymExpr>& shape, const std::string& o) {
    return gnode("unary", f, {a}, dt, shape, o);
  }
  int gBin(const std::string& f, int a, int b, DType dt, const std::vector<SymExpr>& shape, const std::string& o) {
    return gnode("binary", f, {a, b}, dt, shape, o);
  }
  int gCast(int a, DType dt, const std::vector<SymExpr>& shape, const std::string& o) {
    if (cg_.node(a).dtype == dt) return a;
    return gnode("cast", "", {a}, dt, shape, o);
  }
  int gReduce(const std::string& kind, int a, int k, DType dt, const std::vector<SymExpr>& out_shape,
              const std::string& o) {
    int id = gnode("reduce", kind, {a}, dt, out_shape, o);
    cg_.node(id).iv = {k};
    return id;
  }
  std::vector<SymExpr> rowShape(const std::vector<SymExpr>& s, int k = 1) {
    std::vector<SymExpr> r = s;
    for (size_t q = r.size() - static_cast<size_t>(k); q < r.size(); ++q) r[q] = I(1);
    return r;
  }

  ir::Module& m_;
  ir::Graph& g_;
  LowerOptions opts_;
  std::map<std::string, int64_t> env_;
  std::map<std::string, ir::OpSchema, std::less<>> schema_cache_;
  pb::Plan plan_;
  std::vector<Buf> bufs_;
  std::vector<TRef> trefs_;
  std::map<const Value*, int> mat_;
  std::map<const Value*, int> scalar_inputs_;  // lifted scalar input -> index into Plan.inputs
  std::map<const Value*, SymExpr> syms_;
  std::map<int, int> loads_;
  std::map<int, bool> dep_red_;
  Codegen cg_;
  Group grp_;
  LowerStats stats_;
};

// ---------------------------------------------------------------------------------- views

struct ViewResult {
  std::vector<SymExpr> shape, stride;
  SymExpr offset;
};

bool Lowerer::tryAlias(Node& n) {
  const std::string& t = n.target;
  Value* self = nullptr;
  for (const char* nm : {"self", "input", "a", "tensor"}) {
    self = valArg(n, nm);
    if (self) break;
  }
  if (!self || self->kind != ir::ValueKind::Tensor) return false;
  bool is_view = isIdentityTarget(t) || t == "aten.view.default" || t == "aten.reshape.default" ||
                 t == "aten._unsafe_view.default" || t == "aten.permute.default" || t == "aten.transpose.int" ||
                 t == "aten.t.default" || t == "aten.unsqueeze.default" || t == "aten.squeeze.dim" ||
                 t == "aten.squeeze.dims" || t == "aten.squeeze.default" || t == "aten.expand.default" ||
                 t == "aten.slice.Tensor" || t == "aten.select.int" || t == "aten.as_strided.default" ||
                 t == "aten.split.Tensor" || t == "aten.split_with_sizes.default" || t == "aten.unbind.int" ||
                 t == "aten.chunk.default" || t == "fxfuse.all_reduce.default" || t == "vllm.all_reduce.default" ||
                 t == "_c10d_functional.all_reduce.default" || t == "aten.view.dtype" ||
                 t == "prims.convert_element_type.default" || t == "aten._to_copy.default" ||
                 t == "aten.to.dtype" || t == "aten.to.dtype_layout" || t == "aten.type_as.default";
  if (!is_view) return false;
  bool collective = t == "fxfuse.all_reduce.default" || t == "vllm.all_reduce.default" ||
                    t == "_c10d_functional.all_reduce.default";
  if (collective && opts_.world_size > 1) return false;
  if (t == "aten.dropout.default" && flag(n, "train", false)) unsupported(n, "dropout in training mode");
  // Casts are views only when the dtype does not change (`aten.to.device` may carry a dtype:
  // HF rotary's `inv_freq.to(device, dtype=f32)`).
  if (t == "prims.convert_element_type.default" || t == "aten._to_copy.default" || t == "aten.to.dtype" ||
      t == "aten.to.dtype_layout" || t == "aten.type_as.default" || t == "aten.view.dtype" || t == "aten.to.device") {
    if (!n.output(0) || n.output(0)->type.dtype != self->type.dtype) return false;
  }
  if (pending(self)) return false;  // an index remap inside the open group instead
  auto it = mat_.find(self);
  if (it == mat_.end()) return false;
  const TRef src = trefs_[static_cast<size_t>(it->second)];
  const size_t r = src.shape.size();

  auto make = [&](Value* out, std::vector<SymExpr> shape, std::vector<SymExpr> stride, SymExpr offset) {
    if (!out) return;
    TRef nt;
    nt.buffer = src.buffer;
    nt.dtype = src.dtype;
    nt.shape = std::move(shape);
    nt.stride = std::move(stride);
    nt.offset = std::move(offset);
    nt.name = out->name;
    mat_[out] = newTRef(std::move(nt));
    stats_.aliases++;
  };
  Value* out = n.output(0);
  if (isIdentityTarget(t) || collective || t == "prims.convert_element_type.default" || t == "aten._to_copy.default" ||
      t == "aten.to.dtype" || t == "aten.to.dtype_layout" || t == "aten.type_as.default" || t == "aten.view.dtype") {
    if (t == "aten.contiguous.default" && !isContiguous(src)) return false;
    make(out, src.shape, src.stride, src.offset);
    return true;
  }
  if (t == "aten.view.default" || t == "aten.reshape.default" || t == "aten._unsafe_view.default") {
    std::vector<SymExpr> shape = out ? out->type.shape : std::vector<SymExpr>{};
    if (!out) return true;
    if (isContiguous(src)) {
      make(out, shape, contiguousStrides(shape), src.offset);
      return true;
    }
    // torch's computeStride: split/merge within contiguous chunks (comparisons at the hints).
    std::vector<SymExpr> ns(shape.size());
    int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
    SymExpr chunk_base = r ? src.stride[r - 1] : I(1);
    SymExpr tensor_numel = I(1), view_numel = I(1);
    for (int64_t td = static_cast<int64_t>(r) - 1; td >= 0; --td) {
      tensor_numel = tensor_numel * src.shape[static_cast<size_t>(td)];
      if (td == 0 || (!isOne(src.shape[static_cast<size_t>(td - 1)]) &&
                      src.stride[static_cast<size_t>(td - 1)] != tensor_numel * chunk_base)) {
        while (view_d >= 0 && (hint(view_numel) < hint(tensor_numel) || isOne(shape[static_cast<size_t>(view_d)]))) {
          ns[static_cast<size_t>(view_d)] = view_numel * chunk_base;
          view_numel = view_numel * shape[static_cast<size_t>(view_d)];
          view_d--;
        }
        if (view_numel != tensor_numel) return false;
        if (td > 0) {
          chunk_base = src.stride[static_cast<size_t>(td - 1)];
          tensor_numel = I(1);
          view_numel = I(1);
        }
      }
    }
    if (view_d != -1) return false;
    make(out, shape, ns, src.offset);
    return true;
  }
  if (t == "aten.permute.default" || t == "aten.transpose.int" || t == "aten.t.default") {
    std::vector<int64_t> perm;
    if (t == "aten.permute.default") {
      perm = intList(n, "dims");
    } else {
      int64_t a = t == "aten.t.default" ? 0 : intArg(n, "dim0", 0), b = t == "aten.t.default" ? 1 : intArg(n, "dim1", 1);
      if (r < 2) {
        make(out, src.shape, src.stride, src.offset);
        return true;
      }
      a = normDim(n, a, r);
      b = normDim(n, b, r);
      for (size_t k = 0; k < r; ++k) perm.push_back(static_cast<int64_t>(k));
      std::swap(perm[static_cast<size_t>(a)], perm[static_cast<size_t>(b)]);
    }
    if (perm.size() != r) unsupported(n, "permutation of another rank");
    std::vector<SymExpr> sh, st;
    for (int64_t p : perm) {
      p = normDim(n, p, r);
      sh.push_back(src.shape[static_cast<size_t>(p)]);
      st.push_back(src.stride[static_cast<size_t>(p)]);
    }
    make(out, sh, st, src.offset);
    return true;
  }
  if (t == "aten.unsqueeze.default") {
    int64_t d = intArg(n, "dim", 0);
    if (d < 0) d += static_cast<int64_t>(r) + 1;
    if (d < 0 || d > static_cast<int64_t>(r)) unsupported(n, "unsqueeze dim out of range");
    auto sh = src.shape;
    auto st = src.stride;
    SymExpr s = static_cast<size_t>(d) < r ? src.shape[static_cast<size_t>(d)] * src.stride[static_cast<size_t>(d)] : I(1);
    sh.insert(sh.begin() + d, I(1));
    st.insert(st.begin() + d, s);
    make(out, sh, st, src.offset);
    return true;
  }
  if (t == "aten.squeeze.dim" || t == "aten.squeeze.dims" || t == "aten.squeeze.default") {
    std::set<int64_t> dims;
    if (t == "aten.squeeze.default") {
      for (size_t k = 0; k < r; ++k)
        if (isOne(src.shape[k])) dims.insert(static_cast<int64_t>(k));
    } else {
      for (int64_t d : t == "aten.squeeze.dim" ? std::vector<int64_t>{intArg(n, "dim", 0)} : intList(n, "dim"))
        if (r > 0 && isOne(src.shape[static_cast<size_t>(normDim(n, d, r))])) dims.insert(normDim(n, d, r));
    }
    std::vector<SymExpr> sh, st;
    for (size_t k = 0; k < r; ++k)
      if (!dims.count(static_cast<int64_t>(k))) {
        sh.push_back(src.shape[k]);
        st.push_back(src.stride[k]);
      }
    make(out, sh, st, src.offset);
    return true;
  }
  if (t == "aten.expand.default") {
    if (!out) return true;
    const auto& osh = out->type.shape;
    if (osh.size() < r) unsupported(n, "expand to a lower rank");
    std::vector<SymExpr> st(osh.size(), I(0));
    size_t off = osh.size() - r;
    for (size_t k = 0; k < r; ++k) st[k + off] = (isOne(src.shape[k]) && !isOne(osh[k + off])) ? I(0) : src.stride[k];
    make(out, osh, st, src.offset);
    return true;
  }
  if (out && (t == "aten.slice.Tensor" || t == "aten.expand.default") && out->type.shape.size() < r)
    unsupported(n, "output rank does not fit the input");
  if (t == "aten.slice.Tensor") {
    if (!out || r == 0) return false;
    int64_t d = normDim(n, intArg(n, "dim", 0), r);
    auto sh = src.shape, st = src.stride;
    SymExpr start = sizeArg(n, "start").value_or(I(0));
    if (start.isInt() && start.intValue() < 0) start = start + src.shape[static_cast<size_t>(d)];
    if (start.isInt() && start.intValue() < 0) start = I(0);
    SymExpr step = sizeArg(n, "step").value_or(I(1));
    checkSliceFits(n, start, step, src.shape[static_cast<size_t>(d)], out->type.shape[static_cast<size_t>(d)]);
    sh[static_cast<size_t>(d)] = out->type.shape[static_cast<size_t>(d)];
    st[static_cast<size_t>(d)] = st[static_cast<size_t>(d)] * step;
    make(out, sh, st, src.offset + start * src.stride[static_cast<size_t>(d)]);
    return true;
  }
  if (t == "aten.select.int") {
    if (!out) return true;
    int64_t d = normDim(n, intArg(n, "dim", 0), r);
    SymExpr idx = requiredSize(n, "index");
    if (idx.isInt() && idx.intValue() < 0) idx = idx + src.shape[static_cast<size_t>(d)];
    auto sh = src.shape, st = src.stride;
    sh.erase(sh.begin() + d);
    st.erase(st.begin() + d);
    make(out, sh, st, src.offset + idx * src.stride[static_cast<size_t>(d)]);
    return true;
  }
  if (t == "aten.as_strided.default") {
    auto sh = sizeList(n, "size"), st = sizeList(n, "stride");
    SymExpr off = sizeArg(n, "storage_offset").value_or(src.offset);
    make(out, sh, st, off);
    return true;
  }
  if (t == "aten.split.Tensor" || t == "aten.split_with_sizes.default" || t == "aten.chunk.default" ||
      t == "aten.unbind.int") {
    int64_t d = normDim(n, intArg(n, "dim", 0), r);
    SymExpr start = I(0);
    for (size_t q = 0; q < n.numOutputs(); ++q) {
      Value* o = n.output(q);
      SymExpr len;
      if (t == "aten.unbind.int") {
        len = I(1);
      } else if (o) {
        len = o->type.shape[static_cast<size_t>(d)];
      } else if (t == "aten.split_with_sizes.default") {
        len = sizeList(n, "split_sizes").at(q);
      } else if (t == "aten.split.Tensor") {
        len = requiredSize(n, "split_size");
      } else {
        unsupported(n, "chunk with an unused output");
      }
      if (o) {
        auto sh = src.shape, st = src.stride;
        SymExpr off = src.offset + start * src.stride[static_cast<size_t>(d)];
        if (t == "aten.unbind.int") {
          sh.erase(sh.begin() + d);
          st.erase(st.begin() + d);
        } else {
          sh[static_cast<size_t>(d)] = len;
        }
        make(o, sh, st, off);
      }
      start = start + len;
    }
    return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------- generated ops

void Lowerer::lowerGenerated(Node& n) {
  const std::string& t = n.target;
  Value* out = n.output(0);
  for (Value* v : n.outputs())
    if (!out && v) out = v;  // multi-output views with an unused first output
  if ((t == "aten.item.default" || t == "aten._local_scalar_dense.default") && out && out->kind == ir::ValueKind::SymInt)
    unsupported(n, "a data-dependent size (a tensor's value read back to size later tensors): launch plans need "
                   "every size before the first launch");
  if (!out || out->kind != ir::ValueKind::Tensor) unsupported(n, "no tensor output");
  const DType odt = out->type.dtype;
  const auto& osh = out->type.shape;
  const std::string& o = n.name;

  static const std::map<std::string, std::string> unary = {
      {"aten.neg.default", "neg"}, {"aten.abs.default", "abs"}, {"aten.exp.default", "exp"},
      {"aten.log.default", "log"}, {"aten.sqrt.default", "sqrt"}, {"aten.rsqrt.default", "rsqrt"},
      {"aten.reciprocal.default", "reciprocal"}, {"aten.sin.default", "sin"}, {"aten.cos.default", "cos"},
      {"aten.tanh.default", "tanh"}, {"aten.erf.default", "erf"}, {"aten.sigmoid.default", "sigmoid"},
      {"aten.silu.default", "silu"}, {"aten.relu.default", "relu"}, {"aten.logical_not.default", "not"},
      {"aten.bitwise_not.default", "bnot"}, {"aten.floor.default", "floor"}, {"aten.ceil.default", "ceil"},
      {"aten.round.default", "round"}, {"aten.sign.default", "sign"}, {"aten.square.default", "square"},
      {"aten.log1p.default", "log1p"}, {"aten.log_sigmoid.default", "log_sigmoid"}, {"aten.expm1.default", "expm1"}, {"aten.exp2.default", "exp2"},
      {"aten.log2.default", "log2"}, {"aten.log10.default", "log10"}, {"aten.trunc.default", "trunc"},
      {"aten.tan.default", "tan"}, {"aten.atan.default", "atan"}, {"aten.sinh.default", "sinh"},
      {"aten.cosh.default", "cosh"}, {"aten.softplus.default", "softplus"}, {"aten.isnan.default", "isnan"},
      {"aten.isinf.default", "isinf"},
  };
  static const std::map<std::string, std::string> binary = {
      {"aten.mul.Tensor", "mul"}, {"aten.mul.Scalar", "mul"}, {"aten.div.Tensor", "div"},
      {"aten.div.Scalar", "div"}, {"aten.pow.Tensor_Scalar", "pow"}, {"aten.pow.Tensor_Tensor", "pow"},
      {"aten.eq.Tensor", "eq"}, {"aten.eq.Scalar", "eq"}, {"aten.ne.Tensor", "ne"}, {"aten.ne.Scalar", "ne"},
      {"aten.lt.Tensor", "lt"}, {"aten.lt.Scalar", "lt"}, {"aten.le.Tensor", "le"}, {"aten.le.Scalar", "le"},
      {"aten.gt.Tensor", "gt"}, {"aten.gt.Scalar", "gt"}, {"aten.ge.Tensor", "ge"}, {"aten.ge.Scalar", "ge"},
      {"aten.logical_and.default", "and"}, {"aten.logical_or.default", "or"},
      {"aten.bitwise_and.Tensor", "band"}, {"aten.bitwise_or.Tensor", "bor"}, {"aten.__and__.Tensor", "band"},
      {"aten.__or__.Tensor", "bor"}, {"aten.maximum.default", "max"}, {"aten.minimum.default", "min"},
      {"aten.bitwise_xor.Tensor", "bxor"}, {"aten.floor_divide.default", "div_floor"},
      {"aten.floor_divide.Scalar", "div_floor"}, {"aten.remainder.Tensor", "rem"}, {"aten.remainder.Scalar", "rem"},
      {"aten.fmod.Tensor", "fmod"}, {"aten.fmod.Scalar", "fmod"}, {"aten.bitwise_xor.Scalar", "bxor"},
      {"aten.bitwise_and.Scalar", "band"}, {"aten.bitwise_or.Scalar", "bor"},
  };

  // argmax/argmin and max/min.dim with their indices: the rank-0 element of topk along dim
  // (first NaN, else the first extreme, as torch), viewed to the output's shape.
  bool indices_used = n.numOutputs() > 1 && n.output(1) && n.output(1)->numUses() > 0;
  if (t == "aten.argmax.default" || t == "aten.argmin.default" ||
      ((t == "aten.max.dim" || t == "aten.min.dim") && indices_used)) {
    Value* x = tensorArg(n, "self");
    if (x->type.shape.empty()) unsupported(n, "rank-0 input");
    bool arg_only = t.rfind("aten.arg", 0) == 0;
    prepareGroup(n, {osh, 0}, true);
    int src = operand(x, n);
    std::vector<SymExpr> xs = x->type.shape;
    int64_t d = 0;
    if (arg(n, "dim")) {
      d = normDim(n, intArg(n, "dim", 0), xs.size());
    } else {  // argmax over all elements: of the flattened input
      xs = {numelOf(xs)};
      src = gnode("remap", "reshape", {src}, x->type.dtype, xs, o);
      member(src);
    }
    std::vector<SymExpr> ks = xs;
    ks[static_cast<size_t>(d)] = I(1);
    for (size_t q = 0; q < n.numOutputs() && q < 2; ++q) {
      Value* ov = n.output(q);
      if (!ov) continue;
      int id = gnode("topk", "", {src}, ov->type.dtype, ks, o);
      cg_.node(id).iv = {d, t.find("max") != std::string::npos ? 1 : 0, arg_only || q == 1 ? 1 : 0, 1};
      if (ov->type.shape != ks) {
        member(id);
        id = gnode("remap", "reshape", {id}, ov->type.dtype, ov->type.shape, o);
      }
      define(ov, id);
    }
    return;
  }
  // Reductions and softmax need a row group.
  bool is_red = t == "aten.sum.dim_IntList" || t == "aten.mean.dim" || t == "aten.amax.default" ||
                t == "aten.amin.default" || t == "aten.sum.default" || t == "aten.mean.default" ||
                t == "aten.max.default" || t == "aten.min.default" || t == "aten.max.dim" || t == "aten.min.dim" ||
                t == "aten.logsumexp.default" || t == "aten.linalg_vector_norm.default";
  bool is_softmax = t == "aten.softmax.int" || t == "aten._softmax.default" || t == "aten.log_softmax.int" ||
                    t == "aten._log_softmax.default";
  if (is_red || is_softmax) {
    Value* x = tensorArg(n, "self");
    if (!x) unsupported(n, "missing input");
    const auto& ish = x->type.shape;
    size_t r = ish.size();
    std::set<int64_t> dims;
    if (is_softmax || t == "aten.max.dim" || t == "aten.min.dim") {
      dims.insert(normDim(n, intArg(n, "dim", -1), r));
    } else if (t == "aten.sum.default" || t == "aten.mean.default" || t == "aten.max.default" ||
               t == "aten.min.default") {
      for (size_t k = 0; k < r; ++k) dims.insert(static_cast<int64_t>(k));
    } else {
      auto l = intList(n, "dim");
      if (l.empty())
        for (size_t k = 0; k < r; ++k) dims.insert(static_cast<int64_t>(k));
      for (int64_t d : l) dims.insert(normDim(n, d, r));
    }
    int k = static_cast<int>(dims.size());
    if (is_softmax && *dims.begin() != static_cast<int64_t>(r) - 1)
      unsupported(n, "softmax over a dimension other than the last");
    if (r == 0) {  // reduction of a scalar: identity
      prepareGroup(n, {osh, 0}, false);
      define(out, gCast(operand(x, n), odt, osh, o));
      return;
    }
    std::vector<SymExpr> dsh;
    int xin = trailingSource(n, x, dims, &dsh);
    if (is_softmax) {
      bool log = t == "aten.log_softmax.int" || t == "aten._log_softmax.default";
      DType ct = cg_.node(xin).dtype == DType::F64 ? DType::F64 : DType::F32;
      auto rs = rowShape(ish, 1);
      int xf = gCast(xin, ct, ish, o);
      int mx = gReduce("max", xf, 1, ct, rs, o);
      int sh = gBin("sub", xf, mx, ct, ish, o);
      int e = gUnary("exp", sh, ct, ish, o);
      int s = gReduce("sum", e, 1, ct, rs, o);
      int res = log ? gBin("sub", sh, gUnary("log", s, ct, rs, o), ct, ish, o) : gBin("div", e, s, ct, ish, o);
      for (int id : {xf, mx, sh, e, s}) member(id);
      define(out, gCast(res, odt, osh, o));
      return;
    }
    if (t == "aten.linalg_vector_norm.default") {
      // the 2-norm: sqrt(sum(x^2)) in f32 (f64 for f64 input), rounded once
      if (num(n, "ord", 2.0) != 2.0) unsupported(n, "vector norms other than ord=2");
      DType ct = cg_.node(xin).dtype == DType::F64 ? DType::F64 : DType::F32;
      auto rs = rowShape(dsh, k);
      int xf = gCast(xin, ct, dsh, o);
      int sq = gUnary("square", xf, ct, dsh, o);
      int sm = gReduce("sum", sq, k, ct, rs, o);
      int res = gUnary("sqrt", sm, ct, rs, o);
      int cast = gCast(res, odt, rs, o);
      for (int id : {xf, sq, sm, res}) member(id);
      if (cast != res) member(cast);
      define(out, gnode("remap", "reshape", {cast}, odt, osh, o));
      return;
    }
    if (t == "aten.logsumexp.default") {
      // m + log(sum(exp(x - m))) with m the row maximum, taken as 0 when infinite (a row of
      // -inf gives -inf, not NaN), in f32 (f64 for f64 input) as torch computes it
      DType ct = cg_.node(xin).dtype == DType::F64 ? DType::F64 : DType::F32;
      auto rs = rowShape(dsh, k);
      int xf = gCast(xin, ct, dsh, o);
      int mx = gReduce("max", xf, k, ct, rs, o);
      int m0 = gUnary("finite_or_zero", mx, ct, rs, o);
      int sh = gBin("sub", xf, m0, ct, dsh, o);
      int e = gUnary("exp", sh, ct, dsh, o);
      int sm = gReduce("sum", e, k, ct, rs, o);
      int res = gBin("add", gUnary("log", sm, ct, rs, o), m0, ct, rs, o);
      int cast = gCast(res, odt, rs, o);
      for (int id : {xf, mx, m0, sh, e, sm, res}) member(id);
      if (cast != res) member(cast);
      define(out, gnode("remap", "reshape", {cast}, odt, osh, o));
      return;
    }
    std::string kind = (t.find("sum") != std::string::npos) ? "sum" : (t.find("mean") != std::string::npos) ? "mean"
                       : (t.find("max") != std::string::npos) ? "max" : "min";
    int src = xin;
    if (auto dt = dtypeArg(n, "dtype")) src = gCast(xin, *dt, dsh, o);
    if (kind == "sum" && !ir::isFloating(cg_.node(src).dtype) && cg_.node(src).dtype != DType::I64)
      src = gCast(src, DType::I64, dsh, o);
    int red = gReduce(kind, src, k, odt, osh, o);
    if (src != xin) member(src);
    define(out, red);
    return;
  }

  Req req{osh, 0};
  bool remap = t == "aten.view.default" || t == "aten.reshape.default" || t == "aten._unsafe_view.default" ||
               t == "aten.permute.default" || t == "aten.transpose.int" || t == "aten.t.default" ||
               t == "aten.slice.Tensor" || t == "aten.select.int" || t == "aten.unsqueeze.default" ||
               t == "aten.squeeze.dim" || t == "aten.squeeze.dims" || t == "aten.squeeze.default" ||
               t == "aten.expand.default" || t == "aten.copy.default" || t == "aten.cat.default" ||
               t == "aten.stack.default" ||
               t == "aten.constant_pad_nd.default" || t == "aten.index.Tensor" || t == "aten._unsafe_index.Tensor" ||
               t == "aten.index_select.default" || t == "aten.gather.default" || t == "aten.embedding.default" ||
               t == "aten.slice_scatter.default" || t == "aten.select_scatter.default" ||
               t == "aten.cumsum.default" || t == "aten.triu.default" || t == "aten.tril.default" ||
               t == "aten.split.Tensor" || t == "aten.split_with_sizes.default" ||
               t == "aten.chunk.default" || t == "aten.unbind.int" || t == "aten.contiguous.default" ||
               t == "aten.as_strided.default" || t == "aten.diff.default" || t == "aten.repeat.default" ||
               t == "aten.repeat_interleave.self_int" || t == "aten.scatter.src" || t == "aten.scatter.value" ||
               t == "aten.scatter_add.default" || t == "aten.index_add.default" || t == "aten.pad.default" ||
               t == "aten.index_put.default" || t == "aten.histc.default" || t == "aten._grouped_mm.default" ||
               t == "aten.convolution.default" || t == "aten.conv1d.default";
  if (t == "aten.topk.default" || t == "aten.sort.default" || t == "aten.sort.stable") {
    // values and indices: the element of each rank (codegen's topk node)
    Value* x = tensorArg(n, "self");
    if (!x || x->kind != ir::ValueKind::Tensor) unsupported(n, "missing input tensor");
    size_t r = x->type.shape.size();
    if (r == 0) unsupported(n, "rank-0 input");
    int64_t d = normDim(n, intArg(n, "dim", -1), r);
    bool largest = t == "aten.topk.default" ? flag(n, "largest", true) : flag(n, "descending", false);
    prepareGroup(n, {osh, 0}, true);  // reads other positions: an index remap of its operand
    int src = operand(x, n);
    for (size_t q = 0; q < 2 && q < n.numOutputs(); ++q) {
      Value* ov = n.output(q);
      if (!ov) continue;
      int id = gnode("topk", "", {src}, ov->type.dtype, ov->type.shape, o);
      cg_.node(id).iv = {d, largest ? 1 : 0, static_cast<int64_t>(q)};
      define(ov, id);
    }
    return;
  }
  if (n.numOutputs() > 1) {
    // Multi-output views (split/chunk/unbind): each output is a slice/select of the input.
    Value* self = valArg(n, "self");
    if (!self || self->kind != ir::ValueKind::Tensor) unsupported(n, "no lowering for this op");
    prepareGroup(n, {self->type.shape, 0}, true);
  } else {
    prepareGroup(n, req, remap);
  }

  if (auto u = unary.find(t); u != unary.end()) {
    int a = operand(valArg(n, "self"), n);
    std::string f = u->second;
    DType ct = ir::isFloating(odt) ? odt : cg_.node(a).dtype;
    if (f == "not") ct = DType::Bool;
    int res = gUnary(f, a, ct == DType::Bool && f != "not" && f != "bnot" ? odt : ct, osh, o);
    if (f == "softplus") cg_.node(res).f = {num(n, "beta", 1.0), num(n, "threshold", 20.0)};
    define(out, gCast(res, odt, osh, o));
    return;
  }
  if (t == "aten.gelu.default") {
    int a = operand(valArg(n, "self"), n);
    define(out, gUnary(str(n, "approximate", "none") == "tanh" ? "gelu_tanh" : "gelu", a, odt, osh, o));
    return;
  }
  if (auto b = binary.find(t); b != binary.end()) {
    int a = scalarOrTensor(n, "self");
    int c = scalarOrTensor(n, t.find("pow") != std::string::npos ? "exponent" : "other");
    std::string f = b->second;
    DType ct = odt;
    if (f == "eq" || f == "ne" || f == "lt" || f == "le" || f == "gt" || f == "ge" || f == "and" || f == "or")
      ct = DType::Bool;
    define(out, gBin(f, a, c, ct, osh, o));
    return;
  }
  if (t == "aten.div.Tensor_mode") {
    int a = operand(valArg(n, "self"), n);
    int c = scalarOrTensor(n, "other");
    std::string mode = str(n, "rounding_mode", "");
    define(out, gBin(mode == "floor" ? "div_floor" : mode == "trunc" ? "div_trunc" : "div", a, c, odt, osh, o));
    return;
  }
  if (t == "aten.pow.Scalar") {
    int a = scalarOrTensor(n, "self");
    int c = operand(valArg(n, "exponent"), n);
    define(out, gBin("pow", a, c, odt, osh, o));
    return;
  }
  if (t == "aten.add.Tensor" || t == "aten.add.Scalar" || t == "aten.sub.Tensor" || t == "aten.sub.Scalar" ||
      t == "aten.rsub.Scalar" || t == "aten.rsub.Tensor") {
    int a = scalarOrTensor(n, "self");  // core ATen exports write `1 - x` as sub.Tensor(self=1, other=x)
    int c = scalarOrTensor(n, "other");
    double alpha = num(n, "alpha", 1.0);
    if (alpha != 1.0) c = gBin("mul", c, constNum(alpha, DType::F64), odt, cg_.node(c).shape, o), member(c);
    bool rs = t.find("rsub") != std::string::npos;
    define(out, gBin(t.find("add") != std::string::npos ? "add" : "sub", rs ? c : a, rs ? a : c, odt, osh, o));
    return;
  }
  if (t == "aten.where.self" || t == "aten.where.ScalarSelf" || t == "aten.where.ScalarOther" ||
      t == "aten.where.Scalar") {
    int c = operand(valArg(n, "condition"), n);
    int a = scalarOrTensor(n, "self"), b = scalarOrTensor(n, "other");
    define(out, gnode("where", "", {c, a, b}, odt, osh, o));
    return;
  }
  if (t == "aten.masked_fill.Scalar" || t == "aten.masked_fill.Tensor") {
    int a = operand(valArg(n, "self"), n);
    int m = operand(valArg(n, "mask"), n);
    int v = scalarOrTensor(n, "value");
    define(out, gnode("where", "", {m, v, a}, odt, osh, o));
    return;
  }
  if (t == "aten.clamp.Tensor" || t == "aten.clamp_min.Tensor" || t == "aten.clamp_max.Tensor") {
    // Tensor bounds: maximum with min, then minimum with max (NaN propagates, as torch's).
    int v = operand(valArg(n, "self"), n);
    if (Value* lo = valArg(n, "min")) v = gBin("max", v, operand(lo, n), odt, osh, o);
    if (Value* hi = valArg(n, "max")) v = gBin("min", v, operand(hi, n), odt, osh, o);
    define(out, v);
    return;
  }
  if (t == "aten.clamp.default" || t == "aten.clamp_min.default" || t == "aten.clamp_max.default") {
    int a = operand(valArg(n, "self"), n);
    int id = gnode("clamp", "", {a}, odt, osh, o);
    GNode& g = cg_.node(id);
    const Attr* lo = arg(n, "min");
    const Attr* hi = arg(n, "max");
    g.f = {lo ? lo->asDouble().value_or(0) : 0.0, hi ? hi->asDouble().value_or(0) : 0.0};
    g.iv = {lo ? 1 : 0, hi ? 1 : 0};
    define(out, id);
    return;
  }
  if (t == "prims.convert_element_type.default" || t == "aten._to_copy.default" || t == "aten.to.dtype" ||
      t == "aten.to.dtype_layout" || t == "aten.type_as.default" || t == "aten.to.device" || isIdentityTarget(t) ||
      ((t == "fxfuse.all_reduce.default" || t == "vllm.all_reduce.default" ||
        t == "_c10d_functional.all_reduce.default") && opts_.world_size <= 1)) {
    Value* x = valArg(n, "self");
    if (!x) x = valArg(n, "a");
    if (!x) x = valArg(n, "input");
    if (!x) x = valArg(n, "tensor");
    if (!x) unsupported(n, "missing input");
    int a = operand(x, n);
    define(out, gnode("cast", "", {a}, odt, osh, o));
    return;
  }
  if (t == "aten.full.default" || t == "aten.zeros.default" || t == "aten.ones.default" ||
      t == "aten.scalar_tensor.default" || t == "aten.full_like.default" || t == "aten.zeros_like.default" ||
      t == "aten.ones_like.default" || t == "aten.new_ones.default" || t == "aten.new_zeros.default" ||
      t == "aten.new_full.default") {
    double v = t.find("zeros") != std::string::npos ? 0.0 : t.find("ones") != std::string::npos ? 1.0 : 0.0;
    if (t == "aten.full.default" || t == "aten.full_like.default" || t == "aten.new_full.default")
      v = num(n, "fill_value", 0.0);
    if (t == "aten.scalar_tensor.default") v = num(n, "s", 0.0);
    int c = constNum(v, odt);
    member(c);
    define(out, gnode("remap", "expand", {c}, odt, osh, o));
    return;
  }
  if (t == "aten.arange.default" || t == "aten.arange.start" || t == "aten.arange.start_step" ||
      t == "prims.iota.default") {
    double start = 0, step = 1;
    if (t == "aten.arange.start" || t == "aten.arange.start_step") start = num(n, "start", 0);
    if (t == "aten.arange.start_step") step = num(n, "step", 1);
    if (t == "prims.iota.default") {
      start = static_cast<double>(hint(requiredSize(n, "start")));
      step = static_cast<double>(hint(requiredSize(n, "step")));
    }
    int id = gnode("iota", "", {}, odt, osh, o);
    cg_.node(id).f = {start, step};
    cg_.node(id).iv = {0};
    define(out, id);
    return;
  }
  if (t == "aten.copy.default") {
    // functional copy_: src's values broadcast to self's shape in self's dtype (self is only
    // the destination's metadata)
    Value* src = tensorArg(n, "src");
    if (!src) unsupported(n, "a tensor argument is missing");
    checkBroadcastsTo(n, src->type.shape, osh, "src");
    int v = gnode("remap", "expand", {operand(src, n)}, src->type.dtype, osh, o);
    if (src->type.dtype != odt) {
      member(v);
      v = gnode("cast", "", {v}, odt, osh, o);
    }
    define(out, v);
    return;
  }
  if (t == "aten.eye.default" || t == "aten.eye.m") {
    // ones on the main diagonal of an [n, m] matrix
    if (osh.size() != 2) unsupported(n, "eye must produce a matrix");
    define(out, gnode("eye", "", {}, odt, osh, o));
    return;
  }
  if (t == "aten.view.default" || t == "aten.reshape.default" || t == "aten._unsafe_view.default" ||
      t == "aten.as_strided.default") {
    if (t == "aten.as_strided.default") unsupported(n, "as_strided of a computed value");
    define(out, gnode("remap", "reshape", {operand(valArg(n, "self"), n)}, odt, osh, o));
    return;
  }
  if (t == "aten.permute.default" || t == "aten.transpose.int" || t == "aten.t.default") {
    Value* x = tensorArg(n, "self");
    size_t r = x->type.shape.size();
    std::vector<int64_t> perm;
    if (t == "aten.permute.default") {
      for (int64_t p : intList(n, "dims")) perm.push_back(normDim(n, p, r));
      if (perm.size() != r) unsupported(n, "permutation of another rank");
    } else {
      for (size_t k = 0; k < r; ++k) perm.push_back(static_cast<int64_t>(k));
      if (r >= 2) {
        int64_t a = t == "aten.t.default" ? 0 : normDim(n, intArg(n, "dim0", 0), r);
        int64_t b = t == "aten.t.default" ? 1 : normDim(n, intArg(n, "dim1", 1), r);
        std::swap(perm[static_cast<size_t>(a)], perm[static_cast<size_t>(b)]);
      }
    }
    int id = gnode("remap", "permute", {operand(x, n)}, odt, osh, o);
    cg_.node(id).iv = perm;
    define(out, id);
    return;
  }
  if (t == "aten.slice.Tensor") {
    Value* x = tensorArg(n, "self");
    size_t r = x->type.shape.size();
    int64_t d = normDim(n, intArg(n, "dim", 0), r);
    SymExpr start = sizeArg(n, "start").value_or(I(0));
    if (start.isInt() && start.intValue() < 0) start = start + x->type.shape[static_cast<size_t>(d)];
    SymExpr step = sizeArg(n, "step").value_or(I(1));
    if (static_cast<size_t>(d) < std::min(r, osh.size()))
      checkSliceFits(n, start, step, x->type.shape[static_cast<size_t>(d)], osh[static_cast<size_t>(d)]);
    int id = gnode("remap", "slice", {operand(x, n)}, odt, osh, o);
    cg_.node(id).iv = {d};
    cg_.node(id).sv = {start, step};
    define(out, id);
    return;
  }
  if (t == "aten.select.int") {
    Value* x = tensorArg(n, "self");
    int64_t d = normDim(n, intArg(n, "dim", 0), x->type.shape.size());
    SymExpr idx = requiredSize(n, "index");
    if (idx.isInt() && idx.intValue() < 0) idx = idx + x->type.shape[static_cast<size_t>(d)];
    int id = gnode("remap", "select", {operand(x, n)}, odt, osh, o);
    cg_.node(id).iv = {d};
    cg_.node(id).sv = {idx};
    define(out, id);
    return;
  }
  if (t == "aten.unsqueeze.default") {
    int64_t d = intArg(n, "dim", 0);
    if (d < 0) d += static_cast<int64_t>(osh.size());
    int id = gnode("remap", "unsqueeze", {operand(valArg(n, "self"), n)}, odt, osh, o);
    cg_.node(id).iv = {d};
    define(out, id);
    return;
  }
  if (t == "aten.squeeze.dim" || t == "aten.squeeze.dims" || t == "aten.squeeze.default") {
    Value* x = tensorArg(n, "self");
    size_t r = x->type.shape.size();
    std::vector<int64_t> dims;
    for (size_t k = 0; k < r; ++k) {
      bool listed = t == "aten.squeeze.default";
      if (t == "aten.squeeze.dim") listed = normDim(n, intArg(n, "dim", 0), r) == static_cast<int64_t>(k);
      if (t == "aten.squeeze.dims")
        for (int64_t d : intList(n, "dim")) listed = listed || normDim(n, d, r) == static_cast<int64_t>(k);
      if (listed && isOne(x->type.shape[k])) dims.push_back(static_cast<int64_t>(k));
    }
    int id = gnode("remap", "squeeze", {operand(x, n)}, odt, osh, o);
    cg_.node(id).iv = dims;
    define(out, id);
    return;
  }
  if (t == "aten.expand.default") {
    define(out, gnode("remap", "expand", {operand(valArg(n, "self"), n)}, odt, osh, o));
    return;
  }
  if (t == "aten.split.Tensor" || t == "aten.split_with_sizes.default" || t == "aten.chunk.default" ||
      t == "aten.unbind.int") {
    Value* x = tensorArg(n, "self");
    size_t r = x->type.shape.size();
    int64_t d = normDim(n, intArg(n, "dim", 0), r);
    int src = operand(x, n);
    SymExpr start = I(0);
    for (size_t q = 0; q < n.numOutputs(); ++q) {
      Value* ov = n.output(q);
      if (t == "aten.unbind.int") {
        if (ov) {
          int id = gnode("remap", "select", {src}, ov->type.dtype, ov->type.shape, o);
          cg_.node(id).iv = {d};
          cg_.node(id).sv = {I(static_cast<int64_t>(q))};
          define(ov, id);
        }
        continue;
      }
      SymExpr len;
      if (ov) len = ov->type.shape[static_cast<size_t>(d)];
      else if (t == "aten.split_with_sizes.default") len = sizeList(n, "split_sizes").at(q);
      else if (t == "aten.split.Tensor") len = requiredSize(n, "split_size");
      else unsupported(n, "chunk with an unused output");
      if (ov && ov->numUses() > 0) {
        int id = gnode("remap", "slice", {src}, ov->type.dtype, ov->type.shape, o);
        cg_.node(id).iv = {d};
        cg_.node(id).sv = {start, I(1)};
        define(ov, id);
      }
      start = start + len;
    }
    return;
  }
  if (t == "aten.cat.default" || t == "aten.stack.default") {
    const Attr* l = arg(n, "tensors");
    if (!l || l->kind != Attr::Kind::List) unsupported(n, "cat without a tensor list");
    int64_t d = intArg(n, "dim", 0);
    d = d < 0 ? d + static_cast<int64_t>(osh.size()) : d;
    std::vector<int> ins;
    for (const auto& e : l->list) {
      if (!e.isValue()) unsupported(n, "cat of a non-tensor");
      int a = operand(e.value, n);
      if (t == "aten.stack.default") {
        auto sh = cg_.node(a).shape;
        sh.insert(sh.begin() + d, I(1));
        int u = gnode("remap", "unsqueeze", {a}, cg_.node(a).dtype, sh, o);
        cg_.node(u).iv = {d};
        member(u);
        a = u;
      }
      ins.push_back(gCast(a, odt, cg_.node(a).shape, o));
      if (ins.back() != a) member(ins.back());
    }
    int id = gnode("cat", "", ins, odt, osh, o);
    cg_.node(id).iv = {d};
    define(out, id);
    return;
  }
  if (t == "aten.repeat.default") {
    Value* x = tensorArg(n, "self");
    if (sizeList(n, "repeats").size() < x->type.shape.size()) unsupported(n, "fewer repeats than dimensions");
    define(out, gnode("remap", "repeat", {operand(x, n)}, odt, osh, o));
    return;
  }
  if (t == "aten.repeat_interleave.self_int") {
    Value* x = tensorArg(n, "self");
    int src = operand(x, n);
    int64_t d = 0;
    if (arg(n, "dim")) {
      d = normDim(n, intArg(n, "dim", 0), x->type.shape.size());
    } else if (x->type.shape.size() != 1) {  // dim=None repeats the flattened input
      std::vector<SymExpr> flat{numelOf(x->type.shape)};
      src = gnode("remap", "reshape", {src}, x->type.dtype, flat, o);
      member(src);
    }
    int id = gnode("remap", "repeat_interleave", {src}, odt, osh, o);
    cg_.node(id).iv = {d};
    cg_.node(id).sv = {sizeArg(n, "repeats").value_or(I(1))};
    define(out, id);
    return;
  }
  if (t == "aten.scatter.src" || t == "aten.scatter.value" || t == "aten.scatter_add.default" ||
      t == "aten.index_add.default") {
    Value* x = tensorArg(n, "self");
    Value* index = valArg(n, "index");
    if (!index) unsupported(n, "missing index tensor");
    size_t r = x->type.shape.size();
    int64_t d = normDim(n, intArg(n, "dim", 0), r);
    bool index_add = t == "aten.index_add.default";
    if (index_add ? index->type.shape.size() != 1 : index->type.shape.size() != r)
      unsupported(n, "index tensor of an unexpected rank");
    if (t == "aten.scatter.src" || t == "aten.scatter.value")
      if (const Attr* red = arg(n, "reduce"); red) unsupported(n, "scatter with a reduce mode");
    // The generated kernel reads src at index's coordinates and self's other dims: index may
    // not be larger than either (torch's rule), else the kernel would read out of bounds.
    auto notLarger = [&](const SymExpr& a, const SymExpr& b) {
      return a == b || (a.isInt() && b.isInt() && a.intValue() <= b.intValue());
    };
    Value* srcv = t == "aten.scatter.value" ? nullptr : valArg(n, index_add ? "source" : "src");
    if (!index_add) {
      for (size_t k = 0; k < r; ++k) {
        const SymExpr& ik = index->type.shape[k];
        if (srcv && (srcv->type.shape.size() != r || !notLarger(ik, srcv->type.shape[k])))
          unsupported(n, "index is larger than src");
        if (static_cast<int64_t>(k) != d && !notLarger(ik, x->type.shape[k]))
          unsupported(n, "index is larger than self outside the scatter dim");
      }
    } else if (!srcv || srcv->type.shape.size() != r || !notLarger(index->type.shape[0], srcv->type.shape[d])) {
      unsupported(n, "index_add source does not match the index");
    }
    int src = t == "aten.scatter.value" ? scalarOrTensor(n, "value") : operand(srcv, n);
    int id = gnode("scatter", "", {operand(x, n), operand(index, n), src}, odt, osh, o);
    cg_.node(id).iv = {d, index_add ? 2 : t == "aten.scatter_add.default" ? 1 : 0};
    cg_.node(id).f = {num(n, "alpha", 1.0)};
    define(out, id);
    return;
  }
  if (t == "aten.index_put.default") {
    // self[idx] = values (or +=, accumulate) with one 1-D index tensor on dim 0 (token
    // permutation back into a [tokens, hidden] buffer): index_add / index_copy along dim 0.
    Value* x = tensorArg(n, "self");
    Value* values = tensorArg(n, "values");
    const Attr* l = arg(n, "indices");
    if (!l || l->kind != Attr::Kind::List || l->list.size() != 1 || !l->list[0].isValue())
      unsupported(n, "index_put with other than one index tensor");
    Value* index = l->list[0].value;
    std::vector<SymExpr> want = x->type.shape;
    if (index->type.shape.size() != 1 || want.empty()) unsupported(n, "index_put with an index that is not 1-D");
    want[0] = index->type.shape[0];
    if (index->type.dtype == DType::Bool || values->type.shape != want)
      unsupported(n, "index_put with a boolean index or values that are not [index, ...]");
    int id = gnode("scatter", "", {operand(x, n), operand(index, n), operand(values, n)}, odt, osh, o);
    cg_.node(id).iv = {0, flag(n, "accumulate", false) ? 2 : 3};
    cg_.node(id).f = {1.0};
    define(out, id);
    return;
  }
  if (t == "aten._grouped_mm.default") {
    // MoE expert GEMMs, self [T, K] rows grouped by offs over mat2 [G, K, N]: codegen's
    // grouped_mm node (a generated dot product per output element, f64 accumulation as the
    // interpreter's; correct for any routing, not fast).
    Value* a = tensorArg(n, "self");
    Value* b = tensorArg(n, "mat2");
    Value* offs = valArg(n, "offs");
    if (!a || !b || !offs || offs->kind != ir::ValueKind::Tensor || valArg(n, "bias"))
      unsupported(n, "only self [T, K], mat2 [G, K, N] and offs [G] without bias are supported");
    if (a->type.shape.size() != 2 || b->type.shape.size() != 3 || offs->type.shape.size() != 1)
      unsupported(n, "only self [T, K], mat2 [G, K, N] and offs [G] are supported");
    // The generated kernel reads within these shapes only when they agree.
    if (a->type.shape[1] != b->type.shape[1] || offs->type.shape[0] != b->type.shape[0] ||
        osh != std::vector<SymExpr>{a->type.shape[0], b->type.shape[2]})
      unsupported(n, "self, mat2, offs and the output shape do not agree");
    int id = gnode("grouped_mm", "", {operand(a, n), operand(b, n), operand(offs, n)}, odt, osh, o);
    define(out, id);
    return;
  }
  if (t == "aten.convolution.default" || t == "aten.conv1d.default") {
    lowerConvolution(n, odt, osh, o, out);
    return;
  }
  if (t == "aten.histc.default") {
    // counts per bin (MoE routing: tokens per expert): codegen's histc node
    Value* x = tensorArg(n, "self");
    if (!x || x->kind != ir::ValueKind::Tensor) unsupported(n, "missing input tensor");
    int64_t bins = intArg(n, "bins", 100);
    if (bins <= 0) unsupported(n, "bins must be positive");
    int id = gnode("histc", "", {operand(x, n)}, odt, osh, o);
    cg_.node(id).iv = {bins};
    cg_.node(id).f = {num(n, "min", 0.0), num(n, "max", 0.0)};
    define(out, id);
    return;
  }
  if (t == "aten.pad.default") {
    if (str(n, "mode", "constant") != "constant") unsupported(n, "only constant padding is supported");
    int id = gnode("pad", "", {operand(valArg(n, "self"), n)}, odt, osh, o);
    cg_.node(id).sv = sizeList(n, "pad");
    cg_.node(id).f = {num(n, "value", 0.0)};
    define(out, id);
    return;
  }
  if (t == "aten.constant_pad_nd.default") {
    auto pad = sizeList(n, "pad");
    int id = gnode("pad", "", {operand(valArg(n, "self"), n)}, odt, osh, o);
    cg_.node(id).sv = pad;
    cg_.node(id).f = {num(n, "value", 0.0)};
    define(out, id);
    return;
  }
  if (t == "aten.embedding.default") {
    int w = operand(valArg(n, "weight"), n);
    int ix = operand(valArg(n, "indices"), n);
    int id = gnode("gather", "", {w, ix}, odt, osh, o);
    cg_.node(id).iv = {0, 2};
    define(out, id);
    return;
  }
  if (t == "aten.index_select.default" || t == "aten.gather.default") {
    Value* x = tensorArg(n, "self");
    int64_t d = normDim(n, intArg(n, "dim", 0), x->type.shape.size());
    int id = gnode("gather", "", {operand(x, n), operand(valArg(n, "index"), n)}, odt, osh, o);
    cg_.node(id).iv = {d, t == "aten.index_select.default" ? 1 : 3};
    define(out, id);
    return;
  }
  if (t == "aten.index.Tensor" || t == "aten._unsafe_index.Tensor") {
    Value* x = tensorArg(n, "self");
    const Attr* l = arg(n, "indices");
    if (!l || l->kind != Attr::Kind::List) unsupported(n, "index without an index list");
    int64_t first = -1, last = -1;
    std::vector<int> ins{operand(x, n)};
    for (size_t k = 0; k < l->list.size(); ++k) {
      const Attr& e = l->list[k];
      if (e.isNone()) continue;
      if (!e.isValue()) unsupported(n, "non-tensor index");
      if (e.value->type.dtype == DType::Bool || e.value->type.dtype == DType::U8)
        unsupported(n, "boolean mask indexing");
      if (first < 0) first = static_cast<int64_t>(k);
      if (last >= 0 && last != static_cast<int64_t>(k) - 1) unsupported(n, "non-adjacent advanced indices");
      last = static_cast<int64_t>(k);
      ins.push_back(operand(e.value, n));
    }
    if (first < 0) unsupported(n, "index without index tensors");
    int id = gnode("index", "", ins, odt, osh, o);
    cg_.node(id).iv = {first};
    define(out, id);
    return;
  }
  if (t == "aten.slice_scatter.default") {
    Value* x = tensorArg(n, "self");
    int64_t d = normDim(n, intArg(n, "dim", 0), x->type.shape.size());
    SymExpr start = sizeArg(n, "start").value_or(I(0));
    SymExpr end = sizeArg(n, "end").value_or(x->type.shape[static_cast<size_t>(d)]);
    if (hint(end) > hint(x->type.shape[static_cast<size_t>(d)])) end = x->type.shape[static_cast<size_t>(d)];
    int id = gnode("slice_scatter", "", {operand(x, n), operand(valArg(n, "src"), n)}, odt, osh, o);
    cg_.node(id).iv = {d};
    cg_.node(id).sv = {start, end, sizeArg(n, "step").value_or(I(1))};
    define(out, id);
    return;
  }
  if (t == "aten.select_scatter.default") {
    // out = self with out[.., index, ..] (along dim) = src
    Value* x = tensorArg(n, "self");
    Value* src = tensorArg(n, "src");
    if (!x || !src) unsupported(n, "a tensor argument is missing");
    size_t r = x->type.shape.size();
    if (r == 0 || src->type.shape.size() + 1 != r) unsupported(n, "src must have one dimension fewer than self");
    int64_t d = normDim(n, intArg(n, "dim", 0), r);
    std::vector<SymExpr> row = x->type.shape;
    row.erase(row.begin() + d);
    bool same = src->type.shape.size() == row.size();  // read at row coordinates: equal at the hints
    for (size_t k = 0; same && k < row.size(); ++k) same = src->type.shape[k] == row[k] || hint(src->type.shape[k]) == hint(row[k]);
    if (!same) unsupported(n, "src's shape is not self's without dim");
    SymExpr idx = requiredSize(n, "index");
    if (idx.isInt() && idx.intValue() < 0) idx = idx + x->type.shape[static_cast<size_t>(d)];
    if (idx.isInt() && (idx.intValue() < 0 || idx.intValue() >= hint(x->type.shape[static_cast<size_t>(d)])))
      unsupported(n, "index out of range of the dimension");
    int id = gnode("select_scatter", "", {operand(x, n), operand(src, n)}, odt, osh, o);
    cg_.node(id).iv = {d};
    cg_.node(id).sv = {idx};
    define(out, id);
    return;
  }
  if (t == "aten.cumsum.default") {
    Value* x = tensorArg(n, "self");
    int id = gnode("cumsum", "", {operand(x, n)}, odt, osh, o);
    cg_.node(id).iv = {normDim(n, intArg(n, "dim", 0), x->type.shape.size())};
    define(out, id);
    return;
  }
  if (t == "aten.diff.default") {
    // diff(x, n=1, dim, prepend, append): out[i] = y[i+1] - y[i] along dim, where
    // y = cat(prepend, x, append); generated as the difference of two slices of the concatenation:
    //   prepend ─┐                 ┌─ slice(1:)  ─┐
    //   x ───────┼─ cat(dim) = y ──┤              ├─ sub ─ out
    //   append ──┘                 └─ slice(:-1) ─┘
    if (intArg(n, "n", 1) != 1) unsupported(n, "diff with n != 1");
    Value* x = tensorArg(n, "self");
    int64_t d = normDim(n, intArg(n, "dim", -1), x->type.shape.size());
    std::vector<int> parts;
    std::vector<SymExpr> ysh = x->type.shape;
    ysh[static_cast<size_t>(d)] = I(0);
    for (const char* name : {"prepend", "self", "append"}) {
      Value* v = valArg(n, name);
      if (!v) continue;
      if (v->type.shape.size() != x->type.shape.size()) unsupported(n, "diff with a prepend/append of another rank");
      int a = operand(v, n);
      parts.push_back(gCast(a, x->type.dtype, cg_.node(a).shape, o));
      if (parts.back() != a) member(parts.back());
      ysh[static_cast<size_t>(d)] = ysh[static_cast<size_t>(d)] + v->type.shape[static_cast<size_t>(d)];
    }
    int y = parts.front();
    if (parts.size() > 1) {
      y = gnode("cat", "", parts, x->type.dtype, ysh, o);
      cg_.node(y).iv = {d};
      member(y);
    }
    int hi = gnode("remap", "slice", {y}, x->type.dtype, osh, o);
    cg_.node(hi).iv = {d};
    cg_.node(hi).sv = {I(1), I(1)};
    member(hi);
    int lo = gnode("remap", "slice", {y}, x->type.dtype, osh, o);
    cg_.node(lo).iv = {d};
    cg_.node(lo).sv = {I(0), I(1)};
    member(lo);
    DType ct = x->type.dtype == DType::Bool ? DType::Bool : odt;
    define(out, gBin(ct == DType::Bool ? "bxor" : "sub", hi, lo, odt, osh, o));
    return;
  }
  if (t == "aten.triu.default" || t == "aten.tril.default") {
    int id = gnode("tri", "", {operand(valArg(n, "self"), n)}, odt, osh, o);
    cg_.node(id).iv = {t == "aten.triu.default" ? 1 : 0};
    cg_.node(id).sv = {I(intArg(n, "diagonal", 0))};
    define(out, id);
    return;
  }
  unsupported(n, "no lowering for this op");
}

// ---------------------------------------------------------------------------------- row composites

// Opens (or joins) a row group whose reduced dims are `dims` of `x` and returns x as a gnode
// with those dims moved last (an index remap when they are not already trailing); `shape`
// gets the permuted shape, which is the group's domain.
int Lowerer::trailingSource(Node& n, Value* x, const std::set<int64_t>& dims, std::vector<SymExpr>* shape) {
  const auto& ish = x->type.shape;
  std::vector<int64_t> perm;
  for (size_t d = 0; d < ish.size(); ++d)
    if (!dims.count(static_cast<int64_t>(d))) perm.push_back(static_cast<int64_t>(d));
  for (int64_t d : dims) perm.push_back(d);
  std::vector<SymExpr> psh;
  bool identity = true;
  for (size_t k = 0; k < perm.size(); ++k) {
    psh.push_back(ish[static_cast<size_t>(perm[k])]);
    identity = identity && perm[k] == static_cast<int64_t>(k);
  }
  *shape = psh;
  prepareGroup(n, {psh, static_cast<int>(dims.size())}, !identity);  // a permute reads other rows
  int a = operand(x, n);
  if (identity) return a;
  int id = gnode("remap", "permute", {a}, cg_.node(a).dtype, psh, n.name);
  cg_.node(id).iv = perm;
  member(id);
  return id;
}

// Ops that are a short chain of elementwise steps around row reductions, generated into the
// row kernel of their input: layer norm (mean, centered mean of squares, rsqrt), var/var_mean
// and Inductor's online-softmax statistics. Computed in f32 (f64 for f64 inputs), rounded
// once to each output's dtype.
// Convolutions (not transposed, batched, any number of spatial dims; the depthwise causal
// conv1d of Mamba-style mixers): codegen's conv node, a generated sum over the group's input
// channels and the kernel window per output element.
void Lowerer::lowerConvolution(Node& n, DType odt, const std::vector<SymExpr>& osh, const std::string& o,
                               Value* out) {
  Value* x = tensorArg(n, "input");
  Value* w = tensorArg(n, "weight");
  Value* bias = valArg(n, "bias");
  if (!x || !w) unsupported(n, "missing input or weight");
  if (flag(n, "transposed", false)) unsupported(n, "transposed convolution");
  const size_t r = x->type.shape.size();
  if (r < 3 || w->type.shape.size() != r) unsupported(n, "only batched input [N, C, *spatial] is supported");
  const size_t sd = r - 2;
  auto perDim = [&](const char* name, int64_t def) {
    std::vector<int64_t> v = arg(n, name) ? intList(n, name) : std::vector<int64_t>{def};
    if (v.size() == 1) v.assign(sd, v[0]);
    if (v.size() != sd) unsupported(n, std::string("argument '") + name + "' does not match the spatial dims");
    return v;
  };
  std::vector<int64_t> stride = perDim("stride", 1), pad = perDim("padding", 0), dil = perDim("dilation", 1);
  int64_t groups = intArg(n, "groups", 1);
  const SymExpr& cout = w->type.shape[0];
  if (groups <= 0 || !cout.isInt() || cout.intValue() % groups != 0) unsupported(n, "groups do not divide the channels");
  // The generated kernel reads within x, weight and bias only when these agree.
  if (x->type.shape[1] != w->type.shape[1] * I(groups) || osh.size() != r || osh[0] != x->type.shape[0] ||
      osh[1] != cout)
    unsupported(n, "input channels, weight, groups and the output shape do not agree");
  if (bias && bias->kind == ir::ValueKind::Tensor && bias->type.shape != std::vector<SymExpr>{cout})
    unsupported(n, "bias must be [out channels]");
  for (size_t d = 0; d < sd; ++d)
    if (stride[d] <= 0 || dil[d] <= 0 || pad[d] < 0) unsupported(n, "stride, dilation must be positive, padding >= 0");
  std::vector<int> ins = {operand(x, n), operand(w, n)};
  if (bias && bias->kind == ir::ValueKind::Tensor) ins.push_back(operand(bias, n));
  int id = gnode("conv", "", ins, odt, osh, o);
  std::vector<int64_t> iv = {static_cast<int64_t>(sd), groups};
  for (const auto* v : {&stride, &pad, &dil}) iv.insert(iv.end(), v->begin(), v->end());
  cg_.node(id).iv = iv;
  define(out, id);
}

bool Lowerer::lowerRowComposite(Node& n) {
  const std::string& t = n.target;
  bool layer_norm = t == "aten.layer_norm.default" || t == "aten.native_layer_norm.default";
  bool var = t == "aten.var_mean.correction" || t == "aten.var.correction" || t == "aten.var_mean.dim" ||
             t == "aten.var.dim";
  bool online_softmax = t == "prims.prepare_softmax_online.default";
  if (!layer_norm && !var && !online_softmax) return false;
  const std::string& o = n.name;
  Value* x = valArg(n, layer_norm ? "input" : online_softmax ? "a" : "self");
  if (!x || x->kind != ir::ValueKind::Tensor) unsupported(n, "missing input tensor");
  const size_t r = x->type.shape.size();
  if (r == 0) unsupported(n, "rank-0 input");
  std::set<int64_t> dims;
  if (layer_norm) {
    size_t k = sizeList(n, "normalized_shape").size();
    if (k == 0 || k > r) unsupported(n, "normalized_shape does not fit the input");
    for (size_t d = r - k; d < r; ++d) dims.insert(static_cast<int64_t>(d));
  } else if (online_softmax) {
    dims.insert(normDim(n, intArg(n, "dim", -1), r));
  } else {
    const Attr* a = arg(n, "dim");
    std::vector<int64_t> l = a ? intList(n, "dim") : std::vector<int64_t>{};
    if (l.empty())
      for (size_t d = 0; d < r; ++d) dims.insert(static_cast<int64_t>(d));
    for (int64_t d : l) dims.insert(normDim(n, d, r));
  }
  std::vector<SymExpr> dsh;
  int xin = trailingSource(n, x, dims, &dsh);
  const int k = static_cast<int>(dims.size());
  const DType ct = x->type.dtype == DType::F64 ? DType::F64 : DType::F32;
  const auto rs = rowShape(dsh, k);
  auto keep = [&](int id) {
    member(id);
    return id;
  };
  // A row statistic (shape rs inside the group) as graph output `q` of its declared shape.
  auto defineRow = [&](size_t q, int v) {
    Value* ov = n.output(q);
    if (!ov) return;
    int c = keep(gCast(v, ov->type.dtype, rs, o));
    define(ov, ov->type.shape == rs ? c : gnode("remap", "reshape", {c}, ov->type.dtype, ov->type.shape, o));
  };
  int xf = keep(gCast(xin, ct, dsh, o));
  if (online_softmax) {  // (max, sum(exp(x - max))) over dim
    int mx = keep(gReduce("max", xf, k, ct, rs, o));
    int e = keep(gUnary("exp", keep(gBin("sub", xf, mx, ct, dsh, o)), ct, dsh, o));
    int sum = keep(gReduce("sum", e, k, ct, rs, o));
    defineRow(0, mx);
    defineRow(1, sum);
    return true;
  }
  int mean = keep(gReduce("mean", xf, k, ct, rs, o));
  int centered = keep(gBin("sub", xf, mean, ct, dsh, o));
  int msq = keep(gReduce("mean", keep(gBin("mul", centered, centered, ct, dsh, o)), k, ct, rs, o));
  if (var) {
    double corr = num(n, "correction", t.find(".dim") != std::string::npos && !flag(n, "unbiased", true) ? 0.0 : 1.0);
    if (corr != std::floor(corr)) unsupported(n, "a non-integer correction");
    int v = msq;
    if (corr != 0) {  // mean of squares * N / (N - correction)
      SymExpr cnt = I(1);
      for (size_t d = dsh.size() - static_cast<size_t>(k); d < dsh.size(); ++d) cnt = cnt * dsh[d];
      int nn = keep(gCast(constSym(cnt), ct, {}, o));
      int dn = keep(gCast(constSym(cnt - I(static_cast<int64_t>(corr))), ct, {}, o));
      v = keep(gBin("div", keep(gBin("mul", msq, nn, ct, rs, o)), dn, ct, rs, o));
    }
    defineRow(0, v);
    if (n.numOutputs() > 1) defineRow(1, mean);
    return true;
  }
  int eps = constNum(num(n, "eps", 1e-5), ct);
  int rstd = keep(gUnary("rsqrt", keep(gBin("add", msq, eps, ct, rs, o)), ct, rs, o));
  int y = keep(gBin("mul", centered, rstd, ct, dsh, o));
  if (Value* w = valArg(n, "weight")) {
    int wv = keep(gCast(operand(w, n), ct, w->type.shape, o));
    y = keep(gBin("mul", y, wv, ct, dsh, o));
  }
  if (Value* b = valArg(n, "bias")) {
    int bv = keep(gCast(operand(b, n), ct, b->type.shape, o));
    y = keep(gBin("add", y, bv, ct, dsh, o));
  }
  if (Value* out = n.output(0)) define(out, gCast(y, out->type.dtype, dsh, o));
  if (t == "aten.native_layer_norm.default") {
    defineRow(1, mean);
    defineRow(2, rstd);
  }
  return true;
}

// ---------------------------------------------------------------------------------- matmul

// Batched matmul operands of any rank as one strided batch: the leading dims of A and B
// (broadcast against each other) collapse to one batch dim; an operand whose leading dims are
// all 1 (or absent) is read with batch stride 0. Operands whose leading dims cannot collapse
// under their strides are copied contiguous first.
void Lowerer::batchOperands(Node& n, int& ta, TRef& A, int& tb, TRef& B) {
  auto lead = [](const TRef& x) { return std::vector<SymExpr>(x.shape.begin(), x.shape.end() - 2); };
  std::vector<SymExpr> la = lead(A), lb = lead(B);
  size_t r = std::max(la.size(), lb.size());
  la.insert(la.begin(), r - la.size(), I(1));
  lb.insert(lb.begin(), r - lb.size(), I(1));
  std::vector<SymExpr> L(r);
  for (size_t k = 0; k < r; ++k) {
    if (la[k] == lb[k] || isOne(lb[k])) L[k] = la[k];
    else if (isOne(la[k])) L[k] = lb[k];
    else unsupported(n, "matmul batch dims do not broadcast");
  }
  // An operand broadcast in some batch dims but not all: materialized at the full batch shape
  // (a stride-0 view of it copied), so that one batch stride walks every matrix.
  auto expandToBatch = [&](int& tr, TRef& x, const std::vector<SymExpr>& lx) {
    size_t nl = x.shape.size() - 2, pad = r - nl;
    TRef v = x;
    v.shape = L;
    v.stride.assign(r, I(0));
    for (size_t k = pad; k < r; ++k)
      if (!(isOne(lx[k]) && !isOne(L[k]))) v.stride[k] = x.stride[k - pad];
    v.shape.insert(v.shape.end(), x.shape.end() - 2, x.shape.end());
    v.stride.insert(v.stride.end(), x.stride.end() - 2, x.stride.end());
    v.name += ".bcast";
    tr = copyTo(newTRef(v), n.name);
    x = trefs_[static_cast<size_t>(tr)];
  };
  auto collapse = [&](int& tr, TRef& x, const std::vector<SymExpr>& lx) {
    bool ones = true;
    for (const auto& d : lx) ones = ones && isOne(d);
    if (!ones && lx != L) expandToBatch(tr, x, lx);
    size_t nl = x.shape.size() - 2;
    std::vector<SymExpr> rows(x.shape.end() - 2, x.shape.end()), rst(x.stride.end() - 2, x.stride.end());
    if (ones) {
      x.shape = {numelOf(L), rows[0], rows[1]};
      x.stride = {I(0), rst[0], rst[1]};
      tr = newTRef(x);
      return;
    }
    bool ok = true;
    for (size_t k = 0; k + 1 < nl; ++k)
      if (!isOne(x.shape[k]) && x.stride[k] != x.stride[k + 1] * x.shape[k + 1]) ok = false;
    if (!ok) {
      tr = copyTo(tr, n.name);
      x = trefs_[static_cast<size_t>(tr)];
      rst = std::vector<SymExpr>(x.stride.end() - 2, x.stride.end());
    }
    SymExpr bstride = x.stride[nl - 1];
    x.shape = {numelOf(L), rows[0], rows[1]};
    x.stride = {bstride, rst[0], rst[1]};
    tr = newTRef(x);
  };
  collapse(ta, A, la);
  collapse(tb, B, lb);
}

void Lowerer::lowerMatmul(Node& n) {
  const std::string& t = n.target;
  Value* out = n.output(0);
  if (!out) return;
  Value *a = nullptr, *b = nullptr, *bias = nullptr, *sa = nullptr, *sb = nullptr, *sr = nullptr;
  bool b_is_weight = false;  // linear: weight [N, K]
  double alpha = 1, beta = 1;
  if (t == "aten.mm.default" || t == "aten.bmm.default" || t == "aten.matmul.default") {
    a = valArg(n, "self");
    b = valArg(n, t == "aten.matmul.default" ? "other" : "mat2");
  } else if (t == "aten.addmm.default" || t == "aten.baddbmm.default") {
    bool batched = t == "aten.baddbmm.default";
    bias = valArg(n, "self");
    a = valArg(n, batched ? "batch1" : "mat1");
    b = valArg(n, batched ? "batch2" : "mat2");
    alpha = num(n, "alpha", 1);
    beta = num(n, "beta", 1);
  } else if (t == "aten.linear.default") {
    a = valArg(n, "input");
    b = valArg(n, "weight");
    bias = valArg(n, "bias");
    b_is_weight = true;
  } else if (t == "aten._scaled_mm.default") {
    a = valArg(n, "self");
    b = valArg(n, "mat2");
    sa = valArg(n, "scale_a");
    sb = valArg(n, "scale_b");
    bias = valArg(n, "bias");
    sr = valArg(n, "scale_result");
  }
  if (!a || !b) unsupported(n, "matmul operands missing");
  int ta = mat(a, n), tb = mat(b, n);
  int tbias = bias ? mat(bias, n) : -1;
  TRef A = trefs_[static_cast<size_t>(ta)], B = trefs_[static_cast<size_t>(tb)];
  if (b_is_weight) {  // weight [N, K] -> [K, N] view
    if (B.shape.size() != 2) unsupported(n, "linear weight must be 2-D");
    std::swap(B.shape[0], B.shape[1]);
    std::swap(B.stride[0], B.stride[1]);
    B.name += ".T";
    tb = newTRef(B);
  }
  const auto& osh = out->type.shape;
  if (t == "aten.matmul.default" || t == "aten.bmm.default") {
    // 1-D operands become a [1, K] row / [K, 1] column (the output view drops the 1).
    if (A.shape.size() == 1) {
      A.shape = {I(1), A.shape[0]};
      A.stride = {A.shape[1] * A.stride[0], A.stride[0]};
      ta = newTRef(A);
    }
    if (B.shape.size() == 1) {
      B.shape = {B.shape[0], I(1)};
      B.stride = {B.stride[0], I(1)};
      tb = newTRef(B);
    }
    if (B.shape.size() > 2 || (A.shape.size() > 3 && B.shape.size() > 2)) batchOperands(n, ta, A, tb, B);
  }
  // Flatten leading dims of A when B is 2-D (linear, matmul ND x 2D).
  SymExpr batch = I(1);
  if (B.shape.size() == 2 && A.shape.size() > 2) {
    std::vector<SymExpr> lead(A.shape.begin(), A.shape.end() - 1);
    bool ok = true;
    for (size_t k = 0; k + 2 < A.shape.size(); ++k)
      if (!isOne(A.shape[k]) && A.stride[k] != A.stride[k + 1] * A.shape[k + 1]) ok = false;
    if (!ok || !(isOne(A.stride.back()) || isOne(A.shape.back()))) {
      ta = copyTo(ta, n.name);
      A = trefs_[static_cast<size_t>(ta)];
    }
    TRef f = A;
    f.shape = {numelOf(lead), A.shape.back()};
    f.stride = {A.stride[A.shape.size() - 2], A.stride.back()};
    f.name += ".2d";
    ta = newTRef(f);
    A = f;
  } else if (A.shape.size() == 3 && B.shape.size() == 3) {
    batch = A.shape[0];
  } else if (A.shape.size() != 2 || B.shape.size() != 2) {
    unsupported(n, "matmul operands of these ranks are not supported");
  }
  size_t ra = A.shape.size(), rb = B.shape.size();
  SymExpr M = A.shape[ra - 2], K = A.shape[ra - 1], N = B.shape[rb - 1];
  auto innerOk = [&](const TRef& x) {
    size_t r = x.shape.size();
    return isOne(x.stride[r - 1]) || isOne(x.stride[r - 2]) || isOne(x.shape[r - 1]) || isOne(x.shape[r - 2]);
  };
  if (!innerOk(A)) {
    ta = copyTo(ta, n.name);
    A = trefs_[static_cast<size_t>(ta)];
  }
  if (!innerOk(B)) {
    tb = copyTo(tb, n.name);
    B = trefs_[static_cast<size_t>(tb)];
  }
  bool fp8 = t == "aten._scaled_mm.default";
  bool rowwise = false;
  int tsa = -1, tsb = -1, tsr = -1;
  if (fp8) {
    tsa = mat(sa, n);
    tsb = mat(sb, n);
    if (sr) tsr = mat(sr, n);
    auto numel = [&](int tr) { return numelOf(trefs_[static_cast<size_t>(tr)].shape); };
    if (!(numel(tsa).isInt() && numel(tsa).intValue() == 1 && numel(tsb).isInt() && numel(tsb).intValue() == 1)) {
      rowwise = true;
      if (A.shape.size() != 2) unsupported(n, "row-wise scaled matmul must be 2-D");
    }
    // cuBLASLt FP8 needs A row-major and B column-major (torch requires the same).
    if (!(isOne(A.stride[1]) || isOne(A.shape[1]))) {
      ta = copyTo(ta, n.name);
      A = trefs_[static_cast<size_t>(ta)];
    }
    if (!(isOne(B.stride[0]) || isOne(B.shape[0]))) {
      TRef bt = B;  // materialize the transpose contiguous, then view it back
      std::swap(bt.shape[0], bt.shape[1]);
      std::swap(bt.stride[0], bt.stride[1]);
      int tt = copyTo(newTRef(bt), n.name);
      TRef c = trefs_[static_cast<size_t>(tt)];
      std::swap(c.shape[0], c.shape[1]);
      std::swap(c.stride[0], c.stride[1]);
      tb = newTRef(c);
      B = c;
    }
  }
  closeGroup();
  DType odt = out->type.dtype;
  // Row-wise scales: cuBLASLt computes acc in fp32 (unit scales); a generated epilogue applies
  // acc * scale_a[m] * scale_b[n] (+ bias) and rounds once, as torch's row-wise kernel does.
  DType ddt = rowwise ? DType::F32 : odt;
  std::vector<SymExpr> dsh = batch == I(1) && ra == 2 ? std::vector<SymExpr>{M, N} : std::vector<SymExpr>{batch, M, N};
  if (B.shape.size() == 2 && trefs_[static_cast<size_t>(mat(a, n))].shape.size() > 2) dsh = {M, N};
  int td = freshTensor(ddt, dsh, out->name + (rowwise ? ".acc" : ""));
  // addmm/linear bias: a vector [N] is a cuBLASLt epilogue; a full [M, N] matrix is C (beta).
  int tc = -1;
  bool bias_vec = false;
  if (tbias >= 0 && !rowwise) {
    const TRef& bt = trefs_[static_cast<size_t>(tbias)];
    SymExpr bn = numelOf(bt.shape);
    if (bn == N && beta == 1.0 && (bt.shape.size() == 1 || isOne(bt.shape[0])) && bt.dtype == odt) {
      bias_vec = true;
    } else {
      // Broadcast to D's shape in a contiguous C matrix.
      int ld = loadOf(tbias);
      int ex = gnode("remap", "expand", {ld}, odt, dsh, n.name);
      if (cg_.node(ld).dtype != odt) ex = gnode("cast", "", {ex}, odt, dsh, n.name);
      tc = freshTensor(odt, dsh, out->name + ".c");
      emitKernel({ex}, dsh, 0, {{ex, tc}});
    }
  }
  pb::Step* st = addStep({n.name}, fp8 ? (rowwise ? "fp8 row-wise scaled matmul (fp32 accumulator)" : "fp8 scaled matmul")
                                       : "matmul");
  auto* mm = st->mutable_matmul();
  int s = stepIndex();
  mm->set_a(ta);
  mm->set_b(tb);
  mm->set_c(tc);
  mm->set_d(td);
  mm->set_bias(bias_vec ? tbias : -1);
  for (int x : {ta, tb, td}) touch(x, s);
  if (tc >= 0) touch(tc, s);
  if (bias_vec) touch(tbias, s);
  ir::symExprToProto(M, mm->mutable_m());
  ir::symExprToProto(N, mm->mutable_n());
  ir::symExprToProto(K, mm->mutable_k());
  ir::symExprToProto(batch, mm->mutable_batch());
  mm->set_a_dtype(toPlanDType(A.dtype));
  mm->set_b_dtype(toPlanDType(B.dtype));
  mm->set_d_dtype(toPlanDType(ddt));
  mm->set_compute(pb::F32);
  mm->set_alpha(alpha);
  mm->set_beta(tc >= 0 ? beta : 0.0);
  mm->set_scale_mode(fp8 ? (rowwise ? pb::SCALE_NONE : pb::SCALE_PER_TENSOR) : pb::SCALE_NONE);
  mm->set_scale_a(fp8 && !rowwise ? tsa : -1);
  mm->set_scale_b(fp8 && !rowwise ? tsb : -1);
  mm->set_scale_d(fp8 && !rowwise && tsr >= 0 && ir::isFp8(odt) ? tsr : -1);
  if (fp8 && !rowwise) {
    touch(tsa, s);
    touch(tsb, s);
    if (tsr >= 0 && ir::isFp8(odt)) touch(tsr, s);
  }
  mm->set_epilogue(bias_vec ? pb::EPILOGUE_BIAS : pb::EPILOGUE_NONE);
  mm->set_fast_accum(fp8 && flag(n, "use_fast_accum", false));
  mm->set_algorithm("heuristic");
  mm->set_workspace_bytes(32 << 20);
  stats_.matmuls++;
  if (rowwise) {
    int acc = loadOf(td);
    int ga = loadOf(tsa), gb = loadOf(tsb);
    DType f32 = DType::F32;
    std::vector<SymExpr> sh2{M, N};
    int x = gnode("binary", "mul", {acc, ga}, f32, sh2, n.name);
    int y = gnode("binary", "mul", {x, gb}, f32, sh2, n.name);
    std::vector<int> mem{x, y};
    if (tbias >= 0) {
      int bl = loadOf(tbias);
      y = gnode("binary", "add", {y, gCast(bl, f32, trefs_[static_cast<size_t>(tbias)].shape, n.name)}, f32, sh2, n.name);
      mem.push_back(y);
    }
    int r = gnode("cast", "", {y}, odt, sh2, n.name);
    mem.push_back(r);
    int to = freshFor(out);
    emitKernel(mem, sh2, 0, {{r, to}});
    mat_[out] = to;
    return;
  }
  // View D back to the output's shape (matmul ND x 2D).
  if (osh != trefs_[static_cast<size_t>(td)].shape) {
    TRef v = trefs_[static_cast<size_t>(td)];
    v.shape = osh;
    v.stride = contiguousStrides(osh);
    v.name = out->name;
    mat_[out] = newTRef(v);
  } else {
    mat_[out] = td;
  }
}

// ---------------------------------------------------------------------------------- attention

void Lowerer::lowerAttention(Node& n) {
  const std::string& t = n.target;
  Value* out = n.output(0);
  if (!out) return;
  for (size_t q = 1; q < n.numOutputs(); ++q)
    if (n.output(q) && n.output(q)->numUses() > 0)
      unsupported(n, "only the attention output may be used (logsumexp and friends are not computed)");
  Value* q = valArg(n, "query");
  Value* k = valArg(n, "key");
  Value* v = valArg(n, "value");
  Value* mask = valArg(n, "attn_mask");
  if (!mask) mask = valArg(n, "attn_bias");
  Value* oscale = valArg(n, "output_scale");
  bool causal = flag(n, "is_causal", false);
  std::string layout = str(n, "layout", "bhsd");
  if (t.rfind("vllm.", 0) == 0) layout = "vllm", causal = true;
  if (layout == "vllm") causal = true;
  if (num(n, "dropout_p", 0.0) != 0.0) unsupported(n, "attention dropout");
  int tq = mat(q, n), tk = mat(k, n), tv = mat(v, n);
  int tm = mask ? mat(mask, n) : -1;
  int ts = oscale ? mat(oscale, n) : -1;
  closeGroup();
  auto as4 = [&](int tr, const SymExpr& heads) -> int {
    TRef x = trefs_[static_cast<size_t>(tr)];
    if (layout != "vllm") {
      if (x.shape.size() == 3) {  // [H, S, E]
        x.shape.insert(x.shape.begin(), I(1));
        x.stride.insert(x.stride.begin(), I(0));
      }
      if (x.shape.size() != 4) unsupported(n, "attention operands must be 4-D [B, H, S, E]");
      return newTRef(x);
    }
    // vLLM: [T, H*E] or [T, H, E] -> [1, H, T, E]
    if (x.shape.size() == 2) {
      SymExpr e = floorDiv(x.shape[1], heads);
      x.shape = {I(1), heads, x.shape[0], e};
      x.stride = {I(0), e * x.stride[1], x.stride[0], x.stride[1]};
    } else if (x.shape.size() == 3) {
      x.shape = {I(1), x.shape[1], x.shape[0], x.shape[2]};
      x.stride = {I(0), x.stride[1], x.stride[0], x.stride[2]};
    } else {
      unsupported(n, "vLLM attention operands must be [T, H, E] or [T, H*E]");
    }
    return newTRef(x);
  };
  SymExpr hq = I(1), hk = I(1);
  if (layout == "vllm") {
    const auto& ks = trefs_[static_cast<size_t>(tk)].shape;
    const auto& qs = trefs_[static_cast<size_t>(tq)].shape;
    if (ks.size() != 3) unsupported(n, "vLLM key must be [T, Hk, E]");
    if (qs.size() != 2 && qs.size() != 3) unsupported(n, "vLLM query must be [T, H, E] or [T, H*E]");
    hk = ks[1];
    SymExpr e = ks[2];
    hq = qs.size() == 3 ? qs[1] : floorDiv(qs[1], e);
  }
  int q4 = as4(tq, hq), k4 = as4(tk, hk), v4 = as4(tv, hk);
  int to = freshFor(out);
  int o4;
  {
    TRef ot = trefs_[static_cast<size_t>(to)];
    const TRef& qq = trefs_[static_cast<size_t>(q4)];
    const TRef& vv = trefs_[static_cast<size_t>(v4)];
    if (layout == "vllm") {  // output [T, Hq*Ev] (or [T, Hq, Ev]) contiguous -> [1, Hq, T, Ev]
      SymExpr ev = vv.shape[3];
      ot.shape = {I(1), qq.shape[1], qq.shape[2], ev};
      ot.stride = {I(0), ev, qq.shape[1] * ev, I(1)};
    } else if (ot.shape.size() == 3) {
      ot.shape.insert(ot.shape.begin(), I(1));
      ot.stride.insert(ot.stride.begin(), I(0));
    }
    o4 = newTRef(ot);
  }
  pb::Step* st = addStep({n.name}, std::string("attention") + (causal ? " causal" : "") + (ts >= 0 ? " fp8-out" : ""));
  auto* kl = st->mutable_kernel();
  kl->set_kernel("rt.attention");
  argT(kl, "q", q4);
  argT(kl, "k", k4);
  argT(kl, "v", v4);
  argT(kl, "out", o4);
  if (tm >= 0) {
    TRef mt = trefs_[static_cast<size_t>(tm)];
    while (mt.shape.size() < 4) {  // broadcast to [B, H, Sq, Sk]
      mt.shape.insert(mt.shape.begin(), I(1));
      mt.stride.insert(mt.stride.begin(), I(0));
    }
    argT(kl, "mask", newTRef(mt));
  }
  if (ts >= 0) argT(kl, "out_scale", ts);
  argB(kl, "causal", causal);
  const Attr* sc = arg(n, "scale");
  if (sc && sc->asDouble()) argF(kl, "scale", *sc->asDouble());
  argD(kl, "round_dtype", trefs_[static_cast<size_t>(q4)].dtype);
  // Kernel choice: the sm90 kernels (kernels/attention) when the static facts fit; the runtime
  // re-checks pointers and strides and falls back to the reference kernel otherwise.
  {
    std::string why;
    const bool fast = attention::FitsSm90(attentionFacts(q4, k4, v4, o4, tm >= 0, ts >= 0), &why);
    argS(kl, "impl", fast ? "sm90" : "reference");
    if (!fast) argS(kl, "impl_reason", why);
  }
  mat_[out] = to;
  stats_.attention++;
}

// What the sm90 attention kernels need to know at plan time (kernels/attention/attention.h).
attention::AttentionShapeFacts Lowerer::attentionFacts(int q4, int k4, int v4, int o4, bool has_mask, bool fp8_out) const {
  const TRef& q = trefs_[static_cast<size_t>(q4)];
  const TRef& k = trefs_[static_cast<size_t>(k4)];
  const TRef& v = trefs_[static_cast<size_t>(v4)];
  const TRef& o = trefs_[static_cast<size_t>(o4)];
  attention::AttentionShapeFacts f;
  auto dim = [](const SymExpr& e) { return e.isInt() ? static_cast<int>(e.intValue()) : 0; };
  f.head_size = dim(q.shape[3]);
  f.head_size_v = dim(v.shape[3]);
  f.d16_inputs = (q.dtype == DType::BF16 || q.dtype == DType::F16) && k.dtype == q.dtype && v.dtype == q.dtype;
  f.has_mask = has_mask;
  f.last_dim_contiguous = true;
  int64_t gcd = -1;
  for (const TRef* t : {&q, &k, &v, &o}) {
    if (!(t->stride[3].isInt() && t->stride[3].intValue() == 1)) f.last_dim_contiguous = false;
    for (int d = 0; d < 3; ++d) {
      const SymExpr& st = t->stride[static_cast<size_t>(d)];
      if (!st.isInt() || st.intValue() == 0) continue;
      int64_t x = st.intValue() < 0 ? -st.intValue() : st.intValue();
      if (t == &o && fp8_out) x = x % 16 == 0 ? 8 : 1;  // FP8 rows need 16-byte strides: 16 elements
      gcd = gcd < 0 ? x : std::gcd(gcd, x);
    }
  }
  f.stride_gcd_elems = gcd;
  f.out_ok = o.dtype == q.dtype || (o.dtype == DType::F8E4M3FN && fp8_out);
  return f;
}

// ---------------------------------------------------------------------------------- fxfuse ops

// The residual the kernels update in place: the input's own buffer when this node is its only
// reader (donated), else a fresh buffer the residual is copied into first.
int Lowerer::inPlaceResidual(Node& n, Value* residual, const std::vector<SymExpr>& shape, DType dt, Value* res_out) {
  int tri = mat(residual, n);
  // (freshTensor below may move trefs_: decide everything about `tri` before it)
  const TRef& ri = trefs_[static_cast<size_t>(tri)];
  const Buf& rb = bufs_[static_cast<size_t>(ri.buffer)];
  const bool dense_same_shape = isContiguous(ri) && ri.shape == shape;
  bool donate = rb.kind == pb::ARENA && rb.trefs == 1 && residual->numUses() == 1 &&
                residual->graphOutputUses() == 0 && dense_same_shape;
  if (donate) return tri;
  int tres = freshTensor(dt, shape, res_out ? res_out->name : residual->name + ".updated");
  if (dense_same_shape) {
    pb::Step* cs = addStep({n.name}, "copy residual (updated in place by the next kernel)");
    auto* c = cs->mutable_copy();
    c->set_src(tri);
    c->set_dst(tres);
    ir::symExprToProto(numelOf(shape) * I(ir::dtypeBytes(dt)), c->mutable_bytes());
    touch(tri, stepIndex());
    touch(tres, stepIndex());
    stats_.copies++;
  } else {
    int ld = loadOf(tri);
    int cp = gnode("cast", "", {ld}, dt, shape, n.name);
    emitKernel({cp}, shape, 0, {{cp, tres}});
  }
  return tres;
}

bool Lowerer::lowerFxfuseLibrary(Node& n) {
  if (!opts_.library_kernels) return false;
  const std::string name = n.target.substr(7, n.target.size() - 7 - 8);  // fxfuse.<name>.default
  auto d16 = [](DType t) { return t == DType::BF16 || t == DType::F16; };
  Value* x = valArg(n, "input");
  if (!x) return false;
  const DType xd = x->type.dtype;
  if (!d16(xd)) return false;
  Value* w = valArg(n, "weight");
  if (w && w->type.dtype != xd) return false;
  if (auto nd = dtypeArg(n, "norm_dtype"); nd && *nd != xd) return false;
  Value* residual = valArg(n, "residual");
  if (residual && residual->type.dtype != xd) return false;
  Value* up = valArg(n, "up");
  if (up) return false;
  std::string kind = str(n, "kind", "static_tensor");
  if (flag(n, "scale_ue8m0", false)) return false;
  if (flag(n, "column_major_scales", false)) return false;
  if (kind == "dynamic_tensor" && name == "rms_norm_quant") return false;
  bool is_rn = name == "rms_norm", is_far = name == "fused_add_rms_norm", is_q = name == "quant_fp8",
       is_sm = name == "silu_and_mul" || name == "silu_and_mul_quant",
       is_rnq = name == "rms_norm_quant" || name == "fused_add_rms_norm_quant";
  if (!(is_rn || is_far || is_q || is_sm || is_rnq)) return false;
  Value* out0 = n.output(0);
  if (!out0) return true;
  if (is_rn || is_far) {
    if (out0->type.dtype != xd) return false;
  }
  if (is_sm && name == "silu_and_mul" && out0->type.dtype != xd) return false;
  if (is_far && n.output(1) && n.output(1)->type.dtype != xd) return false;

  int tx = mat(x, n);
  {
    const TRef& xt = trefs_[static_cast<size_t>(tx)];
    if (!rowStride(xt)) tx = copyTo(tx, n.name);
  }
  const TRef X = trefs_[static_cast<size_t>(tx)];
  if (X.shape.empty()) unsupported(n, "the input is 0-d: it has no hidden dim to normalize");
  SymExpr H = X.shape.back();
  SymExpr T = floorDiv(numelOf(X.shape), H);
  if (H.isInt() && H.intValue() == 0) return false;
  SymExpr xrs = *rowStride(X);
  int tw = w ? mat(w, n) : -1;
  if (tw >= 0 && !isContiguous(trefs_[static_cast<size_t>(tw)])) tw = copyTo(tw, n.name);
  // Scale tensors.
  Value* scale = valArg(n, is_sm && name == "silu_and_mul_quant" ? "scale" : "scale");
  int tsc = scale ? mat(scale, n) : -1;
  Value* ub = valArg(n, "scale_ub");
  int tub = ub ? mat(ub, n) : -1;
  closeGroup();

  int tres = -1;
  Value* res_out = nullptr;
  if (residual) {
    res_out = n.output(1);
    tres = inPlaceResidual(n, residual, X.shape, xd, res_out);
  }
  auto scaleSpec = [&](pb::KernelLaunch* k, const std::string& kind_s, Value* scale_out_v) {
    std::string sk = kind_s == "static_tensor" ? "static_per_tensor" : kind_s == "dynamic_token" ? "dynamic_per_token"
                     : kind_s == "dynamic_tensor" ? "dynamic_per_tensor" : kind_s == "dynamic_group" ? "dynamic_per_group" : "";
    if (sk.empty()) unsupported(n, "unknown quant kind '" + kind_s + "'");
    argS(k, "scale_kind", sk);
    if (kind_s == "static_tensor") {
      if (tsc < 0) unsupported(n, "static quant without a scale");
      argT(k, "scale", tsc);
    } else {
      int tso;
      if (scale_out_v) {
        tso = freshFor(scale_out_v);
        mat_[scale_out_v] = tso;
      } else {
        std::vector<SymExpr> ss = kind_s == "dynamic_token" ? std::vector<SymExpr>{T}
                                  : kind_s == "dynamic_tensor" ? std::vector<SymExpr>{I(1)}
                                  : std::vector<SymExpr>{T, floorDiv(H, I(intArg(n, "group_size", 128)))};
        tso = freshTensor(DType::F32, ss, n.name + ".scale");
      }
      argT(k, "scale", tso);
    }
    if (kind_s == "dynamic_group") argI(k, "group_size", I(intArg(n, "group_size", 0)));
    if (tub >= 0) argT(k, "scale_ub", tub);
    argS(k, "scale_application", flag(n, "divide", false) ? "divide" : "multiply_by_reciprocal");
    argF(k, "min_abs", num(n, "min_abs", 0.0));
    argF(k, "min_scale", num(n, "min_scale", 4.359654017857143e-06));
  };
  auto common = [&](pb::KernelLaunch* k) {
    argI(k, "num_tokens", T);
    argI(k, "hidden_size", H);
    argD(k, "dtype", xd);
    argT(k, "input", tx);
    argI(k, "input_row_stride", xrs);
  };
  if (is_sm) {
    SymExpr d = floorDiv(H, I(2));
    pb::Step* st = addStep({n.name}, name);
    auto* k = st->mutable_kernel();
    k->set_kernel("lib.silu_and_mul");
    argI(k, "num_tokens", T);
    argI(k, "hidden_size", d);
    argD(k, "dtype", xd);
    argT(k, "input", tx);
    argI(k, "input_row_stride", xrs);
    int to = freshFor(out0);
    argD(k, "output_dtype", out0->type.dtype);
    argT(k, "output", to);
    argI(k, "output_row_stride", d);
    if (name == "silu_and_mul_quant") {
      argT(k, "scale", tsc);
      argS(k, "scale_application", "multiply_by_reciprocal");
    }
    mat_[out0] = to;
    stats_.library++;
    return true;
  }
  pb::Step* st = addStep({n.name}, name);
  auto* k = st->mutable_kernel();
  if (is_rn || is_far) {
    k->set_kernel("lib.rms_norm");
    common(k);
    if (tw >= 0) {
      argT(k, "weight", tw);
      argD(k, "weight_dtype", xd);
    }
    int to = freshFor(out0);
    argT(k, "output", to);
    argI(k, "output_row_stride", H);
    if (is_far) {
      argT(k, "residual", tres);
      argI(k, "residual_row_stride", H);
      argS(k, "residual_variance", flag(n, "variance_of_rounded_sum", false) ? "rounded_sum" : "unrounded_sum");
      if (res_out) mat_[res_out] = tres;
    }
    argScalar(k, n, "epsilon", 1e-6);
    mat_[out0] = to;
  } else if (is_q) {
    k->set_kernel("lib.quant_fp8");
    common(k);
    int to = freshFor(out0);
    argT(k, "output", to);
    argI(k, "output_row_stride", H);
    scaleSpec(k, kind, n.output(1));
    mat_[out0] = to;
  } else {
    bool far = name == "fused_add_rms_norm_quant";
    k->set_kernel("lib.rms_norm_quant_fp8");
    common(k);
    if (tw >= 0) {
      argT(k, "weight", tw);
      argD(k, "weight_dtype", xd);
    }
    if (far) {
      argT(k, "residual", tres);
      argI(k, "residual_row_stride", H);
      argS(k, "residual_variance", flag(n, "variance_of_rounded_sum", true) ? "rounded_sum" : "unrounded_sum");
      if (res_out) mat_[res_out] = tres;
    }
    argScalar(k, n, "epsilon", 1e-6);
    int to = freshFor(out0);
    argT(k, "output", to);
    argI(k, "output_row_stride", H);
    scaleSpec(k, kind, n.output(far ? 2 : 1));
    mat_[out0] = to;
  }
  stats_.library++;
  return true;
}

// fxfuse.all_reduce_rms_norm[_quant] -> one FusedAllReduceNorm step (kernels/all_reduce_rms_norm.h
// at run time, or its NCCL fallback):
//
//   input ─ all_reduce ─ a ─(+ residual)─ z ─ rms_norm(weight) ─ n ─ quant_fp8(scale) ─ q
//                                         └─ residual (in place)  └─ norm_out            └─ quant_out
//
// Returns false when the kernels' contract does not cover the node (dtypes other than one
// 16-bit type throughout, an FP8 output other than e4m3fn).
bool Lowerer::lowerFusedAllReduceNorm(Node& n) {
  if (!opts_.library_kernels) return false;
  const bool quant = n.target == "fxfuse.all_reduce_rms_norm_quant.default";
  Value* x = valArg(n, "input");
  if (!x || x->type.shape.empty()) return false;
  const DType xd = x->type.dtype;
  if (xd != DType::BF16 && xd != DType::F16) return false;
  Value* w = valArg(n, "weight");
  Value* residual = valArg(n, "residual");
  Value* scale = valArg(n, "scale");
  if (w && w->type.dtype != xd) return false;
  if (residual && residual->type.dtype != xd) return false;
  if (auto nd = dtypeArg(n, "norm_dtype"); nd && *nd != xd) return false;
  Value* out0 = n.output(0);
  Value* res_out = n.output(1);
  if (out0 && out0->type.dtype != (quant ? DType::F8E4M3FN : xd)) return false;
  if (res_out && res_out->type.dtype != xd) return false;
  if (quant && (!scale || scale->type.dtype != DType::F32)) return false;

  int tx = contiguous(mat(x, n), n.name);
  const std::vector<SymExpr> shape = trefs_[static_cast<size_t>(tx)].shape;
  const SymExpr H = shape.back();
  const SymExpr T = floorDiv(numelOf(shape), H);
  int tw = w ? contiguous(mat(w, n), n.name) : -1;
  int tsc = quant ? mat(scale, n) : -1;
  closeGroup();
  int tres = residual ? inPlaceResidual(n, residual, shape, xd, res_out) : -1;

  // Workspace capacity: the token count's largest value, capped by the fusion's size limit.
  int64_t cap = intArg(n, "max_token_num", 0);
  auto range = m_.symbols.range(T);
  int64_t max_tokens = T.isInt() ? T.intValue() : range.hi.value_or(cap > 0 ? cap : 8192);
  if (cap > 0) max_tokens = std::min(max_tokens, cap);

  pb::Step* st = addStep({n.name}, quant ? "fused all-reduce + rms_norm + fp8 quant" : "fused all-reduce + rms_norm");
  auto* f = st->mutable_fused_all_reduce_norm();
  auto use = [&](int t) {
    if (t >= 0) touch(t, stepIndex());
    return t;
  };
  f->set_input(use(tx));
  f->set_residual(use(tres));
  f->set_weight(use(tw));
  f->set_scale(use(tsc));
  f->set_allreduce_out(-1);
  f->set_norm_out(-1);
  f->set_quant_out(-1);
  if (out0 && out0->numUses() + out0->graphOutputUses() > 0) {
    int to = use(freshFor(out0));
    if (quant) f->set_quant_out(to);
    else f->set_norm_out(to);
    mat_[out0] = to;
  } else if (!quant) {
    f->set_norm_out(use(freshTensor(xd, shape, n.name + ".norm")));  // the kernels need one output
  } else {
    f->set_quant_out(use(freshTensor(DType::F8E4M3FN, shape, n.name + ".q")));
  }
  if (residual) {
    if (res_out) mat_[res_out] = tres;
  } else if (res_out && res_out->numUses() + res_out->graphOutputUses() > 0) {
    int ta = use(freshFor(res_out));
    f->set_allreduce_out(ta);
    mat_[res_out] = ta;
  }
  f->set_epsilon(num(n, "epsilon", 1e-6));
  f->set_dtype(toPlanDType(xd));
  ir::symExprToProto(T, f->mutable_num_tokens());
  ir::symExprToProto(H, f->mutable_hidden_size());
  f->set_max_tokens(max_tokens);
  f->set_residual_variance(flag(n, "variance_of_rounded_sum", false) || !residual ? "rounded_sum" : "unrounded_sum");
  f->set_scale_application(flag(n, "divide", false) ? "divide" : "multiply_by_reciprocal");
  f->set_group(str(n, "group_name", ""));
  stats_.collectives++;
  return true;
}

// The same ops through generated code (any dtype, layout and weight dtype).
void Lowerer::lowerFxfuseGenerated(Node& n) {
  const std::string name = n.target.substr(7, n.target.size() - 7 - 8);
  const std::string& o = n.name;
  const DType f32 = DType::F32;
  Value* x = valArg(n, "input");
  if (!x) unsupported(n, "missing input");
  const auto& sh = x->type.shape;
  if (sh.empty()) unsupported(n, "rank-0 input");
  auto rs = rowShape(sh);
  std::string kind = str(n, "kind", "static_tensor");
  bool needs_row = name != "silu_and_mul" && name != "silu_and_mul_quant" &&
                   !(name == "quant_fp8" && kind == "static_tensor");
  if (kind == "dynamic_group" || kind == "dynamic_tensor")
    unsupported(n, "group and per-tensor dynamic quantization need the kernels library (dtype/layout not covered)");
  if (name.rfind("all_reduce", 0) == 0 && opts_.world_size > 1)
    unsupported(n, "fused all-reduce at world size > 1 needs an NCCL step first (not lowered through generated code)");
  prepareGroup(n, {sh, needs_row ? 1 : 0}, false);
  int xin = operand(x, n);
  auto cvt = [&](int a, DType t, const std::vector<SymExpr>& s) {
    int r = gCast(a, t, s, o);
    if (r != a) member(r);
    return r;
  };
  auto bin = [&](const std::string& f, int a, int b, DType t, const std::vector<SymExpr>& s) {
    int r = gBin(f, a, b, t, s, o);
    member(r);
    return r;
  };
  auto un = [&](const std::string& f, int a, DType t, const std::vector<SymExpr>& s) {
    int r = gUnary(f, a, t, s, o);
    member(r);
    return r;
  };
  // n = rms_norm of v (fp32), rounded to N, times weight rounded to O.
  auto norm = [&](int v, DType ndt, DType odt, Value* w) {
    int sq = bin("mul", v, v, f32, sh);
    int mean = gReduce("mean", sq, 1, f32, rs, o);
    member(mean);
    int eps = constNum(static_cast<double>(static_cast<float>(num(n, "epsilon", 1e-6))), f32);
    int inv = un("rsqrt", bin("add", mean, eps, f32, rs), f32, rs);
    int nn = cvt(bin("mul", v, inv, f32, sh), ndt, sh);
    if (!w) return cvt(nn, odt, sh);
    int wv = cvt(operand(w, n), f32, w->type.shape);
    return cvt(bin("mul", cvt(nn, f32, sh), wv, f32, sh), odt, sh);
  };
  auto quant = [&](int v, Value* scale_v, bool divide) {
    int s = cvt(operand(scale_v, n), f32, scale_v->type.shape);
    std::vector<SymExpr> ssh = scale_v->type.shape;
    int vf = cvt(v, f32, sh);
    int scaled = divide ? bin("div", vf, s, f32, sh)
                        : bin("mul", vf, un("reciprocal", s, f32, ssh), f32, sh);
    int cl = gnode("clamp", "", {scaled}, f32, sh, o);
    cg_.node(cl).f = {-kernels::kFp8E4m3Max, kernels::kFp8E4m3Max};
    cg_.node(cl).iv = {1, 1};
    member(cl);
    return cvt(cl, DType::F8E4M3FN, sh);
  };
  auto dynQuant = [&](int v, Value* q_out, Value* scale_out) {
    int vf = cvt(v, f32, sh);
    int a = gReduce("max", un("abs", vf, f32, sh), 1, f32, rs, o);
    member(a);
    if (Value* ub = valArg(n, "scale_ub")) a = bin("min", a, cvt(operand(ub, n), f32, ub->type.shape), f32, rs);
    a = bin("max", a, constNum(num(n, "min_abs", 0.0), f32), f32, rs);
    int s = bin("max", bin("div", a, constNum(kernels::kFp8E4m3Max, f32), f32, rs),
                constNum(num(n, "min_scale", 4.359654017857143e-06), f32), f32, rs);
    bool divide = flag(n, "divide", false);
    int scaled = divide ? bin("div", vf, s, f32, sh) : bin("mul", vf, un("reciprocal", s, f32, rs), f32, sh);
    int cl = gnode("clamp", "", {scaled}, f32, sh, o);
    cg_.node(cl).f = {-kernels::kFp8E4m3Max, kernels::kFp8E4m3Max};
    cg_.node(cl).iv = {1, 1};
    member(cl);
    if (q_out) define(q_out, gCast(cl, q_out->type.dtype, sh, o));
    if (scale_out) {
      int so = gnode("remap", "reshape", {s}, f32, scale_out->type.shape, o);
      define(scale_out, so);
    }
  };
  Value* out0 = n.output(0);
  auto ndtOf = [&](DType def) { return dtypeArg(n, "norm_dtype").value_or(def); };
  if (name == "rms_norm" || name == "rms_norm_quant") {
    Value* w = valArg(n, "weight");
    DType odt = name == "rms_norm" ? (out0 ? out0->type.dtype : x->type.dtype)
                                   : (ir::isHalf16(x->type.dtype) ? x->type.dtype : ndtOf(x->type.dtype));
    int v = cvt(xin, f32, sh);
    int nn = norm(v, ndtOf(x->type.dtype), odt, w);
    if (name == "rms_norm") {
      if (out0) define(out0, nn);
    } else if (kind == "static_tensor") {
      if (out0) define(out0, quant(nn, valArg(n, "scale"), flag(n, "divide", false)));
    } else {
      dynQuant(nn, out0, n.output(1));
    }
    return;
  }
  if (name == "fused_add_rms_norm" || name == "fused_add_rms_norm_quant" || name == "all_reduce_rms_norm" ||
      name == "all_reduce_rms_norm_quant") {
    Value* res = valArg(n, "residual");
    Value* w = valArg(n, "weight");
    bool far_q = name == "fused_add_rms_norm_quant", ar_q = name == "all_reduce_rms_norm_quant";
    Value* res_out = n.output(1);
    if (!res) {  // all_reduce_rms_norm without residual: rms_norm(a); residual_out = a
      DType odt = out0 ? out0->type.dtype : x->type.dtype;
      int nn = norm(cvt(xin, f32, sh), ndtOf(x->type.dtype), ar_q ? x->type.dtype : odt, w);
      if (out0) define(out0, ar_q ? quant(nn, valArg(n, "scale"), flag(n, "divide", false)) : nn);
      if (res_out) define(res_out, cvt(xin, res_out->type.dtype, sh));
      return;
    }
    DType rdt = res_out ? res_out->type.dtype : res->type.dtype;
    int s = bin("add", cvt(xin, f32, sh), cvt(operand(res, n), f32, res->type.shape), f32, sh);
    int ro = cvt(s, rdt, sh);
    bool vors = flag(n, "variance_of_rounded_sum", far_q);
    int v = vors ? cvt(ro, f32, sh) : s;
    DType ndt = ndtOf(res->type.dtype);
    DType odt = (far_q || ar_q) ? (ir::isHalf16(x->type.dtype) ? x->type.dtype : ndt) : (out0 ? out0->type.dtype : ndt);
    int nn = norm(v, ndt, odt, w);
    if (res_out) define(res_out, ro);
    if (!far_q && !ar_q) {
      if (out0) define(out0, nn);
    } else if (ar_q || kind == "static_tensor") {
      if (out0) define(out0, quant(nn, valArg(n, "scale"), flag(n, "divide", false)));
    } else {
      dynQuant(nn, out0, n.output(2));
    }
    return;
  }
  if (name == "quant_fp8") {
    if (kind == "static_tensor") {
      if (out0) define(out0, quant(xin, valArg(n, "scale"), flag(n, "divide", false)));
    } else {
      dynQuant(xin, out0, n.output(1));
    }
    return;
  }
  if (name == "silu_and_mul" || name == "silu_and_mul_quant") {
    Value* up = valArg(n, "up");
    int g = xin, u;
    std::vector<SymExpr> hs = sh;
    if (!up) {
      SymExpr d = floorDiv(sh.back(), I(2));
      hs.back() = d;
      g = gnode("remap", "slice", {xin}, x->type.dtype, hs, o);
      cg_.node(g).iv = {static_cast<int64_t>(sh.size()) - 1};
      cg_.node(g).sv = {I(0), I(1)};
      u = gnode("remap", "slice", {xin}, x->type.dtype, hs, o);
      cg_.node(u).iv = {static_cast<int64_t>(sh.size()) - 1};
      cg_.node(u).sv = {d, I(1)};
      member(g);
      member(u);
    } else {
      u = operand(up, n);
    }
    DType G = cg_.node(g).dtype;
    DType odt = name == "silu_and_mul" ? (out0 ? out0->type.dtype : G) : G;
    int h = cvt(un("silu", cvt(g, f32, hs), f32, hs), G, hs);
    int r = cvt(bin("mul", cvt(h, f32, hs), cvt(u, f32, hs), f32, hs), odt, hs);
    if (name == "silu_and_mul") {
      if (out0) define(out0, r);
    } else {
      Value* scale_v = valArg(n, "scale");
      int s = cvt(operand(scale_v, n), f32, scale_v->type.shape);
      int sc = bin("mul", cvt(r, f32, hs), un("reciprocal", s, f32, scale_v->type.shape), f32, hs);
      int cl = gnode("clamp", "", {sc}, f32, hs, o);
      cg_.node(cl).f = {-kernels::kFp8E4m3Max, kernels::kFp8E4m3Max};
      cg_.node(cl).iv = {1, 1};
      member(cl);
      if (out0) define(out0, gCast(cl, out0->type.dtype, hs, o));
    }
    return;
  }
  unsupported(n, "no lowering for this fxfuse op");
}

// ---------------------------------------------------------------------------------- rotary

// auto_functionalized(_C.rotary_embedding): outputs 1 and 2 are the new query and key.
void Lowerer::lowerRotary(Node& n) {
  Value* pos = valArg(n, "positions");
  Value* cache = valArg(n, "cos_sin_cache");
  int64_t head = intArg(n, "head_size", 0);
  bool neox = flag(n, "is_neox", true);
  if (!pos || !cache || head <= 0) unsupported(n, "rotary_embedding needs positions, head_size and cos_sin_cache");
  if (cache->type.shape.size() != 2 || !cache->type.shape[1].isInt())
    unsupported(n, "rotary_embedding cos_sin_cache must be [P, rot] with a constant rot");
  int64_t rot = cache->type.shape[1].intValue();
  const char* names[2] = {"query", "key"};
  for (int q = 0; q < 2; ++q) {
    Value* x = valArg(n, names[q]);
    Value* out = n.output(static_cast<size_t>(q + 1));
    if (!x || !out || out->numUses() == 0) continue;
    prepareGroup(n, {out->type.shape, 0}, true);
    int id = gnode("rotary", "", {operand(x, n), operand(pos, n), operand(cache, n)}, out->type.dtype, out->type.shape,
                   n.name);
    cg_.node(id).iv = {head, rot, neox ? 1 : 0};
    define(out, id);
  }
}

// ---------------------------------------------------------------------------------- dispatch

void Lowerer::lowerNode(Node& n) {
  const std::string& t = n.target;
  if (noopTargets().count(t)) return;
  bool used = false;
  for (Value* v : n.outputs()) used = used || (v && v->numUses() > 0);
  if (!used) return;  // dead (or only-side-effect nodes that a plan does not need)
  // Casts of a lifted scalar: host values, read by their users (num, operand, argScalar).
  if (n.numOutputs() == 1 && n.output(0) && ir::liftedScalarSource(n.output(0))) return;
  // Symbolic integer nodes: their values are expressions of the symbols.
  if (n.kind == ir::NodeKind::SymPy || t == "aten.sym_size.int" || t == "aten.sym_numel.default" ||
      t == "aten.sym_stride.int" || t.rfind("_operator.", 0) == 0) {
    Value* out = n.output(0);
    if (!out) unsupported(n, "symbolic node without an output");
    if (out->sym) {
      syms_[out] = *out->sym;
      return;
    }
    if (t == "aten.sym_size.int") {
      Value* x = tensorArg(n, "self");
      syms_[out] = x->type.shape.at(static_cast<size_t>(normDim(n, intArg(n, "dim", 0), x->type.shape.size())));
      return;
    }
    if (t == "aten.sym_numel.default") {
      syms_[out] = numelOf(tensorArg(n, "self")->type.shape);
      return;
    }
    std::vector<SymExpr> a;
    for (const auto& ar : n.args()) {
      if (ar.value.isValue()) a.push_back(symOf(ar.value.value, n));
      else if (auto s = ar.value.asSize()) a.push_back(*s);
    }
    if (a.size() == 2) {
      if (t == "_operator.add") syms_[out] = a[0] + a[1];
      else if (t == "_operator.sub") syms_[out] = a[0] - a[1];
      else if (t == "_operator.mul") syms_[out] = a[0] * a[1];
      else if (t == "_operator.floordiv") syms_[out] = floorDiv(a[0], a[1]);
      else if (t == "_operator.mod") syms_[out] = SymExpr::apply(SymExpr::Kind::Mod, {a[0], a[1]});
      else unsupported(n, "unknown symbolic op");
      return;
    }
    unsupported(n, "unknown symbolic op");
  }
  if (t == "aten.empty.memory_format" || t == "aten.empty_strided.default" || t == "aten.empty_like.default" ||
      t == "aten.empty_permuted.default") {
    Value* out = n.output(0);
    if (!out || n.numOutputs() != 1) unsupported(n, "an empty tensor op must have exactly one output");
    mat_[out] = freshFor(out);
    return;
  }
  if (t == "higher_order.auto_functionalized") {
    const Attr* op = n.arg("_mutable_op", 0);
    if (op && op->kind == Attr::Kind::Op && op->s == "_C.rotary_embedding.default") return lowerRotary(n);
  }
  if (t == "higher_order.auto_functionalized" || t == "higher_order.auto_functionalized_v2" ||
      t.rfind("_C.", 0) == 0)
    unsupported(n, "vLLM custom ops must be canonicalized first (run the compiler passes: fxfuse compile)");
  if (t.rfind("fxfuse.", 0) == 0) {
    std::string name = t.substr(7, t.size() - 7 - 8);
    if (name == "attention" || name == "attention_quant") return lowerAttention(n);
    if (name == "all_reduce") {
      if (opts_.world_size <= 1) {
        if (tryAlias(n)) return;
        return lowerGenerated(n);
      }
      Value* x = valArg(n, "input");
      int tx = contiguous(mat(x, n), n.name);
      closeGroup();
      int to = freshFor(n.output(0));
      pb::Step* st = addStep({n.name}, "all_reduce");
      auto* c = st->mutable_collective();
      c->set_op("all_reduce");
      c->set_reduce_op(str(n, "reduce_op", "sum"));
      c->set_group(str(n, "group_name", ""));
      c->set_input(tx);
      c->set_output(to);
      ir::symExprToProto(numelOf(x->type.shape), c->mutable_count());
      c->set_dtype(toPlanDType(x->type.dtype));
      touch(tx, stepIndex());
      touch(to, stepIndex());
      mat_[n.output(0)] = to;
      stats_.collectives++;
      return;
    }
    if (name == "all_reduce_rms_norm" || name == "all_reduce_rms_norm_quant") {
      if (lowerFusedAllReduceNorm(n)) return;
      if (opts_.world_size > 1)
        unsupported(n, "fused all-reduce + RMSNorm at world size > 1 needs one 16-bit dtype for input, residual, "
                       "weight and norm (the kernels' contract)");
      return lowerFxfuseGenerated(n);
    }
    if (lowerFxfuseLibrary(n)) return;
    return lowerFxfuseGenerated(n);
  }
  if (t == "aten.scaled_dot_product_attention.default" || t == "aten._scaled_dot_product_flash_attention.default" ||
      t == "aten._scaled_dot_product_flash_attention_for_cpu.default" ||
      t == "aten._scaled_dot_product_efficient_attention.default" ||
      t == "aten._scaled_dot_product_cudnn_attention.default" || t == "vllm.unified_attention.default")
    return lowerAttention(n);
  if (t == "aten.mm.default" || t == "aten.addmm.default" || t == "aten.bmm.default" || t == "aten.baddbmm.default" ||
      t == "aten.linear.default" ||
      t == "aten._scaled_mm.default" || t == "aten.matmul.default")
    return lowerMatmul(n);
  if (t == "vllm.all_reduce.default" || t == "_c10d_functional.all_reduce.default") {
    if (opts_.world_size > 1) unsupported(n, "run the compiler passes first: collectives lower from fxfuse.all_reduce");
  }
  // A view of a value still inside the open generated group: inline it as an index remap
  // when the group can take it, else close the group so the view aliases memory.
  if (grp_.open) {
    Value* self = valArg(n, "self");
    if (!self) self = valArg(n, "input");
    if (self && pending(self)) {
      Req q{n.numOutputs() == 1 && n.output(0) ? n.output(0)->type.shape : self->type.shape, 0};
      if (!canJoin(n, q, true)) closeGroup();
    }
  }
  if (tryAlias(n)) return;
  if (lowerRowComposite(n)) return;
  lowerGenerated(n);
}

void Lowerer::finish() {
  closeGroup();
  // Graph outputs.
  const int end_step = plan_.steps_size();
  for (const auto& go : g_.outputs()) {
    auto* io = plan_.add_outputs();
    io->set_role(go.kind == ir::OutputKind::UserOutput ? pb::USER_OUTPUT : pb::MUTATION);
    io->set_target(go.target);
    if (!go.value) {
      io->set_name("constant");
      io->set_is_symint(true);
      if (auto v = go.constant.asInt()) ir::symExprToProto(I(*v), io->mutable_sym_value());
      io->set_tensor(-1);
      continue;
    }
    io->set_name(go.value->name);
    if (go.value->kind != ir::ValueKind::Tensor) {
      io->set_is_symint(true);
      SymExpr e = syms_.count(go.value) ? syms_.at(go.value) : go.value->sym.value_or(I(0));
      ir::symExprToProto(e, io->mutable_sym_value());
      io->set_tensor(-1);
      continue;
    }
    auto it = mat_.find(go.value);
    if (it == mat_.end()) fail("lowering: graph output '{}' has no lowered value", go.value->name);
    io->set_tensor(it->second);
    io->set_dtype(toPlanDType(go.value->type.dtype));
    for (const auto& d : go.value->type.shape) ir::symExprToProto(d, io->add_shape());
    Buf& b = bufs_[static_cast<size_t>(trefs_[static_cast<size_t>(it->second)].buffer)];
    if (b.first < 0) b.first = 0;
    b.last = end_step;
  }
  // Memory plan over arena buffers that something writes or reads.
  std::vector<PlannerBuffer> pbufs;
  std::vector<int> pidx;
  for (size_t i = 0; i < bufs_.size(); ++i) {
    Buf& b = bufs_[i];
    if (b.kind != pb::ARENA) continue;
    if (b.first < 0) continue;  // never used
    pbufs.push_back({b.size, b.first, std::max(b.first, b.last)});
    pidx.push_back(static_cast<int>(i));
  }
  MemoryPlan mp = planMemory(pbufs, m_.symbols, env_, opts_.alignment);
  std::vector<SymExpr> offsets(bufs_.size(), I(0));
  for (size_t k = 0; k < pidx.size(); ++k) offsets[static_cast<size_t>(pidx[k])] = mp.offsets[k];
  for (size_t i = 0; i < bufs_.size(); ++i) {
    const Buf& b = bufs_[i];
    auto* pb_ = plan_.add_buffers();
    pb_->set_id(static_cast<int>(i));
    pb_->set_kind(b.kind);
    pb_->set_input(b.input);
    ir::symExprToProto(b.size, pb_->mutable_size_bytes());
    ir::symExprToProto(offsets[i], pb_->mutable_offset());
    pb_->set_first_step(b.first);
    pb_->set_last_step(b.last);
    pb_->set_name(b.name);
  }
  for (size_t i = 0; i < trefs_.size(); ++i) {
    const TRef& t = trefs_[i];
    auto* pt = plan_.add_tensors();
    pt->set_id(static_cast<int>(i));
    pt->set_buffer(t.buffer);
    pt->set_dtype(toPlanDType(t.dtype));
    for (const auto& d : t.shape) ir::symExprToProto(d, pt->add_shape());
    for (const auto& d : t.stride) ir::symExprToProto(d, pt->add_stride());
    ir::symExprToProto(t.offset, pt->mutable_offset());
    pt->set_name(t.name);
  }
  auto* ar = plan_.mutable_arena();
  ar->set_alignment(opts_.alignment);
  ir::symExprToProto(mp.peak_bytes, ar->mutable_peak_bytes());
  ir::symExprToProto(mp.no_reuse_bytes, ar->mutable_no_reuse_bytes());
  ar->set_peak_bytes_at_hint(mp.peak_at_hint);
  ar->set_no_reuse_bytes_at_hint(mp.no_reuse_at_hint);
}

pb::Plan Lowerer::run(LowerStats* stats) {
  g_.renumber();  // dense value ids: the order generated kernels store their outputs in
  plan_.set_plan_major(1);
  plan_.set_plan_minor(0);
  plan_.set_producer("fxfuse 0.1");
  plan_.set_source(opts_.source);
  plan_.set_graph(g_.name);
  plan_.set_world_size(opts_.world_size);
  plan_.set_target("sm_90a");
  // Inputs: buffers bound by the caller.
  int idx = 0;
  std::map<std::string, std::pair<int, int>> sym_src;
  for (const auto& gi : g_.inputs()) {
    Value* v = gi.value;
    auto* io = plan_.add_inputs();
    io->set_name(v->name);
    io->set_target(gi.target);
    io->set_role(gi.kind == ir::InputKind::Parameter ? pb::PARAMETER
                 : gi.kind == ir::InputKind::Buffer ? pb::BUFFER
                 : gi.kind == ir::InputKind::ConstantTensor ? pb::CONSTANT : pb::USER_INPUT);
    if (ir::isLiftedScalarInput(v)) {
      io->set_is_scalar(true);
      io->set_dtype(toPlanDType(v->type.dtype));
      io->set_tensor(-1);
      if (v->scalar_value) io->set_scalar_value(*v->scalar_value);
      scalar_inputs_[v] = idx++;
      continue;
    }
    if (v->kind != ir::ValueKind::Tensor) {
      io->set_is_symint(true);
      io->set_tensor(-1);
      if (v->sym) {
        ir::symExprToProto(*v->sym, io->mutable_sym_value());
        syms_[v] = *v->sym;
      }
      ++idx;
      continue;
    }
    io->set_dtype(toPlanDType(v->type.dtype));
    for (const auto& d : v->type.shape) ir::symExprToProto(d, io->add_shape());
    Buf b;
    b.kind = pb::INPUT;
    b.input = idx;
    b.size = numelOf(v->type.shape) * I(ir::dtypeBytes(v->type.dtype));
    b.name = v->name;
    bufs_.push_back(b);
    TRef t;
    t.buffer = static_cast<int>(bufs_.size()) - 1;
    t.dtype = v->type.dtype;
    t.shape = v->type.shape;
    t.stride = v->type.stride.size() == v->type.shape.size() ? v->type.stride : contiguousStrides(v->type.shape);
    t.offset = I(0);
    t.name = v->name;
    int tr = newTRef(t);
    mat_[v] = tr;
    io->set_tensor(tr);
    for (size_t d = 0; d < v->type.shape.size(); ++d) {
      const SymExpr& e = v->type.shape[d];
      if (e.isSym() && !sym_src.count(e.name())) sym_src[e.name()] = {idx, static_cast<int>(d)};
    }
    ++idx;
  }
  // Symbols.
  std::set<std::string> all;
  for (const auto& [name, info] : m_.symbols.all()) all.insert(name);
  for (const auto& [name, src] : sym_src) all.insert(name);
  for (const auto& name : all) {
    auto* s = plan_.add_symbols();
    s->set_name(name);
    if (const ir::SymbolInfo* info = m_.symbols.find(name)) {
      if (info->min) s->set_min(*info->min);
      if (info->max) s->set_max(*info->max);
      if (info->hint) s->set_hint(*info->hint);
    }
    auto it = sym_src.find(name);
    if (it != sym_src.end()) {
      s->mutable_source()->set_input(it->second.first);
      s->mutable_source()->set_dim(it->second.second);
    }
  }
  for (const auto& gd : m_.guards) *plan_.add_guards() = guardToProto(gd);
  for (auto& up : g_.nodes()) lowerNode(*up);
  finish();
  for (const auto& st : plan_.steps()) {
    stats_.steps++;
    if (st.has_kernel() || st.has_matmul() || st.has_collective() || st.has_fused_all_reduce_norm()) stats_.launches++;
  }
  if (stats) *stats = stats_;
  return std::move(plan_);
}

}  // namespace

pb::Plan lowerModule(ir::Module& m, const LowerOptions& opts, LowerStats* stats) {
  if (m.graphs().empty()) fail("lowering: module has no graph");
  Lowerer l(m, opts);
  return l.run(stats);
}

}  // namespace fxfuse::lowering
