#include "compiler/lowering/lowering.h"

#include "compiler/lowering/lowerer.h"

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
#include "ir/validate.h"

namespace fxfuse::lowering {

using namespace detail;  // NOLINT: the Lowerer's aliases (pb, DType, Node, ...), lowerer.h

// Launch plans hold the real and integer dtypes BOOL..F8E5M2 of the one DType enum (the
// plan's fields are fxfuse_ir.proto's DType, so the value carries over by a cast).
bool planHoldsDType(DType t) { return t >= DType::BOOL && t <= DType::F8E5M2; }

fxfuse::ir::v1::DType toPlanDType(DType t) {
  if (!planHoldsDType(t)) fail("launch plans do not support dtype {}", ir::dtypeName(t));
  return static_cast<fxfuse::ir::v1::DType>(t);
}

DType fromPlanDType(fxfuse::ir::v1::DType t) {
  const auto d = static_cast<DType>(t);
  return planHoldsDType(d) ? d : DType::DTYPE_UNSPECIFIED;
}

namespace detail {


// ---------------------------------------------------------------------------------- views

struct ViewResult {
  std::vector<SymExpr> shape, stride;
  SymExpr offset;
};

namespace {

bool isAllReduceTarget(const std::string& t) {
  return t == "fxfuse.all_reduce.default" || t == "vllm.all_reduce.default" ||
         t == "_c10d_functional.all_reduce.default";
}

// Casts, which alias their input when the dtype does not change.
bool isCastTarget(const std::string& t) {
  return t == "prims.convert_element_type.default" || t == "aten._to_copy.default" || t == "aten.to.dtype" ||
         t == "aten.to.dtype_layout" || t == "aten.type_as.default" || t == "aten.view.dtype";
}

}  // namespace

// The alias form of a view target; null for a target that is no view.
Lowerer::AliasForm Lowerer::aliasForm(const std::string& t) {
  // Identities; an all-reduce at one rank; casts to the same dtype.
  if (isIdentityTarget(t) || isAllReduceTarget(t) || isCastTarget(t)) return &Lowerer::aliasSame;
  auto it = aliasForms().find(t);
  return it == aliasForms().end() ? nullptr : it->second;
}

// The views with an alias form of their own: target -> form.
const std::map<std::string, Lowerer::AliasForm>& Lowerer::aliasForms() {
  static const std::map<std::string, AliasForm> forms = {
      {"aten.view.default", &Lowerer::aliasReshape},
      {"aten.reshape.default", &Lowerer::aliasReshape},
      {"aten._unsafe_view.default", &Lowerer::aliasReshape},
      {"aten.permute.default", &Lowerer::aliasPermute},
      {"aten.transpose.int", &Lowerer::aliasPermute},
      {"aten.t.default", &Lowerer::aliasPermute},
      {"aten.unsqueeze.default", &Lowerer::aliasUnsqueeze},
      {"aten.squeeze.dim", &Lowerer::aliasSqueeze},
      {"aten.squeeze.dims", &Lowerer::aliasSqueeze},
      {"aten.squeeze.default", &Lowerer::aliasSqueeze},
      {"aten.expand.default", &Lowerer::aliasExpand},
      {"aten.slice.Tensor", &Lowerer::aliasSlice},
      {"aten.select.int", &Lowerer::aliasSelect},
      {"aten.as_strided.default", &Lowerer::aliasAsStrided},
      {"aten.split.Tensor", &Lowerer::aliasSplit},
      {"aten.split_with_sizes.default", &Lowerer::aliasSplit},
      {"aten.chunk.default", &Lowerer::aliasSplit},
      {"aten.unbind.int", &Lowerer::aliasSplit},
  };
  return forms;
}

std::vector<std::string> Lowerer::aliasFormTargets() {
  std::vector<std::string> targets;
  for (const auto& [target, form] : aliasForms()) targets.push_back(target);
  return targets;
}

// A view node as an alias of its input's memory (a TensorRef, no step) when it can be one.
bool Lowerer::tryAlias(Node& n) {
  const std::string& t = n.target;
  Value* self = nullptr;
  for (const char* nm : {"self", "input", "a", "tensor"}) {
    self = valArg(n, nm);
    if (self) break;
  }
  if (!self || self->kind != ir::ValueKind::Tensor) return false;
  AliasForm form = aliasForm(t);
  if (!form) return false;
  if (isAllReduceTarget(t) && opts_.world_size > 1) return false;
  if (t == "aten.dropout.default" && flag(n, "train", false)) unsupported(n, "dropout in training mode");
  // Casts are views only when the dtype does not change (`aten.to.device` may carry a dtype:
  // HF rotary's `inv_freq.to(device, dtype=f32)`).
  if (isCastTarget(t) || t == "aten.to.device") {
    if (!n.output(0) || n.output(0)->type.dtype != self->type.dtype) return false;
  }
  if (pending(self)) return false;  // an index remap inside the open group instead
  auto it = mat_.find(self);
  if (it == mat_.end()) return false;
  const TRef src = trefs_[static_cast<size_t>(it->second)];
  return (this->*form)(n, src, n.output(0));
}

// `out` (none: nothing to do) as a view of src's buffer.
void Lowerer::aliasOf(Value* out, const TRef& src, std::vector<SymExpr> shape, std::vector<SymExpr> stride,
                      SymExpr offset) {
  if (!out) return;
  TRef nt;
  nt.buffer = src.buffer;
  nt.dtype = src.dtype;
  nt.shape = std::move(shape);
  nt.stride = std::move(stride);
  nt.offset = std::move(offset);
  nt.name = out->name;
  setMat(out, newTRef(std::move(nt)));
  stats_.aliases++;
}

// Identities, casts and one-rank all-reduces: the input itself (`contiguous` only when it is).
bool Lowerer::aliasSame(Node& n, const TRef& src, Value* out) {
  if (n.target == "aten.contiguous.default" && !isContiguous(src)) return false;
  aliasOf(out, src, src.shape, src.stride, src.offset);
  return true;
}

// view / reshape: contiguous strides, or where the input is not contiguous, strides that
// keep its element order (none: a reshape that must copy).
bool Lowerer::aliasReshape(Node&, const TRef& src, Value* out) {
  std::vector<SymExpr> shape = out ? out->type.shape : std::vector<SymExpr>{};
  if (!out) return true;
  if (isContiguous(src)) {
    aliasOf(out, src, shape, contiguousStrides(shape), src.offset);
    return true;
  }
  std::optional<std::vector<SymExpr>> strides = viewStrides(src, shape);
  if (!strides) return false;
  aliasOf(out, src, shape, *strides, src.offset);
  return true;
}

// torch's computeStride: the strides of `shape` viewing src's elements in order, splitting and
// merging dims only within contiguous chunks (comparisons at the hints); none when the view
// needs a copy.
std::optional<std::vector<SymExpr>> Lowerer::viewStrides(const TRef& src, const std::vector<SymExpr>& shape) {
  const size_t r = src.shape.size();
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
      if (view_numel != tensor_numel) return std::nullopt;
      if (td > 0) {
        chunk_base = src.stride[static_cast<size_t>(td - 1)];
        tensor_numel = I(1);
        view_numel = I(1);
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return ns;
}

// permute, transpose, t: the input's dims reordered.
bool Lowerer::aliasPermute(Node& n, const TRef& src, Value* out) {
  const std::string& t = n.target;
  const size_t r = src.shape.size();
  std::vector<int64_t> perm;
  if (t == "aten.permute.default") {
    perm = intList(n, "dims");
  } else {
    int64_t a = t == "aten.t.default" ? 0 : intArg(n, "dim0", 0), b = t == "aten.t.default" ? 1 : intArg(n, "dim1", 1);
    if (r < 2) {
      aliasOf(out, src, src.shape, src.stride, src.offset);
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
  aliasOf(out, src, sh, st, src.offset);
  return true;
}

// unsqueeze: a size-1 dim inserted at dim (negative: from the end).
bool Lowerer::aliasUnsqueeze(Node& n, const TRef& src, Value* out) {
  const size_t r = src.shape.size();
  int64_t d = intArg(n, "dim", 0);
  if (d < 0) d += static_cast<int64_t>(r) + 1;
  if (d < 0 || d > static_cast<int64_t>(r)) unsupported(n, "unsqueeze dim out of range");
  auto sh = src.shape;
  auto st = src.stride;
  SymExpr s = static_cast<size_t>(d) < r ? src.shape[static_cast<size_t>(d)] * src.stride[static_cast<size_t>(d)] : I(1);
  sh.insert(sh.begin() + d, I(1));
  st.insert(st.begin() + d, s);
  aliasOf(out, src, sh, st, src.offset);
  return true;
}

// squeeze of the named dims (those of size 1) or of every size-1 dim.
bool Lowerer::aliasSqueeze(Node& n, const TRef& src, Value* out) {
  const std::string& t = n.target;
  const size_t r = src.shape.size();
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
  aliasOf(out, src, sh, st, src.offset);
  return true;
}

// expand: broadcast dims (size 1 to more) and new leading dims get stride 0.
bool Lowerer::aliasExpand(Node& n, const TRef& src, Value* out) {
  if (!out) return true;
  const size_t r = src.shape.size();
  const auto& osh = out->type.shape;
  if (osh.size() < r) unsupported(n, "expand to a lower rank");
  std::vector<SymExpr> st(osh.size(), I(0));
  size_t off = osh.size() - r;
  for (size_t k = 0; k < r; ++k) st[k + off] = (isOne(src.shape[k]) && !isOne(osh[k + off])) ? I(0) : src.stride[k];
  aliasOf(out, src, osh, st, src.offset);
  return true;
}

// slice: the output's extent along dim from start (negative: from the end) by step.
bool Lowerer::aliasSlice(Node& n, const TRef& src, Value* out) {
  const size_t r = src.shape.size();
  if (out && out->type.shape.size() < r) unsupported(n, "output rank does not fit the input");
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
  aliasOf(out, src, sh, st, src.offset + start * src.stride[static_cast<size_t>(d)]);
  return true;
}

// select: one index along dim, which the view drops.
bool Lowerer::aliasSelect(Node& n, const TRef& src, Value* out) {
  if (!out) return true;
  const size_t r = src.shape.size();
  if (r == 0) unsupported(n, "select of a 0-d tensor (it has no dim to select from)");
  int64_t d = normDim(n, intArg(n, "dim", 0), r);
  SymExpr idx = requiredSize(n, "index");
  if (idx.isInt() && idx.intValue() < 0) idx = idx + src.shape[static_cast<size_t>(d)];
  auto sh = src.shape, st = src.stride;
  sh.erase(sh.begin() + d);
  st.erase(st.begin() + d);
  aliasOf(out, src, sh, st, src.offset + idx * src.stride[static_cast<size_t>(d)]);
  return true;
}

// as_strided: the given sizes, strides and storage offset (default: the input's offset).
bool Lowerer::aliasAsStrided(Node& n, const TRef& src, Value* out) {
  auto sh = sizeList(n, "size"), st = sizeList(n, "stride");
  SymExpr off = sizeArg(n, "storage_offset").value_or(src.offset);
  aliasOf(out, src, sh, st, off);
  return true;
}

// split, split_with_sizes, chunk, unbind: consecutive pieces along dim, one per output
// (unbind's pieces drop the dim).
bool Lowerer::aliasSplit(Node& n, const TRef& src, Value*) {
  const std::string& t = n.target;
  const size_t r = src.shape.size();
  int64_t d = normDim(n, intArg(n, "dim", 0), r);
  SymExpr start = I(0);
  for (size_t q = 0; q < n.numOutputs(); ++q) {
    Value* o = n.output(q);
    if (o && o->type.rank() != ir::splitPieceRank(t, r))
      unsupported(n, fmt::format("output {} is {}-D, the split input {}-D", q, o->type.rank(), r));
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
      aliasOf(o, src, sh, st, off);
    }
    start = start + len;
  }
  return true;
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
  // Reduced dims that are not trailing: a group of its own over the permuted domain (a
  // permute reads other rows, and values in the graph's coordinates cannot share it).
  if (!identity) closeGroup();
  prepareGroup(n, {psh, static_cast<int>(dims.size())}, !identity);
  if (!identity) grp_.permuted = true;
  int a = operand(x, n);
  if (identity) return a;
  int id = gnode("remap", "permute", {a}, cg_.node(a).dtype, psh, n.name);
  cg_.node(id).iv = perm;
  member(id);
  return id;
}

// Ops that are a short chain of elementwise steps around row reductions, generated into the
// row kernel of their input: layer norm (mean, centered mean of squares, rsqrt), var/var_mean,
// std (the square root of var) and Inductor's online-softmax statistics. Computed in f32 (f64
// for f64 inputs), rounded once to each output's dtype.
bool Lowerer::lowerRowComposite(Node& n) {
  const std::string& t = n.target;
  bool layer_norm = t == "aten.layer_norm.default" || t == "aten.native_layer_norm.default";
  bool std_dev = t == "aten.std.correction" || t == "aten.std.dim";
  bool var = std_dev || t == "aten.var_mean.correction" || t == "aten.var.correction" || t == "aten.var_mean.dim" ||
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
    if (std_dev) v = keep(gUnary("sqrt", v, ct, rs, o));
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

// ---------------------------------------------------------------------------------- rotary

// vLLM's rotary on its fused qkv as functionalization writes it: query and key are the
// leading column ranges of one tensor, and the new values go back into it.
//
//   q = qkv[:, 0:Q]   k = qkv[:, Q:Q+K]
//   _, q', k' = auto_functionalized(_C.rotary_embedding, query=q, key=k, ...)
//   s1 = slice_scatter(qkv, q', 1, 0, Q)   s2 = slice_scatter(s1, k', 1, Q, Q+K)
//     ==>  s2 = qkv with the heads of columns [0, Q+K) rotated: one kernel, stored, so the
//          views of s2 that attention reads are aliases of it
//
// (instead of two rotary kernels and a copy per view of s2).
std::optional<Lowerer::RotaryWriteback> Lowerer::rotaryWriteback(Node& n, int64_t head) {
  Value* q = valArg(n, "query");
  Value* k = valArg(n, "key");
  Value *q2 = n.output(1), *k2 = n.output(2);
  if (!q || !k || !q2 || !k2 || pending(q) || pending(k)) return std::nullopt;
  // An integer argument of `u` when it is a constant (`def` when absent); nullopt when symbolic.
  auto constInt = [&](const Node& u, const char* name, int64_t def) -> std::optional<int64_t> {
    const Attr* a = arg(u, name);
    return a ? a->asInt() : def;
  };
  // The single slice_scatter reading `src` along the last dim of a rank-2 tensor, or null.
  auto scatterOf = [&](Value* src) -> Node* {
    if (src->numUses() != 1 || src->graphOutputUses() != 0) return nullptr;
    Node* u = src->users().front();
    if (u->target != "aten.slice_scatter.default" || valArg(*u, "src") != src || !u->output(0)) return nullptr;
    if (u->output(0)->type.rank() != 2 || constInt(*u, "step", 1) != std::optional<int64_t>(1)) return nullptr;
    const std::optional<int64_t> dim = constInt(*u, "dim", 0);
    return dim == std::optional<int64_t>(1) || dim == std::optional<int64_t>(-1) ? u : nullptr;
  };
  Node* s1 = scatterOf(q2);
  Node* s2 = scatterOf(k2);
  if (!s1 || !s2 || valArg(*s2, "self") != s1->output(0) || s1->output(0)->numUses() != 1 ||
      s1->output(0)->graphOutputUses() != 0)
    return std::nullopt;
  Value* base = valArg(*s1, "self");
  auto mq = mat_.find(q), mk = mat_.find(k), mb = base ? mat_.find(base) : mat_.end();
  if (!base || pending(base) || mq == mat_.end() || mk == mat_.end() || mb == mat_.end()) return std::nullopt;
  const TRef &tq = trefs_[static_cast<size_t>(mq->second)], &tk = trefs_[static_cast<size_t>(mk->second)];
  const TRef& tb = trefs_[static_cast<size_t>(mb->second)];
  if (tb.shape.size() != 2 || tq.shape.size() != 2 || tk.shape.size() != 2 || !tq.shape[1].isInt() ||
      !tk.shape[1].isInt() || !tb.shape[1].isInt() || tq.dtype != tb.dtype || tk.dtype != tb.dtype)
    return std::nullopt;
  const int64_t Q = tq.shape[1].intValue(), K = tk.shape[1].intValue();
  const bool views_of_base = tq.buffer == tb.buffer && tk.buffer == tb.buffer && tq.stride == tb.stride &&
                             tk.stride == tb.stride && tq.shape[0] == tb.shape[0] && tk.shape[0] == tb.shape[0] &&
                             tq.offset == tb.offset && tk.offset == tb.offset + SymExpr::integer(Q);
  if (!views_of_base || Q % head != 0 || K % head != 0 || Q + K > tb.shape[1].intValue()) return std::nullopt;
  if (constInt(*s1, "start", 0) != std::optional<int64_t>(0) || constInt(*s1, "end", -1) != std::optional<int64_t>(Q) ||
      constInt(*s2, "start", -1) != std::optional<int64_t>(Q) || constInt(*s2, "end", -1) != std::optional<int64_t>(Q + K))
    return std::nullopt;
  return RotaryWriteback{base, s1, s2, Q + K};
}

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
  if (auto wb = rotaryWriteback(n, head)) {
    if (deferRotaryToPagedAttention(n, *wb, head, neox)) return;
    Value* out = wb->second->output(0);
    prepareGroup(n, {out->type.shape, 0}, true);
    int id = gnode("rotary", "", {operand(wb->base, n), operand(pos, n), operand(cache, n)}, out->type.dtype,
                   out->type.shape, n.name);
    cg_.node(id).iv = {head, rot, neox ? 1 : 0, wb->rotated};
    define(out, id);
    for (Node* s : {wb->first, wb->second}) {
      grp_.nodes.insert(s);
      lowered_ahead_.insert(s);
    }
    closeGroup();
    return;
  }
  if (lowerRotaryPairStep(n, head)) return;
  const char* names[2] = {"query", "key"};
  for (int q = 0; q < 2; ++q) {
    Value* x = valArg(n, names[q]);
    Value* out = n.output(static_cast<size_t>(q + 1));
    if (!x || !out || out->numUses() == 0) continue;
    if (lowerRotaryStep(n, x, out, head)) continue;
    prepareGroup(n, {out->type.shape, 0}, true);
    int id = gnode("rotary", "", {operand(x, n), operand(pos, n), operand(cache, n)}, out->type.dtype, out->type.shape,
                   n.name);
    cg_.node(id).iv = {head, rot, neox ? 1 : 0};
    define(out, id);
  }
}

// ---------------------------------------------------------------------------------- dispatch

namespace {

// Ops with a lowering of their own (their own steps, not a generated kernel): target -> rule.
// Canonical and fused fxfuse ops dispatch by name in lowerNode; everything else goes to the
// generated-kernel rules (generated_rules.cc).
using NodeRule = void (Lowerer::*)(Node&);
const std::map<std::string, NodeRule>& ownRules() {
  static const auto* kRules = new std::map<std::string, NodeRule>{
      {"aten.empty.memory_format", &Lowerer::lowerEmpty},
      {"aten.empty_strided.default", &Lowerer::lowerEmpty},
      {"aten.empty_like.default", &Lowerer::lowerEmpty},
      {"aten.empty_permuted.default", &Lowerer::lowerEmpty},
      {"aten.new_empty.default", &Lowerer::lowerEmpty},
      {"aten.new_empty_strided.default", &Lowerer::lowerEmpty},
      {"aten.scaled_dot_product_attention.default", &Lowerer::lowerAttention},
      {"aten._scaled_dot_product_flash_attention.default", &Lowerer::lowerAttention},
      {"aten._scaled_dot_product_flash_attention_for_cpu.default", &Lowerer::lowerAttention},
      {"aten._scaled_dot_product_efficient_attention.default", &Lowerer::lowerAttention},
      {"aten._scaled_dot_product_cudnn_attention.default", &Lowerer::lowerAttention},
      {"vllm.unified_attention.default", &Lowerer::lowerAttention},
      {"aten.mm.default", &Lowerer::lowerMatmul},
      {"aten.addmm.default", &Lowerer::lowerMatmul},
      {"aten.bmm.default", &Lowerer::lowerMatmul},
      {"aten.baddbmm.default", &Lowerer::lowerMatmul},
      {"aten.linear.default", &Lowerer::lowerMatmul},
      {"aten._scaled_mm.default", &Lowerer::lowerMatmul},
      {"aten.matmul.default", &Lowerer::lowerMatmul},
  };
  return *kRules;
}

}  // namespace

// An uninitialized tensor: a fresh arena buffer, no step.
void Lowerer::lowerEmpty(Node& n) {
  Value* out = n.output(0);
  if (!out || n.numOutputs() != 1) unsupported(n, "an empty tensor op must have exactly one output");
  setMat(out, freshFor(out));
}

// A node whose outputs nobody reads is skipped: right for a dead computation, wrong for an op
// that writes one of its arguments in place (Tensor!), whose effect the plan would silently
// leave out. The functionalize pass turns every mutation it can express into values; what it
// leaves (a mutation a graph's caller sees through an input, of a view whose base is read
// later, of a list) reaches lowering as such a node, and is refused here with its argument.
void Lowerer::refuseDroppedMutation(const Node& n) {
  const ir::OpSchema* s = ir::lookupSchema(m_.op_schemas, n.target, &schema_cache_);
  if (!s) return;
  for (int i : s->mutableArgs()) {
    const Attr* a = n.arg(s->args[static_cast<size_t>(i)].name, i);
    if (!a || !a->isValue() || !a->value || !a->value->isTensor()) continue;
    const Value* v = a->value;
    unsupported(n, fmt::format("writes its argument '{}' ({}{}) in place, which a launch plan would leave out: plans "
                               "lower functional graphs, and the functionalize pass could not make this one "
                               "functional (`fxfuse explain` says why)",
                               s->args[static_cast<size_t>(i)].name, v->isGraphInput() ? "graph input " : "",
                               v->name));
  }
}

void Lowerer::lowerNode(Node& n) {
  const std::string& t = n.target;
  if (noopTargets().count(t) || lowered_ahead_.count(&n)) return;
  bool used = false;
  for (Value* v : n.outputs()) used = used || (v && v->numUses() > 0);
  if (!used) {
    refuseDroppedMutation(n);
    return;  // dead
  }
  for (Value* v : n.outputs())
    if (v && v->kind == ir::ValueKind::Tensor)
      if (std::string neg = negativeAtHints(v->type.shape); !neg.empty())
        unsupported(n, fmt::format("{} has a size that is negative at the symbols' hints ({})",
                                   v->name.empty() ? "its output" : "output '" + v->name + "'", neg));
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
  if (auto rule = ownRules().find(t); rule != ownRules().end()) return (this->*rule->second)(n);
  if (t == "higher_order.auto_functionalized") {
    const Attr* op = n.arg("_mutable_op", 0);
    if (op && op->kind == Attr::Kind::Op && op->s == "_C.rotary_embedding.default") return lowerRotary(n);
  }
  if (t == "higher_order.auto_functionalized" || t == "higher_order.auto_functionalized_v2" ||
      t.rfind("_C.", 0) == 0)
    unsupported(n, "a vLLM custom op the compiler passes did not canonicalize (" + whyThePassesLeft(n) + ")");
  if (t.rfind("fxfuse.", 0) == 0) {
    std::string name = t.substr(7, t.size() - 7 - 8);
    if (name == "attention" || name == "attention_quant") return lowerAttention(n);
    if (name == "paged_attention") return lowerPagedAttention(n);
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
      setMat(n.output(0), to);
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
    if (std::string neg = negativeAtHints(v->type.shape); !neg.empty())
      fail("lowering: input '{}' has a size that is negative at the symbols' hints ({})", v->name, neg);
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
    setMat(v, tr);
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
  for (auto& up : g_.nodes()) {
    lowerNode(*up);
    lowered_.insert(up.get());
  }
  finish();
  for (const auto& st : plan_.steps()) {
    stats_.steps++;
    if (st.has_kernel() || st.has_matmul() || st.has_collective() || st.has_fused_all_reduce_norm()) stats_.launches++;
  }
  if (stats) *stats = stats_;
  return std::move(plan_);
}

}  // namespace detail

using detail::Lowerer;

std::vector<std::string> LoweredTargets() {
  std::set<std::string> targets;
  for (const auto& [target, rule] : ownRules()) targets.insert(target);
  for (const std::string& target : Lowerer::aliasFormTargets()) targets.insert(target);
  for (const std::string& target : generatedRuleTargets()) targets.insert(target);
  return {targets.begin(), targets.end()};
}

// A refusal names the graph file (opts.source) before the node and op, as the readers' do.
pb::Plan lowerModule(ir::Module& m, const LowerOptions& opts, LowerStats* stats) {
  try {
    if (m.graphs().empty()) fail("lowering: module has no graph");
    Lowerer l(m, opts);
    return l.run(stats);
  } catch (const FxError& e) {
    if (opts.source.empty()) throw;
    throw FxError(opts.source + ": " + e.what());
  }
}

}  // namespace fxfuse::lowering
