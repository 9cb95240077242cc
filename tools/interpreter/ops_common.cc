#include "tools/interpreter/ops_common.h"

#include <algorithm>
#include <cblas.h>

namespace fxfuse::interp::ops {

Operand operand(const RValue& r, const char* what) {
  Operand o;
  if (r.isTensor()) {
    o.t = &r.t;
  } else if (r.isNumber()) {
    o.v = r.number();
  } else {
    fail("{} must be a tensor or a number, got {}", what, r.describe());
  }
  return o;
}

Shape broadcastOperands(const Operand* ops, size_t n) {
  Shape s;
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    if (!ops[i].t) continue;
    s = any ? broadcastShapes(s, ops[i].t->shape) : ops[i].t->shape;
    any = true;
  }
  return s;
}

std::vector<int64_t> reductionDims(const Tensor& x, const std::optional<Shape>& dims) {
  std::vector<int64_t> out;
  if (!dims || dims->empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : *dims) {
    int64_t nd = normDim(d, x.dim());
    if (x.dim() == 0) continue;
    if (std::find(out.begin(), out.end(), nd) == out.end()) out.push_back(nd);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Shape keepdimShape(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  Shape s;
  for (int64_t d = 0; d < x.dim(); ++d) {
    bool red = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!red) {
      s.push_back(x.shape[d]);
    } else if (keepdim) {
      s.push_back(1);
    }
  }
  return s;
}

Rows gatherRows(const Tensor& x, const std::vector<int64_t>& dims) {
  Rows r;
  Shape perm;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) {
      perm.push_back(d);
      r.outer_shape.push_back(x.shape[d]);
    }
  r.k = 1;
  for (int64_t d : dims) {
    perm.push_back(d);
    r.k *= x.shape[d];
  }
  Tensor p = x.dim() > 0 ? permute(x, perm) : x;
  r.data = p.values();
  return r;
}

// ------------------------------------------------------------------ integer elements

int64_t asI64(double v) {
  if (auto i = truncatedInt64(v)) return *i;
  fail("integer value {} is outside int64", v);
}

int64_t wrapIndex(double v, int64_t size, const char* what) {
  if (std::isnan(v)) fail("{}: index is NaN (uninitialized memory?)", what);
  const auto bound = static_cast<double>(size);  // exact for every tensor size
  if (!(v >= -bound && v < bound)) fail("{}: index {} is out of bounds for size {}", what, v, size);
  const auto i = static_cast<int64_t>(v);
  return i < 0 ? i + size : i;
}

// ------------------------------------------------------------------ BLAS

