// Reductions (sum, mean, amax/amin, max/min with indices, argmax/argmin, prod, any/all,
// var/std), softmax / log_softmax and cumsum. Sums accumulate in f64 in index order and
// round once to the result dtype.
#include <algorithm>
#include <cmath>

#include "tools/interpreter/ops_common.h"

namespace fxfuse::interp {
namespace {

using namespace ops;

std::optional<Shape> dimArg(const Call& c, int pos) {
  const RValue* d = c.find("dim", pos);
  if (!d || d->isNone()) return std::nullopt;
  if (d->kind == RValue::Kind::Int) return Shape{d->i};
  return c.optInts("dim", pos);
}

template <typename F>
Tensor reduce(Call& c, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, DType out, F f,
              size_t out_index = 0) {
  Rows r = gatherRows(x, dims);
  Shape shape = keepdimShape(x, dims, keepdim);
  std::vector<double> vals(static_cast<size_t>(r.rows()));
  if (r.k == 0) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    vals.assign(static_cast<size_t>(n), 0.0);
    for (double& v : vals) v = f(nullptr, 0);
  } else {
    for (int64_t i = 0; i < r.rows(); ++i) vals[i] = f(r.row(i), r.k);
  }
  return tensorFromValues(c, out_index, shape, out, vals);
}

double sumRow(const double* p, int64_t k) {
  double s = 0;
  for (int64_t j = 0; j < k; ++j) s += p[j];
  return s;
}

DType sumDType(const Call& c, const Tensor& x) {
  if (auto d = c.dtype("dtype")) return *d;
  return category(x.dtype) == Category::Float ? x.dtype : DType::I64;
}

// Converts the input to the accumulation dtype when `dtype=` asks for one.
Tensor withDType(const Tensor& x, DType d) { return x.dtype == d ? x : cast(x, d); }

struct Extreme {
  double value;
  int64_t index;
};

Extreme extreme(const double* p, int64_t k, bool want_max) {
  Extreme e{p[0], 0};
  for (int64_t j = 0; j < k; ++j) {
    double v = p[j];
    if (std::isnan(e.value)) break;
    if (std::isnan(v) || (want_max ? v > e.value : v < e.value)) e = {v, j};
  }
  return e;
}

void maxMinDim(Call& c, bool want_max) {
  Tensor x = c.tensor("self", 0);
  int64_t dim = normDim(c.integer("dim", 0, 1), x.dim());
  bool keepdim = c.flag("keepdim", false, 2);
  if (x.dim() > 0 && x.shape[dim] == 0) fail("{}.dim on an empty dimension", want_max ? "max" : "min");
  std::vector<int64_t> dims = x.dim() > 0 ? std::vector<int64_t>{dim} : std::vector<int64_t>{};
  Rows r = gatherRows(x, dims);
  Shape shape = keepdimShape(x, dims, keepdim);
  std::vector<double> vals, idx;
  for (int64_t i = 0; i < r.rows(); ++i) {
    Extreme e = extreme(r.row(i), r.k, want_max);
    vals.push_back(e.value);
    idx.push_back(static_cast<double>(e.index));
  }
  c.out(0, tensorFromValues(c, 0, shape, x.dtype, vals));
  if (c.numOutputs() > 1) c.out(1, tensorFromValues(c, 1, shape, DType::I64, idx));
}

void argExtreme(Call& c, bool want_max) {
  Tensor x = c.tensor("self", 0);
  std::optional<Shape> d = dimArg(c, 1);
  bool keepdim = c.flag("keepdim", false, 2);
  std::vector<int64_t> dims = reductionDims(x, d);
  Tensor src = d ? x : reshape(x, {x.numel()});
  if (!d) dims = {0};
  Tensor r = reduce(c, src, dims, d ? keepdim : false, DType::I64, [&](const double* p, int64_t k) {
    if (k == 0) fail("argmax/argmin of an empty tensor");
    return static_cast<double>(extreme(p, k, want_max).index);
  });
  if (!d && keepdim) r = reshape(r, Shape(x.dim(), 1));
  c.out(0, r);
}

void softmaxImpl(Call& c, bool log, std::optional<DType> out_dtype) {
  Tensor x = c.tensor("self", 0);
  int64_t dim = c.integer("dim", 0, 1);
  DType od = out_dtype ? *out_dtype : x.dtype;
  Tensor src = withDType(x, od == DType::F64 ? DType::F64 : x.dtype);
  Tensor out = c.alloc(0, x.shape, od);
  if (x.dim() == 0) {
    writeValues(out, {log ? 0.0 : 1.0});
    c.out(0, out);
    return;
  }
  applyAlongDim(src, dim, out, [log](const double* in, double* o, int64_t k) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < k; ++j) mx = std::max(mx, in[j]);
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += std::exp(in[j] - mx);
    for (int64_t j = 0; j < k; ++j) o[j] = log ? in[j] - mx - std::log(sum) : std::exp(in[j] - mx) / sum;
  });
  c.out(0, out);
}

