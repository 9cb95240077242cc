// GEMMs (mm, addmm, bmm, baddbmm, linear, matmul, _scaled_mm) lowered to cuBLASLt steps.
#include "compiler/lowering/lowerer.h"

namespace fxfuse::lowering::detail {

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

// One GEMM (mm, addmm, bmm, baddbmm, linear, matmul, _scaled_mm) as a cuBLASLt step: its
// arguments, the operands as matrices cuBLASLt takes (copied where their layout needs it),
// the bias as an epilogue or a C matrix, and the epilogue of row-wise FP8 scales.
struct Lowerer::MatmulLowering {
  Lowerer& L;
  Node& n;
  Value* out;
  // The arguments.
  Value *a = nullptr, *b = nullptr, *bias = nullptr, *sa = nullptr, *sb = nullptr, *sr = nullptr;
  bool b_is_weight = false;  // linear: weight [N, K]
  double alpha = 1, beta = 1;
  // The operands in memory: A [batch,] M x K, B [batch,] K x N.
  int ta = -1, tb = -1, tbias = -1;
  TRef A{}, B{};
  SymExpr batch = I(1);
  SymExpr M{}, K{}, N{};
  // _scaled_mm: its scales; row-wise ones (not one per tensor) are applied by an epilogue.
  bool fp8 = false, rowwise = false;
  int tsa = -1, tsb = -1, tsr = -1;
  // The result D [batch,] M x N (in f32 before a row-wise epilogue) and C (the bias as a matrix).
  DType odt = DType::DTYPE_UNSPECIFIED, ddt = DType::DTYPE_UNSPECIFIED;
  std::vector<SymExpr> dsh{};
  int td = -1, tc = -1;
  bool bias_vec = false;  // the bias is a vector [N]: cuBLASLt's bias epilogue

  // The operands and factors, by target.
  void readArguments() {
    const std::string& t = n.target;
    if (t == "aten.mm.default" || t == "aten.bmm.default" || t == "aten.matmul.default") {
      a = L.valArg(n, "self");
      b = L.valArg(n, t == "aten.matmul.default" ? "other" : "mat2");
    } else if (t == "aten.addmm.default" || t == "aten.baddbmm.default") {
      bool batched = t == "aten.baddbmm.default";
      bias = L.valArg(n, "self");
      a = L.valArg(n, batched ? "batch1" : "mat1");
      b = L.valArg(n, batched ? "batch2" : "mat2");
      alpha = L.num(n, "alpha", 1);
      beta = L.num(n, "beta", 1);
    } else if (t == "aten.linear.default") {
      a = L.valArg(n, "input");
      b = L.valArg(n, "weight");
      bias = L.valArg(n, "bias");
      b_is_weight = true;
    } else if (t == "aten._scaled_mm.default") {
      a = L.valArg(n, "self");
      b = L.valArg(n, "mat2");
      sa = L.valArg(n, "scale_a");
      sb = L.valArg(n, "scale_b");
      bias = L.valArg(n, "bias");
      sr = L.valArg(n, "scale_result");
      fp8 = true;
    }
    if (!a || !b) L.unsupported(n, "matmul operands missing");
  }

  // The operands in memory; linear's weight [N, K] as a [K, N] view.
  void materializeOperands() {
    ta = L.mat(a, n);
    tb = L.mat(b, n);
    tbias = bias ? L.mat(bias, n) : -1;
    A = L.trefs_[static_cast<size_t>(ta)];
    B = L.trefs_[static_cast<size_t>(tb)];
    if (b_is_weight) {
      if (B.shape.size() != 2) L.unsupported(n, "linear weight must be 2-D");
      std::swap(B.shape[0], B.shape[1]);
      std::swap(B.stride[0], B.stride[1]);
      B.name += ".T";
      tb = L.newTRef(B);
    }
  }

  // matmul, bmm: 1-D operands become a [1, K] row / [K, 1] column (the output view drops the
  // 1); batched operands of any rank become one strided batch.
  void vectorsAndBatch() {
    if (A.shape.size() == 1) {
      A.shape = {I(1), A.shape[0]};
      A.stride = {A.shape[1] * A.stride[0], A.stride[0]};
      ta = L.newTRef(A);
    }
    if (B.shape.size() == 1) {
      B.shape = {B.shape[0], I(1)};
      B.stride = {B.stride[0], I(1)};
      tb = L.newTRef(B);
    }
    if (B.shape.size() > 2 || (A.shape.size() > 3 && B.shape.size() > 2)) L.batchOperands(n, ta, A, tb, B);
  }