namespace {

// Pointer, transpose flag and leading dimension of a 2-D strided matrix for cblas (row
// major), or false when the layout needs a copy.
bool blasLayout(const Tensor& t, const double*& p, CBLAS_TRANSPOSE& tr, int& ld) {
  int64_t r = t.shape[0], c = t.shape[1];
  int64_t s0 = t.strides[0], s1 = t.strides[1];
  p = t.base() + t.offset;
  // Row-major: (i, j) at p[i * ld + j].
  if (s1 == 1 || c == 1) {
    int64_t l = r == 1 ? std::max<int64_t>(1, c) : s0;
    if (l >= std::max<int64_t>(1, c)) {
      tr = CblasNoTrans;
      ld = static_cast<int>(l);
      return true;
    }
  }
  // Column-major (a transposed row-major matrix): (i, j) at p[j * ld + i].
  if (s0 == 1 || r == 1) {
    int64_t l = c == 1 ? std::max<int64_t>(1, r) : s1;
    if (l >= std::max<int64_t>(1, r)) {
      tr = CblasTrans;
      ld = static_cast<int>(l);
      return true;
    }
  }
  return false;
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, double* c) {
  int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  if (b.shape[0] != k) fail("cannot multiply {} by {}", a.describe(), b.describe());
  if (m == 0 || n == 0) return;
  if (k == 0) {
    std::fill(c, c + m * n, 0.0);
    return;
  }
  Tensor ac = a, bc = b;
  const double *pa, *pb;
  CBLAS_TRANSPOSE ta, tb;
  int lda, ldb;
  if (!blasLayout(ac, pa, ta, lda)) {
    ac = cast(a, a.dtype);
    blasLayout(ac, pa, ta, lda);
  }
  if (!blasLayout(bc, pb, tb, ldb)) {
    bc = cast(b, b.dtype);
    blasLayout(bc, pb, tb, ldb);
  }
  cblas_dgemm(CblasRowMajor, ta, tb, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0, pa, lda, pb,
              ldb, 0.0, c, static_cast<int>(n));
}

std::pair<Shape, std::vector<double>> matmulValues(const Tensor& a0, const Tensor& b0) {
  if (a0.dim() == 0 || b0.dim() == 0) fail("matmul: both arguments need at least 1 dim ({} and {})", a0.describe(), b0.describe());
  Tensor a = a0, b = b0;
  bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  if (a1) a = unsqueeze(a, 0);
  if (b1) b = unsqueeze(b, 1);
  int64_t m = a.shape[a.dim() - 2], k = a.shape[a.dim() - 1];
  int64_t k2 = b.shape[b.dim() - 2], n = b.shape[b.dim() - 1];
  if (k != k2) fail("matmul: shapes {} and {} cannot be multiplied", shapeStr(a0.shape), shapeStr(b0.shape));
  Shape ba(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  Shape batch = broadcastShapes(ba, bb);
  Shape ea = batch, eb = batch;
  ea.push_back(m);
  ea.push_back(k);
  eb.push_back(k);
  eb.push_back(n);
  Tensor ax = expand(a, ea), bx = expand(b, eb);
  int64_t nb = 1;
  for (int64_t s : batch) nb *= s;
  std::vector<double> out(static_cast<size_t>(nb * m * n));
  // Iterate over batch indices.
  Shape idx(batch.size(), 0);
  for (int64_t i = 0; i < nb; ++i) {
    Tensor am = ax, bm = bx;
    for (size_t d = 0; d < batch.size(); ++d) {
      am = select(am, 0, idx[d]);
      bm = select(bm, 0, idx[d]);
    }
    gemm(am, bm, out.data() + i * m * n);
    for (size_t d = batch.size(); d-- > 0;) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  Shape rs = batch;
  if (!a1) rs.push_back(m);
  if (!b1) rs.push_back(n);
  return {rs, std::move(out)};
}

// ------------------------------------------------------------------ attention

AttentionResult attention(const AttentionArgs& a) {
  const Tensor &q = a.q, &k = a.k, &v = a.v;
  if (q.dim() < 2 || k.dim() != q.dim() || v.dim() != q.dim())
    fail("attention: query {} key {} value {} must have the same rank >= 2", q.describe(), k.describe(), v.describe());
  // Flatten leading dims: [..., H, S, E]; treat as [B, H, S, E] with B = product of the rest.
  auto dims4 = [](const Tensor& t) {
    Shape s = t.shape;
    while (s.size() < 4) s.insert(s.begin(), 1);
    if (s.size() > 4) {
      int64_t b = 1;
      for (size_t i = 0; i + 3 < s.size(); ++i) b *= s[i];
      s = {b, s[s.size() - 3], s[s.size() - 2], s[s.size() - 1]};
    }
    return s;
  };
  Tensor q4 = reshape(q, dims4(q)), k4 = reshape(k, dims4(k)), v4 = reshape(v, dims4(v));
  int64_t B = q4.shape[0], Hq = q4.shape[1], Sq = q4.shape[2], E = q4.shape[3];
  int64_t Bk = k4.shape[0], Hk = k4.shape[1], Sk = k4.shape[2];
  int64_t Ev = v4.shape[3];
  if (k4.shape[3] != E) fail("attention: query head dim {} != key head dim {}", E, k4.shape[3]);
  if (v4.shape[2] != Sk || v4.shape[1] != Hk) fail("attention: key {} and value {} disagree", k.describe(), v.describe());
  if (Bk != B && Bk != 1) fail("attention: batch of query {} and key {} differ", q.describe(), k.describe());
  if (Hk != Hq && (!a.gqa || Hk == 0 || Hq % Hk != 0))
    fail("attention: {} query heads and {} key/value heads{}", Hq, Hk, a.gqa ? " (not a multiple)" : " (enable_gqa not set)");
  double scale = a.scale ? *a.scale : 1.0 / std::sqrt(static_cast<double>(E));
  std::optional<Tensor> mask;
  if (a.mask) {
    Shape full = q.shape;
    full.back() = Sk;
    Shape ms4 = {B, Hq, Sq, Sk};
    Tensor m = *a.mask;
    // Broadcast the mask to q's leading dims, then view as 4-D.
    Tensor me = expand(m, full);
    mask = reshape(cast(me, me.dtype), ms4);
  }
  int64_t group = Hq / Hk;
  AttentionResult r;
  r.shape = q.shape;
  r.shape.back() = Ev;
  r.out.assign(static_cast<size_t>(B * Hq * Sq * Ev), 0.0);
  r.lse.assign(static_cast<size_t>(B * Hq * Sq), 0.0);
  std::vector<double> s(static_cast<size_t>(Sq * Sk));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      Tensor qm = select(select(q4, 0, b), 0, h);                       // [Sq, E]
      Tensor km = select(select(k4, 0, Bk == 1 ? 0 : b), 0, h / group);  // [Sk, E]
      Tensor vm = select(select(v4, 0, Bk == 1 ? 0 : b), 0, h / group);  // [Sk, Ev]
      gemm(qm, transpose(km, 0, 1), s.data());
      for (int64_t i = 0; i < Sq; ++i) {
        double* row = s.data() + i * Sk;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Sk; ++j) {
          double x = row[j] * scale;
          if (a.causal && j > i) x = -std::numeric_limits<double>::infinity();
          if (mask) {
            double mv = mask->get({b, h, i, j});
            if (mask->dtype == DType::BOOL) {
              if (mv == 0) x = -std::numeric_limits<double>::infinity();
            } else {
              x += mv;
            }
          }
          row[j] = x;
          mx = std::max(mx, x);
        }
        double sum = 0;
        for (int64_t j = 0; j < Sk; ++j) {
          row[j] = std::isinf(mx) && mx < 0 ? kNaN : std::exp(row[j] - mx);
          sum += row[j];
        }
        for (int64_t j = 0; j < Sk; ++j) row[j] /= sum;
        r.lse[static_cast<size_t>((b * Hq + h) * Sq + i)] = mx + std::log(sum);
      }
      Tensor p = Tensor::empty({Sq, Sk}, DType::F64, 0.0);
      std::copy(s.begin(), s.end(), p.storage->begin());
      gemm(p, vm, r.out.data() + (b * Hq + h) * Sq * Ev);
    }
  }
  return r;
}