void varImpl(Call& c, bool want_std, bool with_mean) {
  Tensor x = c.tensor("self", 0);
  std::optional<Shape> d = dimArg(c, 1);
  std::vector<int64_t> dims = reductionDims(x, d);
  bool keepdim = c.flag("keepdim", false);
  double correction = 1.0;
  if (c.has("correction")) correction = c.number("correction", 1.0);
  else if (c.has("unbiased")) correction = c.flag("unbiased", true) ? 1.0 : 0.0;
  DType od = category(x.dtype) == Category::Float ? x.dtype : defaultFloat();
  Rows r = gatherRows(x, dims);
  Shape shape = keepdimShape(x, dims, keepdim);
  std::vector<double> var, mean;
  for (int64_t i = 0; i < r.rows(); ++i) {
    const double* p = r.row(i);
    double m = sumRow(p, r.k) / static_cast<double>(r.k);
    double s = 0;
    for (int64_t j = 0; j < r.k; ++j) s += (p[j] - m) * (p[j] - m);
    double v = s / std::max(0.0, static_cast<double>(r.k) - correction);
    var.push_back(want_std ? std::sqrt(v) : v);
    mean.push_back(m);
  }
  c.out(0, tensorFromValues(c, 0, shape, od, var));
  if (with_mean) c.out(1, tensorFromValues(c, 1, shape, od, mean));
}

// aten.histc (any dtype, as on CUDA): counts of `self`'s values in `bins` equal bins over
// [min, max] (both 0: the data's range; equal: widened by 1 each side); values outside are
// not counted, a value equal to max goes to the last bin: floor((x - min) / (max - min) * bins).
void histcOp(Call& c) {
  Tensor x = c.tensor("self", 0);
  int64_t bins = c.integer("bins", 100, 1);
  double lo = c.number("min", 0.0, 2), hi = c.number("max", 0.0, 3);
  if (bins <= 0) fail("histc: bins must be positive, got {}", bins);
  std::vector<double> v = x.values();
  if (lo == 0 && hi == 0 && !v.empty()) {
    lo = *std::min_element(v.begin(), v.end());
    hi = *std::max_element(v.begin(), v.end());
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  if (!(lo < hi) || !std::isfinite(lo) || !std::isfinite(hi)) fail("histc: range [{}, {}] is not finite and increasing", lo, hi);
  Tensor r = c.alloc(0, {bins}, x.dtype);  // within the interpreter's memory budget, or refused
  std::vector<double> counts(static_cast<size_t>(bins), 0.0);
  for (double e : v) {
    if (!(e >= lo && e <= hi)) continue;
    auto b = static_cast<int64_t>((e - lo) / (hi - lo) * static_cast<double>(bins));
    counts[static_cast<size_t>(std::min(b, bins - 1))] += 1;
  }
  writeValues(r, counts);
  c.out(0, r);
}

}  // namespace

