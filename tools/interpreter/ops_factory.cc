// Tensor factories. `empty*` memory is filled with NaN (poison): an element that no op
// writes shows up as NaN in the outputs and fails the comparison.
#include <cmath>

#include "tools/interpreter/ops_common.h"

namespace fxfuse::interp {
namespace {

using namespace ops;

DType scalarDType(const RValue& v) {
  switch (v.kind) {
    case RValue::Kind::Bool: return DType::BOOL;
    case RValue::Kind::Int: return DType::I64;
    default: return defaultFloat();
  }
}

// dtype= argument, else the recorded output dtype, else `fallback`.
DType factoryDType(const Call& c, DType fallback) {
  if (auto d = c.dtype("dtype")) return *d;
  return c.outDType(0, fallback);
}

Tensor likeTensor(const Call& c, const Tensor& self, DType dt, double fill) {
  if (self.isNonOverlappingAndDense() && !self.isContiguous())
    return Tensor::emptyStrided(self.shape, self.strides, dt, roundTo(fill, dt));
  Tensor t = c.alloc(0, self.shape, dt);
  for (double& v : *t.storage) v = roundTo(fill, dt);
  return t;
}

Tensor filled(const Call& c, const Shape& shape, DType dt, double fill) {
  Tensor t = c.alloc(0, shape, dt);
  double v = std::isnan(fill) ? fill : roundTo(fill, dt);
  for (double& e : *t.storage) e = v;
  return t;
}

void arange(Call& c, double start, double end, double step, bool any_float) {
  if (step == 0) fail("arange: step must be nonzero");
  DType dt = c.dtype("dtype").value_or(c.outDType(0, any_float ? defaultFloat() : DType::I64));
  double n = std::ceil((end - start) / step);
  if (std::isnan(n)) fail("arange: the length of [{}, {}) in steps of {} is not a number", start, end, step);
  if (n < 0) n = 0;
  // Refused before any vector of that length exists; c.alloc then checks the memory budget.
  if (n > static_cast<double>(int64_t{1} << 48)) fail("arange: {} elements from {} to {} in steps of {}", n, start, end, step);
  Tensor t = c.alloc(0, {static_cast<int64_t>(n)}, dt);
  std::vector<double> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<double>(i) * step;
  writeValues(t, v);
  c.out(0, t);
}

}  // namespace

void registerFactoryOps(OpTable& t) {
  t.add("aten.empty", [](Call& c) {
    c.out(0, filled(c, c.ints("size", 0), factoryDType(c, defaultFloat()), kNaN));
  });
  t.add("aten.empty_strided", [](Call& c) {
    DType dt = factoryDType(c, defaultFloat());
    c.out(0, Tensor::emptyStrided(c.ints("size", 0), c.ints("stride", 1), dt, kNaN));
  });
  t.add("aten.empty_permuted", [](Call& c) {
    Shape size = c.ints("size", 0);
    Shape layout = c.ints("physical_layout", 1);
    if (layout.size() != size.size()) fail("empty_permuted: layout {} for size {}", shapeStr(layout), shapeStr(size));
    Shape phys;
    for (int64_t d : layout) phys.push_back(size[d]);
    Shape pst = contiguousStrides(phys), st(size.size());
    for (size_t k = 0; k < layout.size(); ++k) st[layout[k]] = pst[k];
    c.out(0, Tensor::emptyStrided(size, st, factoryDType(c, defaultFloat()), kNaN));
  });
  t.add("aten.new_empty", [](Call& c) {
    c.out(0, filled(c, c.ints("size", 1), factoryDType(c, c.tensor("self", 0).dtype), kNaN));
  });
  t.add("aten.new_empty_strided", [](Call& c) {
    DType dt = factoryDType(c, c.tensor("self", 0).dtype);
    c.out(0, Tensor::emptyStrided(c.ints("size", 1), c.ints("stride", 2), dt, kNaN));
  });
  t.add("aten.new_zeros", [](Call& c) {
    c.out(0, filled(c, c.ints("size", 1), factoryDType(c, c.tensor("self", 0).dtype), 0.0));
  });
  t.add("aten.new_ones", [](Call& c) {
    c.out(0, filled(c, c.ints("size", 1), factoryDType(c, c.tensor("self", 0).dtype), 1.0));
  });
  t.add("aten.new_full", [](Call& c) {
    c.out(0, filled(c, c.ints("size", 1), factoryDType(c, c.tensor("self", 0).dtype), c.number("fill_value", 0.0, 2)));
  });
  t.add("aten.empty_like", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    c.out(0, likeTensor(c, x, c.dtype("dtype").value_or(x.dtype), kNaN));
  });
  t.add("aten.zeros_like", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    c.out(0, likeTensor(c, x, c.dtype("dtype").value_or(x.dtype), 0.0));
  });
  t.add("aten.ones_like", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    c.out(0, likeTensor(c, x, c.dtype("dtype").value_or(x.dtype), 1.0));
  });
  t.add("aten.full_like", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    c.out(0, likeTensor(c, x, c.dtype("dtype").value_or(x.dtype), c.number("fill_value", 0.0, 1)));
  });
  t.add("aten.full", [](Call& c) {
    const RValue& fv = c.get("fill_value", 1);
    DType dt = factoryDType(c, scalarDType(fv));
    c.out(0, filled(c, c.ints("size", 0), dt, fv.isTensor() ? fv.t.item() : fv.number()));
  });
  t.add("aten.eye", [](Call& c) {
    int64_t n = c.integer("n", 0, 0), m = c.has("m", 1) ? c.integer("m", n, 1) : n;
    if (n < 0 || m < 0) fail("eye: negative size {}x{}", n, m);
    Tensor r = filled(c, {n, m}, factoryDType(c, defaultFloat()), 0.0);
    std::vector<double> v = r.values();
    for (int64_t i = 0; i < std::min(n, m); ++i) v[static_cast<size_t>(i * m + i)] = 1.0;
    writeValues(r, v);
    c.out(0, r);
  });
  t.add("aten.zeros", [](Call& c) { c.out(0, filled(c, c.ints("size", 0), factoryDType(c, defaultFloat()), 0.0)); });
  t.add("aten.ones", [](Call& c) { c.out(0, filled(c, c.ints("size", 0), factoryDType(c, defaultFloat()), 1.0)); });
  t.add("aten.scalar_tensor", [](Call& c) {
    const RValue& s = c.get("s", 0);
    c.out(0, filled(c, {}, factoryDType(c, defaultFloat()), s.number()));
  });
  t.add("aten.tensor", [](Call& c) {
    // aten.tensor(data list) from some exports.
    std::vector<RValue> items = c.list("data", 0);
    std::vector<double> v;
    DType dt = DType::I64;
    for (const auto& i : items) {
      v.push_back(i.number());
      if (i.kind == RValue::Kind::Float) dt = defaultFloat();
    }
    c.out(0, tensorFromValues(c, 0, {static_cast<int64_t>(v.size())}, factoryDType(c, dt), v));
  });
  t.add("aten.arange", [](Call& c) {
    // arange(end) / arange.start(start, end) / arange.start_step(start, end, step)
    const RValue* start = c.find("start");
    const RValue* end = c.find("end");
    const RValue* step = c.find("step");
    if (!end) end = c.positional(start ? 1 : 0);
    if (!start && c.positional(1) && c.positional(1)->isNumber()) {
      start = c.positional(0);
      end = c.positional(1);
      if (c.positional(2) && c.positional(2)->isNumber()) step = c.positional(2);
    }
    if (!end || !end->isNumber()) fail("arange: missing end");
    bool any_float = end->kind == RValue::Kind::Float || (start && start->kind == RValue::Kind::Float) ||
                     (step && step->kind == RValue::Kind::Float);
    arange(c, start && start->isNumber() ? start->number() : 0.0, end->number(),
           step && step->isNumber() ? step->number() : 1.0, any_float);
  });
  t.add("prims.iota", [](Call& c) {
    int64_t n = c.integer("length", 0, 0);
    double start = c.number("start", 0.0), step = c.number("step", 1.0);
    DType dt = c.dtype("dtype").value_or(DType::I64);
    if (n < 0) fail("iota: length {} is negative", n);
    Tensor t = c.alloc(0, {n}, dt);  // within the interpreter's memory budget, or refused
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = start + static_cast<double>(i) * step;
    writeValues(t, v);
    c.out(0, t);
  });
}

}  // namespace fxfuse::interp
