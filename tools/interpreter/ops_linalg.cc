// Matrix products (through OpenBLAS dgemm, one rounding of the f64 result), _scaled_mm,
// scaled dot-product attention in all its ATen spellings, and the ATen norms.
#include <cmath>

#include <fmt/format.h>

#include "ir/checked_math.h"
#include "tools/interpreter/ops_common.h"

namespace fxfuse::interp {
namespace {

using namespace ops;

DType mmDType(const Tensor& a, const Tensor& b) { return promoteTypes(a.dtype, b.dtype); }

void need2d(const Tensor& t, const char* op, const char* what) {
  if (t.dim() != 2) fail("{}: {} must be 2-D, got {}", op, what, t.describe());
}

// Zeros for a recorded output (auxiliary outputs of the attention kernels).
RValue recordedAux(Call& c, size_t i, int64_t sym_value) {
  if (i >= c.out_values.size() || !c.out_values[i]) return RValue{};
  const ir::Value* v = c.out_values[i];
  if (v->kind == ir::ValueKind::SymInt) return RValue::ofInt(sym_value);
  if (!v->isTensor()) return RValue{};
  Shape s = c.interp->evalShape(v->type.shape, "auxiliary output");
  return RValue::ofTensor(Tensor::full(s, v->type.dtype == DType::DTYPE_UNSPECIFIED ? DType::F32 : v->type.dtype, 0.0));
}

void sdpaCommon(Call& c, std::optional<Tensor> mask, bool causal, std::optional<double> scale, bool gqa,
                bool want_lse) {
  AttentionArgs a;
  a.q = c.tensor("query", 0);
  a.k = c.tensor("key", 1);
  a.v = c.tensor("value", 2);
  a.mask = mask;
  a.causal = causal;
  a.scale = scale;
  a.gqa = gqa;
  if (double p = c.number("dropout_p", 0.0); p != 0.0)
    c.interp->warn(fmt::format("{}: dropout_p={} ignored (inference semantics)", c.node ? c.node->name : c.target, p));
  AttentionResult r = attention(a);
  DType od = c.outDType(0, a.q.dtype);
  c.out(0, tensorFromValues(c, 0, r.shape, od, r.out));
  for (size_t i = 1; i < c.outs.size(); ++i) {
    int64_t sq = a.q.shape[a.q.dim() - 2], sk = a.k.shape[a.k.dim() - 2];
    RValue aux = recordedAux(c, i, i == 4 ? sq : sk);
    if (i == 1 && want_lse && aux.isTensor()) {
      Shape lse_shape = r.shape;
      lse_shape.pop_back();
      if (aux.t.shape == lse_shape) aux = RValue::ofTensor(tensorFromValues(c, i, lse_shape, aux.t.dtype, r.lse));
    }
    c.out(i, aux);
  }
}

std::optional<double> optScale(const Call& c) {
  const RValue* s = c.find("scale");
  if (!s || s->isNone()) return std::nullopt;
  return s->number();
}


// The operands of a norm over the trailing `ns` dims of x: those dims must be ns, and a weight
// or bias must hold one value per normalized element (else their reads run past them).
void checkNormOperands(const char* op, const Tensor& x, const Shape& ns, const std::optional<Tensor>& w,
                       const std::optional<Tensor>& b) {
  const int64_t nd = static_cast<int64_t>(ns.size());
  if (nd > x.dim()) fail("{}: normalized_shape {} longer than input {}", op, shapeStr(ns), x.describe());
  int64_t count = 1;
  for (int64_t k = 0; k < nd; ++k) {
    if (x.shape[x.dim() - nd + k] != ns[k]) fail("{}: normalized_shape {} does not match {}", op, shapeStr(ns), x.describe());
    count *= ns[k];
  }
  for (const auto* t : {&w, &b})
    if (*t && (*t)->numel() != count)
      fail("{}: {} {} does not hold the {} normalized elements", op, t == &w ? "weight" : "bias", (*t)->describe(), count);
}

// aten.rms_norm / _fused_rms_norm: f32 math, one rounding at the end.
void atenRmsNorm(Call& c, bool fused) {
  Tensor x = c.tensor("input", 0);
  Shape ns = c.ints("normalized_shape", 1);
  std::optional<Tensor> w = c.optTensor("weight", 2);
  int64_t nd = static_cast<int64_t>(ns.size());
  checkNormOperands("rms_norm", x, ns, w, std::nullopt);
  double eps;
  if (c.has("eps", 3)) {
    eps = c.number("eps", 0.0, 3);
  } else {
    eps = x.dtype == DType::BF16 ? 0.0078125 : x.dtype == DType::F16 ? 0.0009765625 : x.dtype == DType::F64 ? 2.220446049250313e-16 : 1.1920928955078125e-07;
  }
  std::vector<int64_t> dims;
  for (int64_t k = x.dim() - nd; k < x.dim(); ++k) dims.push_back(k);
  Rows r = gatherRows(x, dims);
  std::vector<double> wv;
  if (w) wv = w->values();
  std::vector<double> out(r.data.size()), rstd;
  DType od = c.outDType(0, w ? promoteTypes(x.dtype, w->dtype) : x.dtype);
  for (int64_t i = 0; i < r.rows(); ++i) {
    double inv = rmsInv(r.row(i), r.k, eps);
    rstd.push_back(inv);
    for (int64_t j = 0; j < r.k; ++j) {
      double v = roundF32(r.row(i)[j] * inv);
      if (w) v = roundF32(v * wv[j]);
      out[i * r.k + j] = v;
    }
  }
  c.out(0, tensorFromValues(c, 0, x.shape, od, out));
  if (fused && c.outs.size() > 1) {
    Shape rs = keepdimShape(x, dims, true);
    c.out(1, tensorFromValues(c, 1, rs, DType::F32, rstd));
  }
}

void layerNorm(Call& c, bool native) {
  Tensor x = c.tensor("input", 0);
  Shape ns = c.ints("normalized_shape", 1);
  std::optional<Tensor> w = c.optTensor("weight", 2), b = c.optTensor("bias", 3);
  double eps = c.number("eps", 1e-5, 4);
  int64_t nd = static_cast<int64_t>(ns.size());
  checkNormOperands("layer_norm", x, ns, w, b);
  std::vector<int64_t> dims;
  for (int64_t k = x.dim() - nd; k < x.dim(); ++k) dims.push_back(k);
  Rows r = gatherRows(x, dims);
  std::vector<double> wv, bv, out(r.data.size()), means, rstds;
  if (w) wv = w->values();
  if (b) bv = b->values();
  for (int64_t i = 0; i < r.rows(); ++i) {
    const double* p = r.row(i);
    double m = 0, v = 0;
    for (int64_t j = 0; j < r.k; ++j) m += p[j];
    m /= static_cast<double>(r.k);
    for (int64_t j = 0; j < r.k; ++j) v += (p[j] - m) * (p[j] - m);
    v /= static_cast<double>(r.k);
    double rs = 1.0 / std::sqrt(v + eps);
    means.push_back(m);
    rstds.push_back(rs);
    for (int64_t j = 0; j < r.k; ++j) {
      double y = (p[j] - m) * rs;
      if (w) y *= wv[j];
      if (b) y += bv[j];
      out[i * r.k + j] = y;
    }
  }
  c.out(0, tensorFromValues(c, 0, x.shape, c.outDType(0, x.dtype), out));
  if (native) {
    Shape rs = keepdimShape(x, dims, true);
    DType sd = c.outDType(1, DType::F32);
    c.out(1, tensorFromValues(c, 1, rs, sd, means));
    c.out(2, tensorFromValues(c, 2, rs, sd, rstds));
  }
}

// native_group_norm: x [N, C, *] in N x group blocks of C/group channels (each C/group * HxW
// contiguous values), each normalized by its mean and 1/sqrt(var + eps); then weight and bias
// per channel. Outputs: y, mean and rstd of shape [N, group].
void groupNorm(Call& c) {
  Tensor x = c.tensor("input", 0);
  std::optional<Tensor> w = c.optTensor("weight", 1), b = c.optTensor("bias", 2);
  const int64_t n = c.integer("N", 0, 3), ch = c.integer("C", 0, 4), hw = c.integer("HxW", 0, 5);
  const int64_t groups = c.integer("group", 1, 6);
  const double eps = c.number("eps", 1e-5, 7);
  if (groups <= 0 || ch % groups != 0) fail("group_norm: {} channels do not split into {} groups", ch, groups);
  if (x.dim() < 2 || x.shape[0] != n || x.shape[1] != ch || x.numel() != n * ch * hw)
    fail("group_norm: input of shape {} is not N={} x C={} x HxW={}", shapeStr(x.shape), n, ch, hw);
  const std::vector<double> v = contiguous(x).values();
  std::vector<double> wv = w ? w->values() : std::vector<double>{}, bv = b ? b->values() : std::vector<double>{};
  if ((w && static_cast<int64_t>(wv.size()) != ch) || (b && static_cast<int64_t>(bv.size()) != ch))
    fail("group_norm: weight and bias need {} values, one per channel", ch);
  const int64_t block = ch / groups * hw;
  std::vector<double> out(v.size()), means, rstds;
  for (int64_t blk = 0; blk < n * groups; ++blk) {
    const double* p = v.data() + blk * block;
    double m = 0, var = 0;
    for (int64_t j = 0; j < block; ++j) m += p[j];
    m = block ? m / static_cast<double>(block) : 0.0;
    for (int64_t j = 0; j < block; ++j) var += (p[j] - m) * (p[j] - m);
    var = block ? var / static_cast<double>(block) : 0.0;
    const double rs = 1.0 / std::sqrt(var + eps);
    means.push_back(m);
    rstds.push_back(rs);
    for (int64_t j = 0; j < block; ++j) {
      const int64_t channel = (blk % groups) * (ch / groups) + j / std::max<int64_t>(hw, 1);
      double y = (p[j] - m) * rs;
      if (w) y *= wv[static_cast<size_t>(channel)];
      if (b) y += bv[static_cast<size_t>(channel)];
      out[static_cast<size_t>(blk * block + j)] = y;
    }
  }
  c.out(0, tensorFromValues(c, 0, x.shape, c.outDType(0, x.dtype), out));
  c.out(1, tensorFromValues(c, 1, {n, groups}, c.outDType(1, x.dtype), means));
  c.out(2, tensorFromValues(c, 2, {n, groups}, c.outDType(2, x.dtype), rstds));
}

}  // namespace

namespace ops {

// out = round(f32(acc) * f32(sa*sb) (+ bias), out_dtype) for per-tensor and row-wise scales.
std::vector<double> scaledMmValues(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb,
                                   const std::optional<Tensor>& bias, const std::optional<Tensor>& scale_result,
                                   DType od, const char* op) {
  need2d(a, op, "self");
  need2d(b, op, "mat2");
  int64_t m = a.shape[0], n = b.shape[1];
  std::vector<double> acc(static_cast<size_t>(m * n));
  gemm(a, b, acc.data());
  std::vector<double> va = sa.values(), vb = sb.values();
  auto scaleA = [&](int64_t i) {
    if (va.size() == 1) return va[0];
    if (static_cast<int64_t>(va.size()) == m) return va[i];
    fail("{}: scale_a {} is neither per-tensor nor per-row for {} rows", op, sa.describe(), m);
  };
  auto scaleB = [&](int64_t j) {
    if (vb.size() == 1) return vb[0];
    if (static_cast<int64_t>(vb.size()) == n) return vb[j];
    fail("{}: scale_b {} is neither per-tensor nor per-column for {} columns", op, sb.describe(), n);
  };
  std::vector<double> bv;
  if (bias) {
    Tensor be = expand(*bias, {m, n});
    bv = be.values();
  }
  double sr = scale_result ? scale_result->item() : 1.0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = roundF32(scaleA(i) * scaleB(j));
      double v = roundF32(roundF32(acc[i * n + j]) * s);
      if (bias) v = roundF32(v + bv[i * n + j]);
      if (scale_result) v = roundF32(v * sr);
      if (ir::isFp8(od) && !std::isnan(v)) v = std::min(std::max(v, -maxFinite(od)), maxFinite(od));
      acc[i * n + j] = v;
    }
  return acc;
}

// aten._grouped_mm (MoE expert GEMMs): `self` [T, K] rows grouped by `offs` (cumulative end
// row of each group, int32) times `mat2` [G, K, N], one expert matrix per group; rows past the
// last offset are zero. Without offs, 3-D x 3-D is a batched product. Accumulated in f64,
// rounded once to f32 and then to the output dtype (out_dtype, else the inputs').
void groupedMm(Call& c) {
  Tensor a = c.tensor("self", 0), b = c.tensor("mat2", 1);
  std::optional<Tensor> offs = c.optTensor("offs", 2);
  std::optional<Tensor> bias = c.optTensor("bias", 3);
  DType od = c.dtype("out_dtype", 4).value_or(mmDType(a, b));
  if (bias) fail("_grouped_mm: a bias is not supported");
  if (!offs) {
    if (a.dim() != 3 || b.dim() != 3) fail("_grouped_mm without offs needs 3-D operands, got {} and {}", a.describe(), b.describe());
    auto [shape, v] = matmulValues(a, b);
    for (double& x : v) x = roundF32(x);
    c.out(0, tensorFromValues(c, 0, shape, od, v));
    return;
  }
  if (a.dim() != 2 || b.dim() != 3 || offs->dim() != 1 || a.shape[1] != b.shape[1] || offs->shape[0] != b.shape[0])
    fail("_grouped_mm: supported form is self [T, K], mat2 [G, K, N], offs [G]; got {}, {}, {}", a.describe(),
         b.describe(), offs->describe());
  const int64_t rows = a.shape[0], k = a.shape[1], n = b.shape[2];
  std::vector<double> av = contiguous(a).values(), bv = contiguous(b).values(), ov = offs->values();
  Tensor r = c.alloc(0, {rows, n}, od);  // within the interpreter's memory budget, or refused
  std::vector<double> out(static_cast<size_t>(rows * n), 0.0);
  int64_t begin = 0;
  for (int64_t g = 0; g < b.shape[0]; ++g) {
    const double off = ov[static_cast<size_t>(g)];
    if (!(off >= static_cast<double>(begin) && off <= static_cast<double>(rows)))
      fail("_grouped_mm: offs[{}] = {} is not in [{}, {}]", g, off, begin, rows);
    const auto end = static_cast<int64_t>(off);
    const double* w = bv.data() + g * k * n;
    for (int64_t i = begin; i < end; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t q = 0; q < k; ++q) acc += av[static_cast<size_t>(i * k + q)] * w[q * n + j];
        out[static_cast<size_t>(i * n + j)] = roundF32(acc);
      }
    begin = end;
  }
  writeValues(r, out);
  c.out(0, r);
}