AttentionResult attentionVllm(const Tensor& q0, const Tensor& k0, const Tensor& v0, std::optional<double> scale,
                              int64_t num_heads_hint) {
  auto heads3 = [&](const Tensor& t, int64_t heads, const char* what) {
    if (t.dim() == 3) return t;
    if (t.dim() == 2) {
      if (heads <= 0 || t.shape[1] % heads != 0)
        fail("vLLM attention: {} {} is 2-D and the head count is unknown", what, t.describe());
      return reshape(t, {t.shape[0], heads, t.shape[1] / heads});
    }
    fail("vLLM attention: {} must be [T, H, E] or [T, H*E], got {}", what, t.describe());
  };
  Tensor q = heads3(q0, num_heads_hint, "query");
  int64_t E = q.shape[2];
  if (E <= 0) fail("vLLM attention: query {} has no head dimension", q.describe());
  // A 2-D key/value [T, Hkv*E] has as many heads as E divides into; anything but 2-D or 3-D is refused
  // by heads3 before its shape is read.
  auto kvHeads = [&](const Tensor& t) -> int64_t {
    if (t.dim() == 2) return t.shape[1] / E;
    return t.dim() == 3 ? t.shape[1] : 0;
  };
  Tensor k = heads3(k0, kvHeads(k0), "key");
  Tensor v = heads3(v0, kvHeads(v0), "value");
  AttentionArgs a;
  a.q = unsqueeze(transpose(q, 0, 1), 0);  // [1, Hq, T, E]
  a.k = unsqueeze(transpose(k, 0, 1), 0);
  a.v = unsqueeze(transpose(v, 0, 1), 0);
  a.causal = true;
  a.scale = scale;
  a.gqa = true;
  AttentionResult r = attention(a);
  // [1, Hq, T, Ev] -> [T, Hq, Ev]
  int64_t Hq = q.shape[1], T = q.shape[0], Ev = v.shape[2];
  std::vector<double> o(r.out.size());
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < Ev; ++e) o[(t * Hq + h) * Ev + e] = r.out[(h * T + t) * Ev + e];
  r.out = std::move(o);
  r.shape = {T, Hq, Ev};
  return r;
}

