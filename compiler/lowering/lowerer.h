// The lowering's working state and rules, shared by its files (internal to compiler/lowering).
//
// A `Lowerer` walks one graph in order and turns each node into plan steps: views alias
// memory (lowering.cc), elementwise and row ops join generated kernels (generated_rules.cc:
// a table from op to rule), GEMMs go to cuBLASLt (matmul.cc), attention to our kernels
// (attention.cc), paged KV-cache attention to the paged steps (paged_attention.cc), canonical
// and fused fxfuse ops to their kernels (fxfuse_ops.cc).
#pragma once

#include "compiler/lowering/lowering.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <optional>
#include <set>

#include "compiler/lowering/codegen.h"
#include "compiler/lowering/memory_planner.h"
#include "ir/lifted_scalar.h"
#include "ir/op_schema.h"
#include "ir/proto_io.h"
#include "ir/status.h"
#include "kernels/attention/attention.h"
#include "kernels/types.h"

namespace fxfuse::lowering::detail {

namespace pb = fxfuse::plan::v1;
using ir::Attr;
using ir::DType;
using ir::Node;
using ir::SymExpr;
using ir::Value;

inline SymExpr I(int64_t v) { return SymExpr::integer(v); }
inline bool isOne(const SymExpr& e) { return e.isInt() && e.intValue() == 1; }
inline std::string shapeText(const std::vector<SymExpr>& shape) {
  std::string s;
  for (const auto& d : shape) s += (s.empty() ? "" : ", ") + d.str();
  return s;
}

inline std::vector<SymExpr> contiguousStrides(const std::vector<SymExpr>& shape) {
  return ir::TensorType::contiguousStrides(shape);
}

// Targets grouped by how they lower.
inline const std::set<std::string>& noopTargets() {
  static const std::set<std::string> s = {
      "aten._assert_tensor_metadata.default",
      "aten._assert_scalar.default",
      "aten.sym_constrain_range_for_size.default",
      "aten._assert_async.msg",
  };
  return s;
}

inline bool isIdentityTarget(const std::string& t) {
  static const std::set<std::string> s = {
      "aten.alias.default",      "aten.detach.default",
      "aten.clone.default",      "aten.lift_fresh_copy.default",
      "aten.contiguous.default", "aten.to.device",
      "aten.dropout.default",    "_c10d_functional.wait_tensor.default",
      "aten.detach_.default",    "aten.positive.default",
  };
  return s.count(t) > 0;
}

// What a generated-op rule defines: the node's output tensor, its dtype and shape, and the
// node's name (the origin of the gnodes it adds).
struct GenOut {
  Value* out = nullptr;
  DType odt = DType::DTYPE_UNSPECIFIED;
  std::vector<SymExpr> osh;
  std::string o;
};

struct TRef {
  int buffer = -1;
  DType dtype = DType::DTYPE_UNSPECIFIED;
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
  std::vector<int> members;  // gnodes
  std::set<const Node*> nodes;
  std::map<const Value*, int> values;  // pending graph values -> gnode
  std::vector<SymExpr> domain;
  int kred = 0;
  // The domain is a permutation of the reduced value's shape (a reduction over dims that are
  // not the trailing ones): its coordinates are not the graph's, so no other node may join.
  bool permuted = false;
};

class Lowerer {
 public:
  Lowerer(ir::Module& m, const LowerOptions& o) : m_(m), g_(m.entry()), opts_(o) {
    env_ = hintEnv(m.symbols);
    for (const auto& [name, info] : m.symbols.all())
      if (info.hint) given_hints_[name] = *info.hint;
  }

  pb::Plan run(LowerStats* stats);
  // The views with an alias form of their own (LoweredTargets, lowering.h).
  static std::vector<std::string> aliasFormTargets();