// aten.convolution / aten.conv1d, not transposed, any number of spatial dims: input
// [N, C, *spatial] (conv1d also takes an unbatched [C, L]), weight [Cout, C / groups, *kernel].
// Accumulated in f64 per output element, rounded once to f32 then to the output dtype.
void convolutionOp(Call& c, bool aten_convolution) {
  Tensor x = c.tensor("input", 0), w = c.tensor("weight", 1);
  std::optional<Tensor> bias = c.optTensor("bias", 2);
  if (aten_convolution && c.flag("transposed", false, 6)) fail("convolution: transposed convolution is not supported");
  bool unbatched = !aten_convolution && x.dim() == w.dim() - 1;
  if (unbatched) x = unsqueeze(x, 0);
  const int64_t sd = w.dim() - 2;
  if (sd < 1 || x.dim() != w.dim()) fail("convolution: input {} does not fit weight {}", x.describe(), w.describe());
  auto perDim = [&](const char* name, int pos, int64_t def) {
    Shape v = c.has(name, pos) ? c.ints(name, pos) : Shape{def};
    if (v.size() == 1) v.assign(static_cast<size_t>(sd), v[0]);
    if (static_cast<int64_t>(v.size()) != sd) fail("convolution: '{}' has {} values for {} spatial dims", name, v.size(), sd);
    return v;
  };
  Shape stride = perDim("stride", 3, 1), pad = perDim("padding", 4, 0), dil = perDim("dilation", 5, 1);
  int64_t groups = c.integer("groups", 1, aten_convolution ? 8 : 6);
  const int64_t batch = x.shape[0], cin = x.shape[1], cout = w.shape[0];
  if (groups <= 0 || cin % groups != 0 || cout % groups != 0 || w.shape[1] != cin / groups)
    fail("convolution: {} input channels, weight {} and groups={} do not fit", cin, w.describe(), groups);
  Shape out_shape{batch, cout};
  for (int64_t d = 0; d < sd; ++d) {
    size_t i = static_cast<size_t>(d);
    if (stride[i] <= 0 || dil[i] <= 0 || pad[i] < 0) fail("convolution: stride, dilation must be positive, padding not negative");
    const std::optional<int64_t> span = ir::checkedConvSpan(x.shape[i + 2], w.shape[i + 2], pad[i], dil[i]);
    if (!span) fail("convolution: padding {} or dilation {} does not fit int64 sizes", pad[i], dil[i]);
    const int64_t len = *span;
    if (len < 0) fail("convolution: kernel larger than the padded input {}", x.describe());
    out_shape.push_back(len / stride[i] + 1);
  }
  Shape result_shape = out_shape;
  if (unbatched) result_shape.erase(result_shape.begin());
  // Within the interpreter's memory budget, or refused (also when the size overflows).
  Tensor result = c.alloc(0, result_shape, promoteTypes(x.dtype, w.dtype));
  std::vector<double> xv = contiguous(x).values(), wv = contiguous(w).values();
  std::vector<double> bv = bias ? contiguous(*bias).values() : std::vector<double>();
  Shape out_strides = contiguousStrides(out_shape);
  Shape x_strides = contiguousStrides(x.shape), w_strides = contiguousStrides(w.shape);
  const int64_t total = result.numel();
  int64_t kernel = 1;
  for (int64_t d = 0; d < sd; ++d) kernel *= w.shape[static_cast<size_t>(d + 2)];
  const int64_t cg = cin / groups, og = cout / groups;
  std::vector<double> out(static_cast<size_t>(total));
  for (int64_t o = 0; o < total; ++o) {
    int64_t rem = o, nb = rem / out_strides[0];
    rem %= out_strides[0];
    int64_t oc = rem / out_strides[1];
    rem %= out_strides[1];
    double acc = bias ? bv[static_cast<size_t>(oc)] : 0.0;
    int64_t g = oc / og;
    for (int64_t ic = 0; ic < cg; ++ic)
      for (int64_t kk = 0; kk < kernel; ++kk) {
        int64_t xoff = nb * x_strides[0] + (g * cg + ic) * x_strides[1], kr = kk, orem = rem;
        bool inside = true;
        for (int64_t d = 0; d < sd && inside; ++d) {
          size_t i = static_cast<size_t>(d);
          int64_t kstride = w_strides[i + 2], kpos = kr / kstride, opos = orem / out_strides[i + 2];
          kr %= kstride;
          orem %= out_strides[i + 2];
          int64_t pos = opos * stride[i] - pad[i] + kpos * dil[i];
          inside = pos >= 0 && pos < x.shape[i + 2];
          xoff += pos * x_strides[i + 2];
        }
        if (inside) acc += xv[static_cast<size_t>(xoff)] * wv[static_cast<size_t>(oc * w_strides[0] + ic * w_strides[1] + kk)];
      }
    out[static_cast<size_t>(o)] = roundF32(acc);
  }
  writeValues(result, out);
  c.out(0, result);
}

}  // namespace ops

