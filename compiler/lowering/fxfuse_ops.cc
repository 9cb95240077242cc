// Canonical and fused fxfuse ops lowered to kernels of kernels/ or to generated kernels.
#include "compiler/lowering/lowerer.h"

namespace fxfuse::lowering::detail {

// ---------------------------------------------------------------------------------- fxfuse ops

// The residual operands of a kernel that adds `residual` to its input and writes the sum:
// `read` (the rows it adds) and `write` (where the sum goes). Donated (both the residual's own
// tensor) when nothing reads the old residual after this node: its other readers (the first
// layer's norm reads the embedding it also adds) are already lowered, so their steps run before
// this one. Otherwise the sum goes to a fresh tensor: written there directly when the kernel
// takes a separate output (`out_of_place`) and the residual is dense rows, else into a copy of
// the residual that the kernel then updates in place.
Lowerer::ResidualOperands Lowerer::residualOperands(Node& n, Value* residual, const std::vector<SymExpr>& shape,
                                                    DType dt, Value* res_out, bool out_of_place) {
  int tri = mat(residual, n);
  // (freshTensor below may move trefs_: decide everything about `tri` before it)
  const TRef& ri = trefs_[static_cast<size_t>(tri)];
  const Buf& rb = bufs_[static_cast<size_t>(ri.buffer)];
  const bool dense_same_shape = isContiguous(ri) && ri.shape == shape;
  bool later_readers = false;
  for (const Node* u : residual->users()) later_readers = later_readers || (u != &n && !lowered_.count(u));
  bool donate = rb.kind == pb::ARENA && rb.trefs == 1 && !later_readers && residual->graphOutputUses() == 0 &&
                dense_same_shape;
  if (donate) return {tri, tri};
  int tres = freshTensor(dt, shape, res_out ? res_out->name : residual->name + ".updated");
  if (dense_same_shape && out_of_place) return {tri, tres};
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
  return {tres, tres};
}

// One fxfuse op as a launch of a kernel of kernels/ (lib.silu_and_mul, lib.rms_norm,
// lib.quant_fp8, lib.rms_norm_quant_fp8): its operands in memory, the input as T rows of H,
// and one method per kernel adding that launch's arguments.
struct Lowerer::FxfuseLibraryCall {
  Lowerer& L;
  Node& n;
  const std::string& name;  // the op, fxfuse.<name>.default
  const std::string& kind;  // quant kind
  DType xd;                 // the input's dtype (bf16 or f16), also the weight's and residual's
  Value* out0;
  int tx;                   // the input
  SymExpr H, T, xrs;        // hidden size, rows (tokens), the input's row stride
  int tw, tsc, tub;         // weight, scale, scale upper bound (-1: none)
  ResidualOperands res;     // the residual's rows and where their sum goes (-1, -1: none)
  Value* res_out;           // the graph's value of the updated residual

  // The input's arguments, common to the norm and quant kernels.
  void rowInputArgs(pb::KernelLaunch* k) {
    L.argI(k, "num_tokens", T);
    L.argI(k, "hidden_size", H);
    L.argD(k, "dtype", xd);
    L.argT(k, "input", tx);
    L.argI(k, "input_row_stride", xrs);
  }

  // The FP8 quant's scale arguments: a static scale is the given tensor; a dynamic one is
  // computed into `scale_out` (or into a scratch tensor when the graph does not use it).
  void scaleArgs(pb::KernelLaunch* k, Value* scale_out) {
    std::string sk = kind == "static_tensor"    ? "static_per_tensor"
                     : kind == "dynamic_token"  ? "dynamic_per_token"
                     : kind == "dynamic_tensor" ? "dynamic_per_tensor"
                     : kind == "dynamic_group"  ? "dynamic_per_group"
                                                : "";
    if (sk.empty()) L.unsupported(n, "unknown quant kind '" + kind + "'");
    L.argS(k, "scale_kind", sk);
    if (kind == "static_tensor") {
      if (tsc < 0) L.unsupported(n, "static quant without a scale");
      L.argT(k, "scale", tsc);
    } else {
      int tso;
      if (scale_out) {
        tso = L.freshFor(scale_out);
        L.setMat(scale_out, tso);
      } else {
        std::vector<SymExpr> ss = kind == "dynamic_token" ? std::vector<SymExpr>{T}
                                  : kind == "dynamic_tensor"
                                      ? std::vector<SymExpr>{I(1)}
                                      : std::vector<SymExpr>{T, floorDiv(H, I(L.intArg(n, "group_size", 128)))};
        tso = L.freshTensor(DType::F32, ss, n.name + ".scale");
      }
      L.argT(k, "scale", tso);
    }
    if (kind == "dynamic_group") L.argI(k, "group_size", I(L.intArg(n, "group_size", 0)));
    if (tub >= 0) L.argT(k, "scale_ub", tub);
    L.argS(k, "scale_application", L.flag(n, "divide", false) ? "divide" : "multiply_by_reciprocal");
    L.argF(k, "min_abs", L.num(n, "min_abs", 0.0));
    L.argF(k, "min_scale", L.num(n, "min_scale", 4.359654017857143e-06));
  }