 private:
  // ------------------------------------------------------------------ small helpers
  // A node a pass made names the graph's nodes it came from (a user finds those in the file).
  [[noreturn]] void unsupported(const Node& n, const std::string& why) {
    auto from = n.meta.find("fused_from");
    const std::string origin =
        from != n.meta.end() && from->second != n.name ? ", from '" + from->second + "'" : std::string();
    fail("lowering: node '{}' ({}{}): {}", n.name, n.target, origin, why);
  }
  std::string whyThePassesLeft(const Node& n) const {
    auto it = opts_.reasons_left_by_passes.find(n.name);
    return it != opts_.reasons_left_by_passes.end() ? it->second : "`fxfuse explain` says why a pass left it";
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
  // The first dim of `shape` that is negative at the symbols' hints, as "s0 - 64 = -56", or
  // "" when none is: a plan's reader refuses such a tensor (a graph consistent for some
  // bindings, e.g. a slice from 64 of a dim of s0 >= 64, whose hints bind s0 = 8). As the
  // reader (and the door, ir/validate) do, only dims whose every symbol has a hint are checked.
  std::string negativeAtHints(const std::vector<SymExpr>& shape) {
    for (const SymExpr& d : shape)
      if (std::optional<int64_t> v = d.isInt() ? std::nullopt : d.evaluate(given_hints_); v && *v < 0)
        return fmt::format("{} = {}", d.str(), *v);
    return "";
  }
  void checkSliceFits(const Node& n, const SymExpr& start, const SymExpr& step, const SymExpr& in_dim,
                      const SymExpr& out_dim) {
    // Symbolic sizes are checked at the symbols' hints: a slice consistent for every binding
    // is consistent there, and a start past the dim (INT64_MAX) makes a view no kernel may read.
    int64_t s = start.isInt() ? start.intValue() : hint(start), k = step.isInt() ? step.intValue() : hint(step);
    int64_t d = in_dim.isInt() ? in_dim.intValue() : hint(in_dim),
            o = out_dim.isInt() ? out_dim.intValue() : hint(out_dim);
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
  // Value v is held by TensorRef `tref` (mat_), and is one of the values on its buffer.
  void setMat(const Value* v, int tref) {
    mat_[v] = tref;
    const int buffer = trefs_[static_cast<size_t>(tref)].buffer;
    if (buffer >= 0) values_on_buffer_[buffer].push_back(v);
  }
  // The values held on `buffer` now (a value set again on another buffer is left out).
  std::vector<const Value*> valuesOnBuffer(int buffer) const {
    std::vector<const Value*> out;
    auto it = values_on_buffer_.find(buffer);
    if (it == values_on_buffer_.end()) return out;
    for (const Value* v : it->second)
      if (trefs_[static_cast<size_t>(mat_.at(v))].buffer == buffer) out.push_back(v);
    return out;
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
    if (a->kind == Attr::Kind::Bool) return constNum(a->b ? 1 : 0, DType::BOOL);
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
    if (!grp_.open || !opts_.fuse || grp_.permuted) return false;
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
    if (!main.empty()) emitKernel(gr.members, gr.domain, gr.kred, main, gr.permuted);
    for (auto& ot : extra) {
      if (depReduce(ot.first))
        fail("lowering: node '{}': a value of shape [{}] computed from a row reduction over [{}] cannot be stored",
             cg_.node(ot.first).origin, shapeText(cg_.node(ot.first).shape), shapeText(gr.domain));
      emitKernel(gr.members, cg_.node(ot.first).shape, 0, {ot});
    }
    for (auto& [v, t] : stored) setMat(v, t);
  }
  // `rows_permuted`: the group's domain is permuted (Group::permuted); every value it stores
  // must be a row statistic.
  void emitKernel(const std::vector<int>& members, const std::vector<SymExpr>& domain, int kred,
                  const std::vector<std::pair<int, int>>& outs, bool rows_permuted = false) {
    std::vector<StoredOutput> so;
    for (auto& [gn, t] : outs) {
      const TRef& tr = trefs_[static_cast<size_t>(t)];
      if (rows_permuted && numelOf(tr.shape) != numelOf(rowsOf(domain, kred)))
        fail("lowering: node '{}': a value of shape [{}] computed over the permuted rows [{}] cannot be stored",
             cg_.node(gn).origin, shapeText(tr.shape), shapeText(domain));
      so.push_back({gn, MemTensor{t, tr.dtype, tr.shape, tr.stride, tr.offset}, rows_permuted});
    }
    std::string name = "fx_k" + std::to_string(plan_.kernels_size());
    KernelSource ks = cg_.emit(name, members, domain, kred, so);
    auto* gk = plan_.add_kernels();
    gk->set_name(ks.name);
    gk->set_source(ks.source);
    gk->set_hash(sourceHash(ks.source));
    gk->set_kind(ks.kind);
    for (const auto& nn : ks.nodes) gk->add_nodes(nn);
    for (const auto& [node, op] : ks.index_sites) {
      auto* site = gk->add_index_sites();
      site->set_node(node);
      site->set_op(op);
    }
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
  void refuseDroppedMutation(const Node& n);
  bool tryAlias(Node& n);
  bool lowerRowComposite(Node& n);
  int trailingSource(Node& n, Value* x, const std::set<int64_t>& dims, std::vector<SymExpr>* shape);
  void batchOperands(Node& n, int& ta, TRef& A, int& tb, TRef& B);
  struct MatmulLowering;  // matmul.cc: one GEMM's operands, cuBLASLt step and epilogue
  attention::AttentionShapeFacts attentionFacts(int q4, int k4, int v4, int o4, bool has_mask, bool fp8_out) const;
  // paged_attention.cc: fxfuse.paged_attention -> rt.reshape_and_cache + rt.paged_attention.
  void lowerPagedAttention(Node& n);
  int tokenHeadView(const Node& n, int tref, const SymExpr& head_size, const std::string& what);
  int inPlaceCache(const Node& n, const std::string& name, DType model_dtype);
  int pagedMetadata(const Node& n, const std::string& name, DType dtype, size_t rank);
  bool lowerFxfuseLibrary(Node& n);
  struct FxfuseLibraryCall;  // fxfuse_ops.cc: one fxfuse op as a launch of a kernel of kernels/
  struct ResidualOperands {
    int read, write;  // TensorRefs: the residual's rows, and where the kernel writes their sum
  };
  ResidualOperands residualOperands(Node& n, Value* residual, const std::vector<SymExpr>& shape, DType dt,
                                    Value* res_out, bool out_of_place);
  bool lowerFusedAllReduceNorm(Node& n);
  void lowerFxfuseGenerated(Node& n);
  struct FxfuseMath;  // fxfuse_ops.cc: the fused ops' math as generated code
  void lowerRotary(Node& n);
  // lowering.cc: vLLM's rotary writing its new query and key back into the fused qkv.
  struct RotaryWriteback {
    Value* base;           // qkv
    Node *first, *second;  // the two slice_scatter nodes
    int64_t rotated;       // Q + K
  };
  std::optional<RotaryWriteback> rotaryWriteback(Node& n, int64_t head);
  // paged_attention.cc: a rotary whose written-back qkv only one paged attention reads (through
  // views) is left to that attention's cache write instead of a generated kernel.
  struct DeferredRotary {
    const Node* rotary = nullptr;
    int base = -1;  // the qkv tensor (rotated in place by the cache-write step)
    Value* positions = nullptr;
    Value* cos_sin_cache = nullptr;
    int64_t head = 0, query_cols = 0, rotated = 0;  // rotated = query_cols + key columns
    bool neox = true;
  };
  bool deferRotaryToPagedAttention(Node& n, const RotaryWriteback& wb, int64_t head, bool neox);
  bool onlyRotaryReads(const Node& rotary, const RotaryWriteback& wb);
  const Node* pagedAttentionReading(Value* qkv);
  bool rotaryFoldsIntoCacheWrite(const DeferredRotary& d, int tq, int tk, int tv, const SymExpr& head_size);
  void rotaryArgs(pb::KernelLaunch* k, const DeferredRotary& d, int query, const Node& attention);
  void lowerRotaryInPlace(const DeferredRotary& d, const Node& attention);
  // paged_attention.cc: a dense plan's rotary as runtime rotation steps (false: not taken).
  bool lowerRotaryPairStep(Node& n, int64_t head);
  bool lowerRotaryStep(Node& n, Value* x, Value* out, int64_t head);
  bool rotaryStepTakes(const Node& n, Value* x, Value* out, int64_t head);
  void addRotaryStep(const Node& n, int query, int query_out, const std::string& what);
  std::optional<int> headRowsView(int tref, int64_t head);
  void finish();

  // ------------------------------------------------------------------ views (lowering.cc)
  // tryAlias's forms, one per kind of view: each makes the node's outputs views of its input
  // in memory, `src` (`out`: output 0, null when absent), and returns false when this instance
  // cannot alias (the node is then lowered by the other rules).
  using AliasForm = bool (Lowerer::*)(Node& n, const TRef& src, Value* out);
  static AliasForm aliasForm(const std::string& target);
  static const std::map<std::string, AliasForm>& aliasForms();
  void aliasOf(Value* out, const TRef& src, std::vector<SymExpr> shape, std::vector<SymExpr> stride, SymExpr offset);
  bool aliasSame(Node& n, const TRef& src, Value* out);
  bool aliasReshape(Node& n, const TRef& src, Value* out);
  std::optional<std::vector<SymExpr>> viewStrides(const TRef& src, const std::vector<SymExpr>& shape);
  bool aliasPermute(Node& n, const TRef& src, Value* out);
  bool aliasUnsqueeze(Node& n, const TRef& src, Value* out);
  bool aliasSqueeze(Node& n, const TRef& src, Value* out);
  bool aliasExpand(Node& n, const TRef& src, Value* out);
  bool aliasSlice(Node& n, const TRef& src, Value* out);
  bool aliasSelect(Node& n, const TRef& src, Value* out);
  bool aliasAsStrided(Node& n, const TRef& src, Value* out);
  bool aliasSplit(Node& n, const TRef& src, Value* out);

  // ------------------------------------------------------------------ generated-op rules
  // (generated_rules.cc: public so that its table can name them; called only through it)
 public:
  void lowerEmpty(Node& n);
  void lowerMatmul(Node& n);
  void lowerAttention(Node& n);
  void lowerGenerated(Node& n);
  GenOut generatedOutput(Node& n);
  struct RowSource {
    int id = -1;                 // the input read as rows of the reduced dims
    int k = 0;                   // how many trailing dims are reduced
    std::vector<SymExpr> shape;  // its shape
  };
  std::set<int64_t> reducedDims(Node& n, Value* x);
  std::optional<RowSource> reductionSource(Node& n, const GenOut& g, Value* x, const std::set<int64_t>& dims);
  void defineReducedRow(const GenOut& g, int res, const std::vector<SymExpr>& rs);
  void lowerReduction(Node& n, const GenOut& g);
  void lowerMaxMinDim(Node& n, const GenOut& g);
  void lowerAnyAll(Node& n, const GenOut& g);
  void lowerSoftmax(Node& n, const GenOut& g);
  void lowerVectorNorm(Node& n, const GenOut& g);
  void lowerLogSumExp(Node& n, const GenOut& g);
  void lowerArgExtreme(Node& n, const GenOut& g);
  void lowerTopkSort(Node& n, const GenOut& g);
  void lowerUnary(Node& n, const GenOut& g);
  void lowerGelu(Node& n, const GenOut& g);
  void lowerBinary(Node& n, const GenOut& g);
  void lowerDivMode(Node& n, const GenOut& g);
  void lowerPowScalar(Node& n, const GenOut& g);
  void lowerAddSub(Node& n, const GenOut& g);
  void lowerWhere(Node& n, const GenOut& g);
  void lowerMaskedFill(Node& n, const GenOut& g);
  void lowerClampTensor(Node& n, const GenOut& g);
  void lowerClampScalar(Node& n, const GenOut& g);
  void lowerCast(Node& n, const GenOut& g);
  void lowerFill(Node& n, const GenOut& g);
  void lowerArange(Node& n, const GenOut& g);
  void lowerEye(Node& n, const GenOut& g);
  void lowerCopy(Node& n, const GenOut& g);
  void lowerReshape(Node& n, const GenOut& g);
  void lowerPermute(Node& n, const GenOut& g);
  void lowerSlice(Node& n, const GenOut& g);
  void lowerSelect(Node& n, const GenOut& g);
  void lowerUnsqueeze(Node& n, const GenOut& g);
  void lowerSqueeze(Node& n, const GenOut& g);
  void lowerExpand(Node& n, const GenOut& g);
  void lowerSplit(Node& n, const GenOut& g);
  void lowerCat(Node& n, const GenOut& g);
  void lowerRepeat(Node& n, const GenOut& g);
  void lowerFlip(Node& n, const GenOut& g);
  void lowerRoll(Node& n, const GenOut& g);
  void lowerRepeatInterleave(Node& n, const GenOut& g);
  void lowerPad(Node& n, const GenOut& g);
  void lowerConstantPadNd(Node& n, const GenOut& g);
  void lowerTriangle(Node& n, const GenOut& g);
  void lowerCumsum(Node& n, const GenOut& g);
  void lowerDiff(Node& n, const GenOut& g);
  void lowerEmbedding(Node& n, const GenOut& g);
  void lowerGather(Node& n, const GenOut& g);
  void lowerIndex(Node& n, const GenOut& g);
  void lowerScatter(Node& n, const GenOut& g);
  void lowerIndexPut(Node& n, const GenOut& g);
  void lowerSliceScatter(Node& n, const GenOut& g);
  void lowerSelectScatter(Node& n, const GenOut& g);
  void lowerHistc(Node& n, const GenOut& g);
  void lowerGroupedMm(Node& n, const GenOut& g);
  void lowerConvolution(Node& n, const GenOut& g);

 private:
  void checkPadShapes(const Node& n, const Value* x, const std::vector<SymExpr>& pad,
                      const std::vector<SymExpr>& out_shape);
  void checkConvWindow(const Node& n, const SymExpr& in, const SymExpr& kernel, const SymExpr& out, int64_t stride,
                       int64_t pad, int64_t dil);
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
  std::map<std::string, int64_t> env_;          // every symbol: its hint, else its max, min or 64
  std::map<std::string, int64_t> given_hints_;  // the symbols that have a hint (a plan's reader's)
  std::map<std::string, ir::OpSchema, std::less<>> schema_cache_;
  pb::Plan plan_;
  std::vector<Buf> bufs_;
  std::vector<TRef> trefs_;
  std::map<const Value*, int> mat_;  // set through setMat
  // Every value setMat put on a buffer, by buffer (valuesOnBuffer): a rule that asks which values
  // share one buffer reads this list, not all of mat_ (which made lowering quadratic in layers).
  std::map<int, std::vector<const Value*>> values_on_buffer_;
  std::set<const Node*> lowered_ahead_;  // nodes a rule already lowered with an earlier node
  std::map<const Node*, DeferredRotary> deferred_rotary_;  // by the paged attention applying it
  std::set<const Node*> lowered_;        // nodes whose steps are already in the plan
  std::map<const Value*, int> scalar_inputs_;  // lifted scalar input -> index into Plan.inputs
  std::map<const Value*, SymExpr> syms_;
  std::map<int, int> loads_;
  std::map<int, bool> dep_red_;
  Codegen cg_;
  Group grp_;
  LowerStats stats_;
};

// The targets of generated_rules.cc's rule table (LoweredTargets, lowering.h).
std::vector<std::string> generatedRuleTargets();

}  // namespace fxfuse::lowering::detail
