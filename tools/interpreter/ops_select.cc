// Ordering and scattering ops: topk, sort, Inductor's prepare_softmax_online, scatter
// (src/value, optional reduce), scatter_add, index_add, and aten.pad. The ordering rule of
// topk/sort is the generated kernels' (compiler/lowering/codegen.cc): NaN is the largest
// value and ties keep index order (a stable sort).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "tools/interpreter/ops_common.h"

namespace fxfuse::interp {
namespace {

using namespace ops;

// Whether a (at index ia) comes before b (at index ib) in the requested order.
bool orderedBefore(double a, int64_t ia, double b, int64_t ib, bool largest) {
  bool an = std::isnan(a), bn = std::isnan(b);
  if (an || bn) {
    if (an && bn) return ia < ib;
    return largest ? an : bn;
  }
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}

// The first `k` elements of every row along `dim` in order: values and indices.
void orderAlongDim(Call& c, const Tensor& x, int64_t dim, int64_t k, bool largest) {
  if (x.dim() == 0) {
    c.out(0, tensorFromValues(c, 0, {}, x.dtype, x.values()));
    if (c.numOutputs() > 1) c.out(1, tensorFromValues(c, 1, {}, DType::I64, {0.0}));
    return;
  }
  dim = normDim(dim, x.dim());
  int64_t n = x.shape[dim];
  if (k < 0 || k > n) fail("topk: k = {} is out of range for a dimension of size {}", k, n);
  Rows r = gatherRows(x, {dim});
  Shape shape = x.shape;
  shape[dim] = k;
  // Rows come out with `dim` last; results are written back through a permuted view.
  Shape perm;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != dim) perm.push_back(d);
  perm.push_back(dim);
  std::vector<double> vals, idxs;
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < r.rows(); ++i) {
    const double* p = r.row(i);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return orderedBefore(p[a], a, p[b], b, largest); });
    for (int64_t j = 0; j < k; ++j) {
      vals.push_back(p[order[static_cast<size_t>(j)]]);
      idxs.push_back(static_cast<double>(order[static_cast<size_t>(j)]));
    }
  }
  auto write = [&](size_t q, DType dt, const std::vector<double>& v) {
    Tensor out = c.alloc(q, shape, dt);
    Tensor ov = permute(out, perm);
    size_t at = 0;
    double* ob = ov.base();
    stridedLoop<1>(ov.shape, {&ov.strides}, {ov.offset},
                   [&](const std::array<int64_t, 1>& o) { ob[o[0]] = roundTo(v[at++], dt); });
    c.out(q, out);
  };
  write(0, x.dtype, vals);
  if (c.numOutputs() > 1) write(1, DType::I64, idxs);
}

// Multi-index iteration over `shape` in row-major order.
template <typename F>
void eachIndex(const Shape& shape, F&& f) {
  for (int64_t s : shape)
    if (s == 0) return;
  Shape idx(shape.size(), 0);
  while (true) {
    f(idx);
    int d = static_cast<int>(shape.size()) - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
    if (d < 0) break;
  }
}

// scatter / scatter_add: out = self; out[idx with idx[dim] = index[idx]] (op)= src[idx] for
// every position of `index`. Values accumulate in f64 and are rounded once.
void scatterImpl(Call& c, bool add) {
  Tensor x = c.tensor("self", 0);
  int64_t dim = normDim(c.integer("dim", 0, 1), x.dim());
  Tensor index = c.tensor("index", 2);
  const RValue* srcv = c.find("src", 3);
  if (!srcv) srcv = c.find("value", 3);
  if (!srcv) fail("scatter: missing src/value");
  std::string reduce = c.str("reduce", "", 4);
  if (!reduce.empty() && reduce != "add" && reduce != "sum" && reduce != "multiply" && reduce != "prod")
    fail("scatter: reduce '{}' is not supported", reduce);
  if (index.dim() != x.dim() && x.dim() > 0)
    fail("scatter: index {} and self {} differ in rank", index.describe(), x.describe());
  std::vector<double> out = x.values();
  Shape xs = contiguousStrides(x.shape);
  std::optional<Tensor> src;
  double value = 0;
  if (srcv->isTensor()) src = srcv->t;
  else value = c.number(c.find("src", 3) ? "src" : "value", 0.0, 3);
  // torch's bounds: index no larger than src in any dim, nor than self outside `dim`
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (src && (src->dim() != index.dim() || index.shape[d] > src->shape[d]))
      fail("scatter: index {} is larger than src {}", index.describe(), src->describe());
    if (x.dim() > 0 && d != dim && index.shape[d] > x.shape[d])
      fail("scatter: index {} is larger than self {} outside dim {}", index.describe(), x.describe(), dim);
  }
  bool mul = reduce == "multiply" || reduce == "prod";
  add = add || reduce == "add" || reduce == "sum";
  eachIndex(index.shape, [&](const Shape& ix) {
    Shape dst = ix;
    if (x.dim() > 0) dst[dim] = wrapIndex(index.get(ix), x.shape[dim], "scatter");
    int64_t o = 0;
    for (size_t k = 0; k < dst.size(); ++k) o += dst[k] * xs[k];
    double v = src ? src->get(ix) : value;
    double& t = out[static_cast<size_t>(o)];
    t = add ? t + v : mul ? t * v : v;
  });
  c.out(0, tensorFromValues(c, 0, x.shape, x.dtype, out));
}

}  // namespace