  // The GEMM's shape: A's leading dims flattened into M when B is 2-D (linear, matmul ND x 2D),
  // the batch of 3-D operands; other ranks are refused.
  void gemmShape() {
    if (B.shape.size() == 2 && A.shape.size() > 2) {
      std::vector<SymExpr> lead(A.shape.begin(), A.shape.end() - 1);
      bool ok = true;
      for (size_t k = 0; k + 2 < A.shape.size(); ++k)
        if (!isOne(A.shape[k]) && A.stride[k] != A.stride[k + 1] * A.shape[k + 1]) ok = false;
      if (!ok || !(isOne(A.stride.back()) || isOne(A.shape.back()))) {
        ta = L.copyTo(ta, n.name);
        A = L.trefs_[static_cast<size_t>(ta)];
      }
      TRef f = A;
      f.shape = {numelOf(lead), A.shape.back()};
      f.stride = {A.stride[A.shape.size() - 2], A.stride.back()};
      f.name += ".2d";
      ta = L.newTRef(f);
      A = f;
    } else if (A.shape.size() == 3 && B.shape.size() == 3) {
      batch = A.shape[0];
    } else if (A.shape.size() != 2 || B.shape.size() != 2) {
      L.unsupported(n, "matmul operands of these ranks are not supported");
    }
    size_t ra = A.shape.size(), rb = B.shape.size();
    M = A.shape[ra - 2];
    K = A.shape[ra - 1];
    N = B.shape[rb - 1];
  }

  // Operands whose matrices have no unit stride (neither row- nor column-major) copied contiguous.
  void unitInnerStrides() {
    auto innerOk = [&](const TRef& x) {
      size_t r = x.shape.size();
      return isOne(x.stride[r - 1]) || isOne(x.stride[r - 2]) || isOne(x.shape[r - 1]) || isOne(x.shape[r - 2]);
    };
    if (!innerOk(A)) {
      ta = L.copyTo(ta, n.name);
      A = L.trefs_[static_cast<size_t>(ta)];
    }
    if (!innerOk(B)) {
      tb = L.copyTo(tb, n.name);
      B = L.trefs_[static_cast<size_t>(tb)];
    }
  }

  // _scaled_mm: the scales in memory (row-wise unless both are one number), A row-major and
  // B column-major as cuBLASLt FP8 needs (torch requires the same).
  void fp8Operands() {
    tsa = L.mat(sa, n);
    tsb = L.mat(sb, n);
    if (sr) tsr = L.mat(sr, n);
    auto numel = [&](int tr) { return numelOf(L.trefs_[static_cast<size_t>(tr)].shape); };
    if (!(numel(tsa).isInt() && numel(tsa).intValue() == 1 && numel(tsb).isInt() && numel(tsb).intValue() == 1)) {
      rowwise = true;
      if (A.shape.size() != 2) L.unsupported(n, "row-wise scaled matmul must be 2-D");
    }
    if (!(isOne(A.stride[1]) || isOne(A.shape[1]))) {
      ta = L.copyTo(ta, n.name);
      A = L.trefs_[static_cast<size_t>(ta)];
    }
    if (!(isOne(B.stride[0]) || isOne(B.shape[0]))) {
      TRef bt = B;  // materialize the transpose contiguous, then view it back
      std::swap(bt.shape[0], bt.shape[1]);
      std::swap(bt.stride[0], bt.stride[1]);
      int tt = L.copyTo(L.newTRef(bt), n.name);
      TRef c = L.trefs_[static_cast<size_t>(tt)];
      std::swap(c.shape[0], c.shape[1]);
      std::swap(c.stride[0], c.stride[1]);
      tb = L.newTRef(c);
      B = c;
    }
  }

  // D, a fresh tensor. Row-wise scales: cuBLASLt computes acc in fp32 (unit scales); a
  // generated epilogue applies acc * scale_a[m] * scale_b[n] (+ bias) and rounds once, as
  // torch's row-wise kernel does.
  void allocateResult() {
    odt = out->type.dtype;
    ddt = rowwise ? DType::F32 : odt;
    dsh = batch == I(1) && A.shape.size() == 2 ? std::vector<SymExpr>{M, N} : std::vector<SymExpr>{batch, M, N};
    if (B.shape.size() == 2 && L.trefs_[static_cast<size_t>(L.mat(a, n))].shape.size() > 2) dsh = {M, N};
    td = L.freshTensor(ddt, dsh, out->name + (rowwise ? ".acc" : ""));
  }

  // addmm/linear bias: a vector [N] is a cuBLASLt epilogue; a full [M, N] matrix is C (beta).
  void biasOperand() {
    if (tbias < 0 || rowwise) return;
    const TRef& bt = L.trefs_[static_cast<size_t>(tbias)];
    SymExpr bn = numelOf(bt.shape);
    if (bn == N && beta == 1.0 && (bt.shape.size() == 1 || isOne(bt.shape[0])) && bt.dtype == odt) {
      bias_vec = true;
    } else {
      // Broadcast to D's shape in a contiguous C matrix.
      int ld = L.loadOf(tbias);
      int ex = L.gnode("remap", "expand", {ld}, odt, dsh, n.name);
      if (L.cg_.node(ld).dtype != odt) ex = L.gnode("cast", "", {ex}, odt, dsh, n.name);
      tc = L.freshTensor(odt, dsh, out->name + ".c");
      L.emitKernel({ex}, dsh, 0, {{ex, tc}});
    }
  }