// ------------------------------------------------------------------ reference math

double rmsInv(const double* x, int64_t h, double eps) {
  double sum = 0;
  for (int64_t j = 0; j < h; ++j) sum += roundF32(x[j] * x[j]);
  double mean = roundF32(sum / static_cast<double>(h));
  double t = roundF32(mean + roundF32(eps));
  return roundF32(1.0 / std::sqrt(t));
}

void rmsNormRows(const Rows& x, const std::optional<Tensor>& weight, double eps, DType norm_dtype, DType out_dtype,
                 std::vector<double>& out) {
  int64_t h = x.k;
  std::vector<double> w;
  if (weight) {
    if (weight->numel() != h) fail("weight {} does not match the normalized size {}", weight->describe(), h);
    w = weight->values();
  }
  out.resize(x.data.size());
  for (int64_t r = 0; r < x.rows(); ++r) {
    const double* row = x.row(r);
    double inv = rmsInv(row, h, eps);
    double* o = out.data() + r * h;
    for (int64_t j = 0; j < h; ++j) {
      double n = roundTo(roundF32(row[j] * inv), norm_dtype);
      o[j] = weight ? roundTo(roundF32(n * w[j]), out_dtype) : roundTo(n, out_dtype);
    }
  }
}

void rmsNormRowsSingleRounding(const Rows& x, const std::optional<Tensor>& weight, double eps, DType out_dtype,
                               std::vector<double>& out) {
  int64_t h = x.k;
  std::vector<double> w;
  if (weight) w = weight->values();
  out.resize(x.data.size());
  for (int64_t r = 0; r < x.rows(); ++r) {
    const double* row = x.row(r);
    double inv = rmsInv(row, h, eps);
    double* o = out.data() + r * h;
    for (int64_t j = 0; j < h; ++j) {
      double n = roundF32(row[j] * inv);
      o[j] = roundTo(weight ? roundF32(n * w[j]) : n, out_dtype);
    }
  }
}

double quantOneRecip(double x, double inv_s, DType fp8) {
  double y = roundF32(x * inv_s);
  double m = maxFinite(fp8);
  if (!std::isnan(y)) y = std::min(std::max(y, -m), m);
  return roundTo(y, fp8);
}

double quantOne(double x, double s, bool divide, DType fp8) {
  if (!divide) return quantOneRecip(x, roundF32(1.0 / s), fp8);
  double y = roundF32(x / s);
  double m = maxFinite(fp8);
  if (!std::isnan(y)) y = std::min(std::max(y, -m), m);
  return roundTo(y, fp8);
}

double dynamicScale(double absmax, double fp8_max, double min_abs, double min_scale, bool ue8m0) {
  double a = absmax;
  if (min_abs > 0 && !(a >= roundF32(min_abs))) a = std::isnan(a) ? a : roundF32(min_abs);
  double s = roundF32(a / roundF32(fp8_max));
  if (ue8m0 && s > 0 && std::isfinite(s)) s = roundF32(std::exp2(std::ceil(std::log2(s))));
  double ms = roundF32(min_scale);
  if (!std::isnan(s) && s < ms) s = ms;
  return s;
}