  // The weight, when there is one, in the input's dtype.
  void weightArgs(pb::KernelLaunch* k) {
    if (tw >= 0) {
      L.argT(k, "weight", tw);
      L.argD(k, "weight_dtype", xd);
    }
  }

  // The residual the kernel adds to the input, and (when it is not updated in place) where the
  // sum goes; `rounded_sum_default`: the variance of the rounded sum unless the node says.
  void residualArgs(pb::KernelLaunch* k, bool rounded_sum_default) {
    L.argT(k, "residual", res.read);
    L.argI(k, "residual_row_stride", H);
    if (res.write != res.read) {
      L.argT(k, "residual_out", res.write);
      L.argI(k, "residual_out_row_stride", H);
    }
    L.argS(k, "residual_variance",
           L.flag(n, "variance_of_rounded_sum", rounded_sum_default) ? "rounded_sum" : "unrounded_sum");
    if (res_out) L.setMat(res_out, res.write);
  }

  // silu_and_mul[_quant]: silu of the input's first half times its second half (H / 2 each).
  void siluAndMul(pb::KernelLaunch* k) {
    SymExpr d = floorDiv(H, I(2));
    k->set_kernel("lib.silu_and_mul");
    L.argI(k, "num_tokens", T);
    L.argI(k, "hidden_size", d);
    L.argD(k, "dtype", xd);
    L.argT(k, "input", tx);
    L.argI(k, "input_row_stride", xrs);
    int to = L.freshFor(out0);
    L.argD(k, "output_dtype", out0->type.dtype);
    L.argT(k, "output", to);
    L.argI(k, "output_row_stride", d);
    if (name == "silu_and_mul_quant") {
      L.argT(k, "scale", tsc);
      L.argS(k, "scale_application", "multiply_by_reciprocal");
    }
    L.setMat(out0, to);
  }

  // rms_norm, fused_add_rms_norm (the residual added first and updated in place).
  void rmsNorm(pb::KernelLaunch* k, bool fused_add) {
    k->set_kernel("lib.rms_norm");
    rowInputArgs(k);
    weightArgs(k);
    int to = L.freshFor(out0);
    L.argT(k, "output", to);
    L.argI(k, "output_row_stride", H);
    if (fused_add) residualArgs(k, false);
    L.argScalar(k, n, "epsilon", 1e-6);
    L.setMat(out0, to);
  }

  // quant_fp8 of the input; the scale is output 1 when dynamic.
  void quantFp8(pb::KernelLaunch* k) {
    k->set_kernel("lib.quant_fp8");
    rowInputArgs(k);
    int to = L.freshFor(out0);
    L.argT(k, "output", to);
    L.argI(k, "output_row_stride", H);
    scaleArgs(k, n.output(1));
    L.setMat(out0, to);
  }

  // rms_norm_quant, fused_add_rms_norm_quant: the norm's FP8 quant; a dynamic scale is the
  // output after the residual's.
  void rmsNormQuant(pb::KernelLaunch* k, bool fused_add) {
    k->set_kernel("lib.rms_norm_quant_fp8");
    rowInputArgs(k);
    weightArgs(k);
    if (fused_add) residualArgs(k, true);
    L.argScalar(k, n, "epsilon", 1e-6);
    int to = L.freshFor(out0);
    L.argT(k, "output", to);
    L.argI(k, "output_row_stride", H);
    scaleArgs(k, n.output(fused_add ? 2 : 1));
    L.setMat(out0, to);
  }
};

// The fxfuse ops the kernels of kernels/ take (one 16-bit dtype throughout, no separate `up`,
// the scale forms they implement) as one launch; false leaves the node to generated code.
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
  Value* scale = valArg(n, "scale");
  int tsc = scale ? mat(scale, n) : -1;
  Value* ub = valArg(n, "scale_ub");
  int tub = ub ? mat(ub, n) : -1;
  closeGroup();