namespace {

// Sums, means, products, norms, extrema and arg-extrema.
void registerSumMaxOps(OpTable& t) {
  t.add("aten.histc", histcOp);
  t.add("aten.sum", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    DType od = sumDType(c, x);
    std::optional<Shape> d = dimArg(c, 1);
    bool keepdim = c.flag("keepdim", false, 2);
    c.out(0, reduce(c, withDType(x, od), reductionDims(x, d), keepdim, od, sumRow));
  });
  t.add("aten.mean", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    DType od = c.dtype("dtype").value_or(x.dtype);
    if (category(od) != Category::Float) fail("mean needs a floating dtype, got {}", ir::dtypeName(od));
    std::optional<Shape> d = dimArg(c, 1);
    bool keepdim = c.flag("keepdim", false, 2);
    c.out(0, reduce(c, withDType(x, od), reductionDims(x, d), keepdim, od, [](const double* p, int64_t k) {
      return k == 0 ? kNaN : sumRow(p, k) / static_cast<double>(k);
    }));
  });
  t.add("aten.prod", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    DType od = sumDType(c, x);
    std::optional<Shape> d = dimArg(c, 1);
    bool keepdim = c.flag("keepdim", false, 2);
    c.out(0, reduce(c, withDType(x, od), reductionDims(x, d), keepdim, od, [](const double* p, int64_t k) {
      double s = 1;
      for (int64_t j = 0; j < k; ++j) s *= p[j];
      return s;
    }));
  });
  auto amaxmin = [](bool want_max) {
    return [want_max](Call& c) {
      Tensor x = c.tensor("self", 0);
      std::optional<Shape> d = c.optInts("dim", 1);
      bool keepdim = c.flag("keepdim", false, 2);
      c.out(0, reduce(c, x, reductionDims(x, d), keepdim, x.dtype, [want_max](const double* p, int64_t k) {
        if (k == 0) fail("amax/amin of an empty tensor");
        return extreme(p, k, want_max).value;
      }));
    };
  };
  // ||x||_ord over dims, accumulated in double and rounded once to the output dtype.
  t.add("aten.linalg_vector_norm", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    double ord = c.number("ord", 2.0, 1);
    std::optional<Shape> d = c.optInts("dim", 2);
    bool keepdim = c.flag("keepdim", false, 3);
    DType od = c.dtype("dtype", 4).value_or(x.dtype);
    if (category(od) != Category::Float) fail("linalg_vector_norm of a {} tensor (torch requires floating point)", ir::dtypeName(od));
    c.out(0, reduce(c, x, reductionDims(x, d), keepdim, od, [ord](const double* p, int64_t k) {
      double acc = std::isinf(ord) && ord < 0 ? std::numeric_limits<double>::infinity() : 0.0;
      for (int64_t j = 0; j < k; ++j) {
        double a = std::fabs(p[j]);
        if (std::isinf(ord)) acc = ord > 0 ? std::max(acc, a) : std::min(acc, a);
        else if (ord == 0) acc += a != 0 ? 1.0 : 0.0;
        else if (ord == 1) acc += a;
        else if (ord == 2) acc += a * a;
        else acc += std::pow(a, ord);
      }
      if (std::isinf(ord) || ord == 0 || ord == 1) return acc;
      return ord == 2 ? std::sqrt(acc) : std::pow(acc, 1.0 / ord);
    }));
  });
  t.add("aten.amax", amaxmin(true));
  t.add("aten.amin", amaxmin(false));
  auto maxmin = [](bool want_max) {
    return [want_max](Call& c) {
      const RValue* other = c.find("other", 1);
      if (other && other->isTensor()) {
        // max.other / min.other: elementwise.
        Tensor a = c.tensor("self", 0);
        Tensor b = other->t;
        // torch's result type: a 0-d tensor of the same category does not promote (XGLM's
        // max(bf16 scores, f32 scalar tensor) stays bf16)
        DType common = resultType({c.find("self", 0), other});
        Tensor r = c.alloc(0, broadcastShapes(a.shape, b.shape), common);
        mapInto<2>(r, {Operand{&a, 0}, Operand{&b, 0}}, common, [want_max](const std::array<double, 2>& v) {
          if (std::isnan(v[0]) || std::isnan(v[1])) return kNaN;
          return want_max ? std::max(v[0], v[1]) : std::min(v[0], v[1]);
        });
        c.out(0, r);
        return;
      }
      const RValue* dim = c.find("dim", 1);
      if (dim && !dim->isNone()) {
        maxMinDim(c, want_max);
        return;
      }
      Tensor x = c.tensor("self", 0);
      if (x.numel() == 0) fail("max/min of an empty tensor");
      c.out(0, reduce(c, x, reductionDims(x, std::nullopt), false, x.dtype, [want_max](const double* p, int64_t k) {
        return extreme(p, k, want_max).value;
      }));
    };
  };
  t.add("aten.max", maxmin(true));
  t.add("aten.min", maxmin(false));
  t.add("aten.argmax", [](Call& c) { argExtreme(c, true); });
  t.add("aten.argmin", [](Call& c) { argExtreme(c, false); });
}