  // The cuBLASLt step D = alpha * A B (+ beta C) (+ bias), per-tensor FP8 scales included.
  void addStep() {
    pb::Step* st =
        L.addStep({n.name}, fp8 ? (rowwise ? "fp8 row-wise scaled matmul (fp32 accumulator)" : "fp8 scaled matmul")
                                : "matmul");
    auto* mm = st->mutable_matmul();
    int s = L.stepIndex();
    mm->set_a(ta);
    mm->set_b(tb);
    mm->set_c(tc);
    mm->set_d(td);
    mm->set_bias(bias_vec ? tbias : -1);
    for (int x : {ta, tb, td}) L.touch(x, s);
    if (tc >= 0) L.touch(tc, s);
    if (bias_vec) L.touch(tbias, s);
    ir::symExprToProto(M, mm->mutable_m());
    ir::symExprToProto(N, mm->mutable_n());
    ir::symExprToProto(K, mm->mutable_k());
    ir::symExprToProto(batch, mm->mutable_batch());
    mm->set_a_dtype(toPlanDType(A.dtype));
    mm->set_b_dtype(toPlanDType(B.dtype));
    mm->set_d_dtype(toPlanDType(ddt));
    mm->set_compute(fxfuse::ir::v1::F32);
    mm->set_alpha(alpha);
    mm->set_beta(tc >= 0 ? beta : 0.0);
    mm->set_scale_mode(fp8 ? (rowwise ? pb::SCALE_NONE : pb::SCALE_PER_TENSOR) : pb::SCALE_NONE);
    mm->set_scale_a(fp8 && !rowwise ? tsa : -1);
    mm->set_scale_b(fp8 && !rowwise ? tsb : -1);
    mm->set_scale_d(fp8 && !rowwise && tsr >= 0 && ir::isFp8(odt) ? tsr : -1);
    if (fp8 && !rowwise) {
      L.touch(tsa, s);
      L.touch(tsb, s);
      if (tsr >= 0 && ir::isFp8(odt)) L.touch(tsr, s);
    }
    mm->set_epilogue(bias_vec ? pb::EPILOGUE_BIAS : pb::EPILOGUE_NONE);
    mm->set_fast_accum(fp8 && L.flag(n, "use_fast_accum", false));
    mm->set_algorithm("heuristic");
    mm->set_workspace_bytes(32 << 20);
  }

  // Row-wise FP8: the output is acc * scale_a * scale_b (+ bias), rounded once (a generated kernel).
  void rowwiseScaleEpilogue() {
    int acc = L.loadOf(td);
    int ga = L.loadOf(tsa), gb = L.loadOf(tsb);
    DType f32 = DType::F32;
    std::vector<SymExpr> sh2{M, N};
    int x = L.gnode("binary", "mul", {acc, ga}, f32, sh2, n.name);
    int y = L.gnode("binary", "mul", {x, gb}, f32, sh2, n.name);
    std::vector<int> mem{x, y};
    if (tbias >= 0) {
      int bl = L.loadOf(tbias);
      y = L.gnode("binary", "add", {y, L.gCast(bl, f32, L.trefs_[static_cast<size_t>(tbias)].shape, n.name)}, f32, sh2,
                  n.name);
      mem.push_back(y);
    }
    int r = L.gnode("cast", "", {y}, odt, sh2, n.name);
    mem.push_back(r);
    int to = L.freshFor(out);
    L.emitKernel(mem, sh2, 0, {{r, to}});
    L.setMat(out, to);
  }

  // The output is D, viewed back to the output's shape where that differs (matmul ND x 2D).
  void bindOutput() {
    const auto& osh = out->type.shape;
    if (osh != L.trefs_[static_cast<size_t>(td)].shape) {
      TRef v = L.trefs_[static_cast<size_t>(td)];
      v.shape = osh;
      v.stride = contiguousStrides(osh);
      v.name = out->name;
      L.setMat(out, L.newTRef(v));
    } else {
      L.setMat(out, td);
    }
  }
};

void Lowerer::lowerMatmul(Node& n) {
  const std::string& t = n.target;
  Value* out = n.output(0);
  if (!out) return;
  MatmulLowering m{*this, n, out};
  m.readArguments();
  m.materializeOperands();
  if (t == "aten.matmul.default" || t == "aten.bmm.default") m.vectorsAndBatch();
  m.gemmShape();
  m.unitInnerStrides();
  if (m.fp8) m.fp8Operands();
  closeGroup();
  m.allocateResult();
  m.biasOperand();
  m.addStep();
  stats_.matmuls++;
  if (m.rowwise)
    m.rowwiseScaleEpilogue();
  else
    m.bindOutput();
}

}  // namespace fxfuse::lowering::detail