QuantResult quantize(const std::vector<double>& values, const Shape& shape, const QuantSpec& spec) {
  QuantResult r;
  r.q.resize(values.size());
  int64_t h = shape.empty() ? 1 : shape.back();
  int64_t rows = h == 0 ? 0 : static_cast<int64_t>(values.size()) / h;
  double fmax = spec.fp8_max > 0 ? spec.fp8_max : maxFinite(spec.fp8);
  auto absmaxOf = [&](const double* p, int64_t n) {
    double a = 0;
    bool nan = false;
    for (int64_t j = 0; j < n; ++j) {
      if (std::isnan(p[j])) nan = true;
      a = std::max(a, std::fabs(p[j]));
    }
    return nan ? kNaN : a;
  };
  const double clampv = roundF32(fmax);
  auto apply = [&](const double* in, double* out, int64_t n, double s) {
    double inv = roundF32(1.0 / s);
    for (int64_t j = 0; j < n; ++j) {
      double y = spec.divide ? roundF32(in[j] / s) : roundF32(in[j] * inv);
      if (!std::isnan(y)) y = std::min(std::max(y, -clampv), clampv);
      out[j] = roundTo(y, spec.fp8);
    }
  };
  auto ub = [&](double a) {
    if (spec.scale_ub && !std::isnan(a)) a = std::min(a, roundF32(*spec.scale_ub));
    return a;
  };
  if (spec.kind == "static_tensor") {
    if (!spec.static_scale) fail("static quant needs a scale");
    apply(values.data(), r.q.data(), static_cast<int64_t>(values.size()), *spec.static_scale);
    return r;
  }
  if (spec.kind == "dynamic_tensor") {
    double a = ub(absmaxOf(values.data(), static_cast<int64_t>(values.size())));
    double s = dynamicScale(a, fmax, spec.min_abs, spec.min_scale, spec.ue8m0);
    apply(values.data(), r.q.data(), static_cast<int64_t>(values.size()), s);
    r.scales = {s};
    r.scale_shape = {1};
    return r;
  }
  if (spec.kind == "dynamic_token") {
    for (int64_t i = 0; i < rows; ++i) {
      double a = ub(absmaxOf(values.data() + i * h, h));
      double s = dynamicScale(a, fmax, spec.min_abs, spec.min_scale, spec.ue8m0);
      apply(values.data() + i * h, r.q.data() + i * h, h, s);
      r.scales.push_back(s);
    }
    r.scale_shape = shape;
    if (r.scale_shape.empty()) r.scale_shape = {1};
    r.scale_shape.back() = 1;
    return r;
  }
  if (spec.kind == "dynamic_group") {
    int64_t g = spec.group_size;
    if (g <= 0 || h % g != 0) fail("group size {} does not divide the last dim {}", g, h);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < h; j += g) {
        double a = ub(absmaxOf(values.data() + i * h + j, g));
        double s = dynamicScale(a, fmax, spec.min_abs, spec.min_scale, spec.ue8m0);
        apply(values.data() + i * h + j, r.q.data() + i * h + j, g, s);
        r.scales.push_back(s);
      }
    r.scale_shape = shape;
    r.scale_shape.back() = h / g;
    return r;
  }
  fail("unknown quant kind '{}'", spec.kind);
}

double siluF32(double g) {
  double e = roundF32(std::exp(-g));
  double d = roundF32(1.0 + e);
  return roundF32(g / d);
}

void writeValues(const Tensor& out, const std::vector<double>& values) {
  if (static_cast<int64_t>(values.size()) != out.numel())
    fail("internal: {} values for {}", values.size(), out.describe());
  size_t i = 0;
  double* b = out.base();
  DType dt = out.dtype;
  stridedLoop<1>(out.shape, {&out.strides}, {out.offset}, [&](const std::array<int64_t, 1>& o) {
    b[o[0]] = roundTo(values[i++], dt);
  });
}

Tensor tensorFromValues(Call& c, size_t out_index, const Shape& shape, DType dtype, const std::vector<double>& values) {
  Tensor t = c.alloc(out_index, shape, dtype);
  writeValues(t, values);
  return t;
}

std::vector<double> valuesF32(const Tensor& t) {
  std::vector<double> v = t.values();
  if (t.dtype == DType::F64)
    for (double& x : v) x = roundF32(x);
  return v;
}

Tensor allReduceSim(const Tensor& x, int world_size) {
  if (world_size < 1) fail("world size must be >= 1, got {}", world_size);
  Tensor out = Tensor::empty(x.shape, x.dtype, kNaN);
  std::vector<double> v = x.values();
  DType acc = x.dtype == DType::F64 ? DType::F64 : DType::F32;
  for (double& e : v) {
    double s = roundTo(e, acc);
    double sum = s;
    for (int r = 1; r < world_size; ++r) sum = roundTo(sum + s, acc);
    e = sum;
  }
  writeValues(out, v);
  return out;
}

}  // namespace fxfuse::interp::ops