void registerSelectOps(OpTable& t) {
  t.add("aten.topk", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    orderAlongDim(c, x, c.integer("dim", -1, 2), c.integer("k", 1, 1), c.flag("largest", true, 3));
  });
  t.add("aten.sort", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    // sort(self, dim, descending) and sort.stable(self, *, stable, dim, descending)
    int64_t dim = c.integer("dim", -1, c.has("stable") ? -1 : 1);
    bool desc = c.flag("descending", false, c.has("stable") ? -1 : 2);
    orderAlongDim(c, x, dim, x.dim() == 0 ? 1 : x.shape[normDim(dim, x.dim())], desc);
  });
  // (amax(x, dim, keepdim), sum(exp(x - amax), dim, keepdim)) in f64, rounded once each.
  t.add("prims.prepare_softmax_online", [](Call& c) {
    Tensor x = c.tensor("a", 0);
    int64_t dim = x.dim() > 0 ? normDim(c.integer("dim", 0, 1), x.dim()) : 0;
    std::vector<int64_t> dims = x.dim() > 0 ? std::vector<int64_t>{dim} : std::vector<int64_t>{};
    Rows r = gatherRows(x, dims);
    Shape shape = keepdimShape(x, dims, true);
    std::vector<double> mx, sum;
    for (int64_t i = 0; i < r.rows(); ++i) {
      const double* p = r.row(i);
      double m = -INFINITY;
      for (int64_t j = 0; j < r.k; ++j) m = std::isnan(p[j]) || std::isnan(m) ? NAN : std::max(m, p[j]);
      double s = 0;
      for (int64_t j = 0; j < r.k; ++j) s += std::exp(p[j] - m);
      mx.push_back(m);
      sum.push_back(s);
    }
    c.out(0, tensorFromValues(c, 0, shape, c.outDType(0, x.dtype), mx));
    c.out(1, tensorFromValues(c, 1, shape, c.outDType(1, x.dtype), sum));
  });
  t.add("aten.pad", [](Call& c) {
    std::string mode = c.str("mode", "constant", 2);
    if (mode != "constant") fail("pad: mode '{}' is not supported (constant only)", mode);
    const OpFn* pad = OpTable::get().find("aten.constant_pad_nd");
    if (!pad) fail("internal: aten.constant_pad_nd is not registered");
    (*pad)(c);
  });
  t.add("aten.scatter", [](Call& c) { scatterImpl(c, false); });
  t.add("aten.scatter_add", [](Call& c) { scatterImpl(c, true); });
  // index_add(self, dim, index [n], source, alpha): out[.., index[q], ..] += alpha * source[.., q, ..]
  t.add("aten.index_add", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    int64_t dim = normDim(c.integer("dim", 0, 1), x.dim());
    std::vector<double> index = c.tensor("index", 2).values();
    Tensor src = c.tensor("source", 3);
    double alpha = c.number("alpha", 1.0);
    if (src.dim() != x.dim() || (x.dim() > 0 && src.shape[dim] != static_cast<int64_t>(index.size())))
      fail("index_add: source {} does not fit self {} and {} indices", src.describe(), x.describe(), index.size());
    std::vector<double> out = x.values();
    Shape xs = contiguousStrides(x.shape);
    eachIndex(src.shape, [&](const Shape& ix) {
      Shape dst = ix;
      if (x.dim() > 0) dst[dim] = wrapIndex(index[static_cast<size_t>(ix[dim])], x.shape[dim], "index_add");
      int64_t o = 0;
      for (size_t k = 0; k < dst.size(); ++k) o += dst[k] * xs[k];
      out[static_cast<size_t>(o)] += alpha * src.get(ix);
    });
    c.out(0, tensorFromValues(c, 0, x.shape, x.dtype, out));
  });
}

}  // namespace fxfuse::interp