void registerLinalgOps(OpTable& t) {
  t.add("aten._grouped_mm", groupedMm);
  t.add("aten.convolution", [](Call& c) { convolutionOp(c, true); });
  t.add("aten.conv1d", [](Call& c) { convolutionOp(c, false); });
  t.add("aten.mm", [](Call& c) {
    Tensor a = c.tensor("self", 0), b = c.tensor("mat2", 1);
    need2d(a, "mm", "self");
    need2d(b, "mm", "mat2");
    if (a.shape[1] != b.shape[0]) fail("mm: {} and {} cannot be multiplied", a.describe(), b.describe());
    std::vector<double> v(static_cast<size_t>(a.shape[0] * b.shape[1]));
    gemm(a, b, v.data());
    c.out(0, tensorFromValues(c, 0, {a.shape[0], b.shape[1]}, mmDType(a, b), v));
  });
  t.add("aten.addmm", [](Call& c) {
    Tensor bias = c.tensor("self", 0), a = c.tensor("mat1", 1), b = c.tensor("mat2", 2);
    double beta = c.number("beta", 1.0), alpha = c.number("alpha", 1.0);
    need2d(a, "addmm", "mat1");
    need2d(b, "addmm", "mat2");
    if (a.shape[1] != b.shape[0]) fail("addmm: {} and {} cannot be multiplied", a.describe(), b.describe());
    int64_t m = a.shape[0], n = b.shape[1];
    std::vector<double> v(static_cast<size_t>(m * n));
    gemm(a, b, v.data());
    std::vector<double> bv = expand(bias, {m, n}).values();
    for (size_t i = 0; i < v.size(); ++i) v[i] = roundF32(alpha * v[i] + (beta == 0 ? 0.0 : beta * bv[i]));
    c.out(0, tensorFromValues(c, 0, {m, n}, mmDType(a, b), v));
  });
  t.add("aten.bmm", [](Call& c) {
    Tensor a = c.tensor("self", 0), b = c.tensor("mat2", 1);
    if (a.dim() != 3 || b.dim() != 3 || a.shape[0] != b.shape[0] || a.shape[2] != b.shape[1])
      fail("bmm: {} and {} cannot be multiplied", a.describe(), b.describe());
    auto [shape, v] = matmulValues(a, b);
    c.out(0, tensorFromValues(c, 0, shape, mmDType(a, b), v));
  });
  t.add("aten.baddbmm", [](Call& c) {
    Tensor bias = c.tensor("self", 0), a = c.tensor("batch1", 1), b = c.tensor("batch2", 2);
    double beta = c.number("beta", 1.0), alpha = c.number("alpha", 1.0);
    auto [shape, v] = matmulValues(a, b);
    std::vector<double> bv = expand(bias, shape).values();
    for (size_t i = 0; i < v.size(); ++i) v[i] = roundF32(alpha * v[i] + (beta == 0 ? 0.0 : beta * bv[i]));
    c.out(0, tensorFromValues(c, 0, shape, mmDType(a, b), v));
  });
  t.add("aten.matmul", [](Call& c) {
    Tensor a = c.tensor("self", 0), b = c.tensor("other", 1);
    auto [shape, v] = matmulValues(a, b);
    c.out(0, tensorFromValues(c, 0, shape, mmDType(a, b), v));
  });
  t.add("aten.dot", [](Call& c) {  // torch names its second vector "tensor"
    Tensor a = c.tensor("self", 0), b = c.tensor("tensor", 1);
    auto [shape, v] = matmulValues(a, b);
    c.out(0, tensorFromValues(c, 0, shape, mmDType(a, b), v));
  });
  t.add("aten.mv", [](Call& c) {
    Tensor a = c.tensor("self", 0), b = c.tensor("vec", 1);
    auto [shape, v] = matmulValues(a, b);
    c.out(0, tensorFromValues(c, 0, shape, mmDType(a, b), v));
  });
  t.add("aten.linear", [](Call& c) {
    Tensor x = c.tensor("input", 0), w = c.tensor("weight", 1);
    std::optional<Tensor> bias = c.optTensor("bias", 2);
    Tensor wt = w.dim() == 2 ? transpose(w, 0, 1) : w;
    auto [shape, v] = matmulValues(x, wt);
    if (bias) {
      std::vector<double> bv = expand(*bias, shape).values();
      for (size_t i = 0; i < v.size(); ++i) v[i] = roundF32(v[i] + bv[i]);
    }
    c.out(0, tensorFromValues(c, 0, shape, mmDType(x, w), v));
  });
  t.add("aten._scaled_mm", [](Call& c) {
    Tensor a = c.tensor("self", 0), b = c.tensor("mat2", 1);
    DType od = c.dtype("out_dtype").value_or(a.dtype);
    need2d(a, "_scaled_mm", "self");
    need2d(b, "_scaled_mm", "mat2");
    std::vector<double> v = scaledMmValues(a, b, c.tensor("scale_a", 2), c.tensor("scale_b", 3), c.optTensor("bias", 4),
                                           c.optTensor("scale_result", 5), od, "_scaled_mm");
    c.out(0, tensorFromValues(c, 0, {a.shape[0], b.shape[1]}, od, v));
  });
  // Attention.
  t.add("aten.scaled_dot_product_attention", [](Call& c) {
    sdpaCommon(c, c.optTensor("attn_mask", 3), c.flag("is_causal", false, 5), optScale(c), c.flag("enable_gqa", false),
               false);
  });
  t.add("aten._scaled_dot_product_flash_attention", [](Call& c) {
    sdpaCommon(c, std::nullopt, c.flag("is_causal", false, 4), optScale(c), false, true);
  });
  t.add("aten._scaled_dot_product_flash_attention_for_cpu", [](Call& c) {
    sdpaCommon(c, c.optTensor("attn_mask"), c.flag("is_causal", false, 4), optScale(c), false, true);
  });
  t.add("aten._scaled_dot_product_efficient_attention", [](Call& c) {
    sdpaCommon(c, c.optTensor("attn_bias", 3), c.flag("is_causal", false, 6), optScale(c), false, true);
  });
  t.add("aten._scaled_dot_product_cudnn_attention", [](Call& c) {
    sdpaCommon(c, c.optTensor("attn_bias", 3), c.flag("is_causal", false, 6), optScale(c), false, true);
  });
  t.add("aten.rms_norm", [](Call& c) { atenRmsNorm(c, false); });
  t.add("aten._fused_rms_norm", [](Call& c) { atenRmsNorm(c, true); });
  t.add("aten.layer_norm", [](Call& c) { layerNorm(c, false); });
  t.add("aten.native_layer_norm", [](Call& c) { layerNorm(c, true); });
  t.add("aten.native_group_norm", groupNorm);
}

}  // namespace fxfuse::interp