// any/all, variance, logsumexp, softmaxes and scans.
void registerStatSoftmaxScanOps(OpTable& t) {
  auto anyAll = [](bool any) {
    return [any](Call& c) {
      Tensor x = c.tensor("self", 0);
      std::optional<Shape> d = dimArg(c, 1);
      bool keepdim = c.flag("keepdim", false, 2);
      DType od = x.dtype == DType::U8 ? DType::U8 : DType::BOOL;
      c.out(0, reduce(c, x, reductionDims(x, d), keepdim, od, [any](const double* p, int64_t k) {
        for (int64_t j = 0; j < k; ++j)
          if ((p[j] != 0) == any) return any ? 1.0 : 0.0;
        return any ? 0.0 : 1.0;
      }));
    };
  };
  t.add("aten.any", anyAll(true));
  t.add("aten.all", anyAll(false));
  t.add("aten.var", [](Call& c) { varImpl(c, false, false); });
  t.add("aten.std", [](Call& c) { varImpl(c, true, false); });
  t.add("aten.var_mean", [](Call& c) { varImpl(c, false, true); });
  t.add("aten.logsumexp", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    std::optional<Shape> d = c.optInts("dim", 1);
    bool keepdim = c.flag("keepdim", false, 2);
    DType od = category(x.dtype) == Category::Float ? x.dtype : defaultFloat();
    c.out(0, reduce(c, x, reductionDims(x, d), keepdim, od, [](const double* p, int64_t k) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < k; ++j) mx = std::max(mx, p[j]);
      if (std::isinf(mx)) return mx;
      double s = 0;
      for (int64_t j = 0; j < k; ++j) s += std::exp(p[j] - mx);
      return mx + std::log(s);
    }));
  });
  // softmax.int(self, dim, dtype=None) / _softmax(self, dim, half_to_float)
  t.add("aten.softmax", [](Call& c) { softmaxImpl(c, false, c.dtype("dtype", 2)); });
  t.add("aten.log_softmax", [](Call& c) { softmaxImpl(c, true, c.dtype("dtype", 2)); });
  t.add("aten._softmax", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    softmaxImpl(c, false, c.flag("half_to_float", false, 2) ? std::optional<DType>(DType::F32) : std::nullopt);
  });
  t.add("aten._log_softmax", [](Call& c) {
    softmaxImpl(c, true, c.flag("half_to_float", false, 2) ? std::optional<DType>(DType::F32) : std::nullopt);
  });
  t.add("aten.cumsum", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    int64_t dim = c.integer("dim", 0, 1);
    DType od = sumDType(c, x);
    Tensor out = c.alloc(0, x.shape, od);
    if (x.dim() == 0) {
      copyInto(out, x);
      c.out(0, out);
      return;
    }
    applyAlongDim(withDType(x, od), dim, out, [](const double* in, double* o, int64_t k) {
      double s = 0;
      for (int64_t j = 0; j < k; ++j) o[j] = (s += in[j]);
    });
    c.out(0, out);
  });
}

}  // namespace

void registerReductionOps(OpTable& t) {
  registerSumMaxOps(t);
  registerStatSoftmaxScanOps(t);
}

}  // namespace fxfuse::interp