  ResidualOperands res{-1, -1};
  Value* res_out = nullptr;
  if (residual) {
    res_out = n.output(1);
    res = residualOperands(n, residual, X.shape, xd, res_out, /*out_of_place=*/true);
  }
  FxfuseLibraryCall call{*this, n, name, kind, xd, out0, tx, H, T, xrs, tw, tsc, tub, res, res_out};
  pb::KernelLaunch* k = addStep({n.name}, name)->mutable_kernel();
  if (is_sm)
    call.siluAndMul(k);
  else if (is_rn || is_far)
    call.rmsNorm(k, is_far);
  else if (is_q)
    call.quantFp8(k);
  else
    call.rmsNormQuant(k, name == "fused_add_rms_norm_quant");
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
  int tres = residual ? residualOperands(n, residual, shape, xd, res_out, /*out_of_place=*/false).write : -1;

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
    if (quant)
      f->set_quant_out(to);
    else
      f->set_norm_out(to);
    setMat(out0, to);
  } else if (!quant) {
    f->set_norm_out(use(freshTensor(xd, shape, n.name + ".norm")));  // the kernels need one output
  } else {
    f->set_quant_out(use(freshTensor(DType::F8E4M3FN, shape, n.name + ".q")));
  }
  if (residual) {
    if (res_out) setMat(res_out, tres);
  } else if (res_out && res_out->numUses() + res_out->graphOutputUses() > 0) {
    int ta = use(freshFor(res_out));
    f->set_allreduce_out(ta);
    setMat(res_out, ta);
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
// The exact math of the canonical and fused ops (docs/canonical-ops.md) as generated code,
// in f32, for the forms the kernels of kernels/ do not take (other dtypes, weights or layouts;
// fused all-reduce ops at one rank). One builder per op family; the shared steps (cast, norm,
// static and per-token quant) are its members.
struct Lowerer::FxfuseMath {
  Lowerer& L;
  Node& n;
  const std::string& o;  // the node's name: the origin of every gnode
  Value* x;              // the `input` argument
  const std::vector<SymExpr>& sh;
  std::vector<SymExpr> rs;  // one value per row
  int xin;                  // x as a gnode
  std::string kind;         // quant kind
  Value* out0;
  static constexpr DType f32 = DType::F32;

  int cvt(int a, DType t, const std::vector<SymExpr>& s) {
    int r = L.gCast(a, t, s, o);
    if (r != a) L.member(r);
    return r;
  }
  int bin(const std::string& f, int a, int b, DType t, const std::vector<SymExpr>& s) {
    int r = L.gBin(f, a, b, t, s, o);
    L.member(r);
    return r;
  }
  int un(const std::string& f, int a, DType t, const std::vector<SymExpr>& s) {
    int r = L.gUnary(f, a, t, s, o);
    L.member(r);
    return r;
  }
  DType normDType(DType def) { return L.dtypeArg(n, "norm_dtype").value_or(def); }
  // A row of v (fp32) normalized, rounded to ndt, times the weight, rounded to odt.
  int norm(int v, DType ndt, DType odt, Value* w) {
    int sq = bin("mul", v, v, f32, sh);
    int mean = L.gReduce("mean", sq, 1, f32, rs, o);
    L.member(mean);
    int eps = L.constNum(static_cast<double>(static_cast<float>(L.num(n, "epsilon", 1e-6))), f32);
    int inv = un("rsqrt", bin("add", mean, eps, f32, rs), f32, rs);
    int nn = cvt(bin("mul", v, inv, f32, sh), ndt, sh);
    if (!w) return cvt(nn, odt, sh);
    int wv = cvt(L.operand(w, n), f32, w->type.shape);
    return cvt(bin("mul", cvt(nn, f32, sh), wv, f32, sh), odt, sh);
  }
  int clampFp8(int v, const std::vector<SymExpr>& s) {
    int cl = L.gnode("clamp", "", {v}, f32, s, o);
    L.cg_.node(cl).f = {-kernels::kFp8E4m3Max, kernels::kFp8E4m3Max};
    L.cg_.node(cl).iv = {1, 1};
    L.member(cl);
    return cl;
  }
  // Static per-tensor FP8: v / s or v * (1/s), clamped, rounded to e4m3fn.
  int quant(int v, Value* scale_v, bool divide) {
    int s = cvt(L.operand(scale_v, n), f32, scale_v->type.shape);
    int vf = cvt(v, f32, sh);
    int scaled =
        divide ? bin("div", vf, s, f32, sh) : bin("mul", vf, un("reciprocal", s, f32, scale_v->type.shape), f32, sh);
    return cvt(clampFp8(scaled, sh), DType::F8E4M3FN, sh);
  }
  // Dynamic per-token FP8: the row's absmax (capped by scale_ub, floored by min_abs) / 448,
  // at least min_scale, is the row's scale.
  void dynQuant(int v, Value* q_out, Value* scale_out) {
    int vf = cvt(v, f32, sh);
    int a = L.gReduce("max", un("abs", vf, f32, sh), 1, f32, rs, o);
    L.member(a);
    if (Value* ub = L.valArg(n, "scale_ub")) a = bin("min", a, cvt(L.operand(ub, n), f32, ub->type.shape), f32, rs);
    a = bin("max", a, L.constNum(L.num(n, "min_abs", 0.0), f32), f32, rs);
    int s = bin("max", bin("div", a, L.constNum(kernels::kFp8E4m3Max, f32), f32, rs),
                L.constNum(L.num(n, "min_scale", 4.359654017857143e-06), f32), f32, rs);
    bool divide = L.flag(n, "divide", false);
    int scaled = divide ? bin("div", vf, s, f32, sh) : bin("mul", vf, un("reciprocal", s, f32, rs), f32, sh);
    int cl = clampFp8(scaled, sh);
    if (q_out) L.define(q_out, L.gCast(cl, q_out->type.dtype, sh, o));
    if (scale_out) L.define(scale_out, L.gnode("remap", "reshape", {s}, f32, scale_out->type.shape, o));
  }
  // The quant a fused op ends with: static, or per-token with its scale as output `scale_index`.
  void quantOut(int v, size_t scale_index, bool static_scale) {
    if (static_scale) {
      if (out0) L.define(out0, quant(v, L.valArg(n, "scale"), L.flag(n, "divide", false)));
    } else {
      dynQuant(v, out0, n.output(scale_index));
    }
  }

  // rms_norm, rms_norm_quant
  void rmsNorm(bool with_quant) {
    Value* w = L.valArg(n, "weight");
    DType odt = !with_quant ? (out0 ? out0->type.dtype : x->type.dtype)
                            : (ir::isHalf16(x->type.dtype) ? x->type.dtype : normDType(x->type.dtype));
    int nn = norm(cvt(xin, f32, sh), normDType(x->type.dtype), odt, w);
    if (!with_quant) {
      if (out0) L.define(out0, nn);
      return;
    }
    quantOut(nn, 1, kind == "static_tensor");
  }

  // fused_add_rms_norm[_quant]; all_reduce_rms_norm[_quant] at one rank (the all-reduce of one
  // rank is the identity; without a residual the residual output is the input itself).
  void fusedAddNorm(bool fused_add_quant, bool all_reduce_quant) {
    Value* res = L.valArg(n, "residual");
    Value* w = L.valArg(n, "weight");
    Value* res_out = n.output(1);
    if (!res) {
      DType odt = out0 ? out0->type.dtype : x->type.dtype;
      int nn = norm(cvt(xin, f32, sh), normDType(x->type.dtype), all_reduce_quant ? x->type.dtype : odt, w);
      if (out0) L.define(out0, all_reduce_quant ? quant(nn, L.valArg(n, "scale"), L.flag(n, "divide", false)) : nn);
      if (res_out) L.define(res_out, cvt(xin, res_out->type.dtype, sh));
      return;
    }
    DType rdt = res_out ? res_out->type.dtype : res->type.dtype;
    int s = bin("add", cvt(xin, f32, sh), cvt(L.operand(res, n), f32, res->type.shape), f32, sh);
    int ro = cvt(s, rdt, sh);
    bool rounded_sum = L.flag(n, "variance_of_rounded_sum", fused_add_quant);
    int v = rounded_sum ? cvt(ro, f32, sh) : s;
    DType ndt = normDType(res->type.dtype);
    bool with_quant = fused_add_quant || all_reduce_quant;
    DType odt = with_quant ? (ir::isHalf16(x->type.dtype) ? x->type.dtype : ndt) : (out0 ? out0->type.dtype : ndt);
    int nn = norm(v, ndt, odt, w);
    if (res_out) L.define(res_out, ro);
    if (!with_quant) {
      if (out0) L.define(out0, nn);
      return;
    }
    quantOut(nn, 2, all_reduce_quant || kind == "static_tensor");
  }

  // silu_and_mul[_quant]: the halves of the last dim, or gate and a separate `up`.
  void siluAndMul(bool with_quant) {
    Value* up = L.valArg(n, "up");
    int g = xin, u;
    std::vector<SymExpr> hs = sh;
    if (!up) {
      SymExpr d = floorDiv(sh.back(), I(2));
      hs.back() = d;
      g = half(hs, I(0));
      u = half(hs, d);
    } else {
      u = L.operand(up, n);
    }
    DType G = L.cg_.node(g).dtype;
    DType odt = !with_quant ? (out0 ? out0->type.dtype : G) : G;
    int h = cvt(un("silu", cvt(g, f32, hs), f32, hs), G, hs);
    int r = cvt(bin("mul", cvt(h, f32, hs), cvt(u, f32, hs), f32, hs), odt, hs);
    if (!with_quant) {
      if (out0) L.define(out0, r);
      return;
    }
    Value* scale_v = L.valArg(n, "scale");
    int s = cvt(L.operand(scale_v, n), f32, scale_v->type.shape);
    int sc = bin("mul", cvt(r, f32, hs), un("reciprocal", s, f32, scale_v->type.shape), f32, hs);
    int cl = clampFp8(sc, hs);
    if (out0) L.define(out0, L.gCast(cl, out0->type.dtype, hs, o));
  }
  int half(const std::vector<SymExpr>& hs, const SymExpr& start) {
    int id = L.gnode("remap", "slice", {xin}, x->type.dtype, hs, o);
    L.cg_.node(id).iv = {static_cast<int64_t>(sh.size()) - 1};
    L.cg_.node(id).sv = {start, I(1)};
    L.member(id);
    return id;
  }
};

void Lowerer::lowerFxfuseGenerated(Node& n) {
  const std::string name = n.target.substr(7, n.target.size() - 7 - 8);
  Value* x = valArg(n, "input");
  if (!x) unsupported(n, "missing input");
  const auto& sh = x->type.shape;
  if (sh.empty()) unsupported(n, "rank-0 input");
  std::string kind = str(n, "kind", "static_tensor");
  bool needs_row =
      name != "silu_and_mul" && name != "silu_and_mul_quant" && !(name == "quant_fp8" && kind == "static_tensor");
  if (kind == "dynamic_group" || kind == "dynamic_tensor")
    unsupported(n, "group and per-tensor dynamic quantization need the kernels library (dtype/layout not covered)");
  if (name.rfind("all_reduce", 0) == 0 && opts_.world_size > 1)
    unsupported(n, "fused all-reduce at world size > 1 needs an NCCL step first (not lowered through generated code)");
  prepareGroup(n, {sh, needs_row ? 1 : 0}, false);
  FxfuseMath m{*this, n, n.name, x, sh, rowShape(sh), operand(x, n), kind, n.output(0)};
  if (name == "rms_norm" || name == "rms_norm_quant") return m.rmsNorm(name == "rms_norm_quant");
  if (name == "fused_add_rms_norm" || name == "fused_add_rms_norm_quant" || name == "all_reduce_rms_norm" ||
      name == "all_reduce_rms_norm_quant")
    return m.fusedAddNorm(name == "fused_add_rms_norm_quant", name == "all_reduce_rms_norm_quant");
  if (name == "quant_fp8") return m.quantOut(m.xin, 1, kind == "static_tensor");
  if (name == "silu_and_mul" || name == "silu_and_mul_quant") return m.siluAndMul(name == "silu_and_mul_quant");
  unsupported(n, "no lowering for this fxfuse op");
}

}  // namespace fxfuse::lowering::detail
