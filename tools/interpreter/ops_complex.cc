// Complex tensors (c64, c128) for the ops that rotary embeddings written with complex numbers
// use (Llama-4's `polar` / `view_as_complex` / `view_as_real` form).
//
// A complex tensor is a view whose elements are (re, im) pairs of adjacent doubles; its
// strides and offset count doubles, so the generic view ops (slice, select, unsqueeze) work
// on it unchanged. The parts are rounded to the part dtype (f32 for c64, f64 for c128).
// Copies and casts between complex dtypes and views/reshapes are supported too. Every other op refuses a
// complex operand (`Interpreter::dispatch` checks
// `acceptsComplex`): it would read one double per element.
#include <cmath>
#include <unordered_set>

#include "ir/checked_math.h"
#include "tools/interpreter/ops_common.h"

namespace fxfuse::interp {
namespace {

using ops::Operand;

DType partDType(DType complex) { return complex == DType::C128 ? DType::F64 : DType::F32; }
DType complexOf(DType part, const char* op) {
  if (part == DType::F32) return DType::C64;
  if (part == DType::F64) return DType::C128;
  fail("{}: parts must be f32 or f64, got {}", op, ir::dtypeName(part));
}

// A fresh contiguous complex tensor (2 doubles per element, NaN-filled).
Tensor complexEmpty(const Shape& shape, DType dtype) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  const int64_t n = ir::numelOrFail(shape, "interpreter tensor");
  t.strides = contiguousStrides(shape);
  for (auto& s : t.strides) s *= 2;
  t.storage = std::make_shared<Storage>(static_cast<size_t>(2 * n), ops::kNaN);
  return t;
}

// out = f(a, b) over the broadcast shape, each operand a complex tensor (re, im), a real
// tensor or a real number (re, 0).
template <typename F>
Tensor complexBinary(const Operand& a, const Operand& b, DType dtype, F&& f) {
  Operand both[2] = {a, b};
  Shape shape = ops::broadcastOperands(both, 2);
  Tensor out = complexEmpty(shape, dtype);
  const DType part = partDType(dtype);
  Shape sa = a.t ? broadcastStrides(*a.t, shape) : Shape(shape.size(), 0);
  Shape sb = b.t ? broadcastStrides(*b.t, shape) : Shape(shape.size(), 0);
  std::array<const Shape*, 3> strides = {&out.strides, &sa, &sb};
  std::array<int64_t, 3> offs = {out.offset, a.t ? a.t->offset : 0, b.t ? b.t->offset : 0};
  double* ob = out.base();
  const double* ab = a.t ? a.t->base() : nullptr;
  const double* bb = b.t ? b.t->base() : nullptr;
  const bool a_complex = a.t && ir::isComplex(a.t->dtype), b_complex = b.t && ir::isComplex(b.t->dtype);
  stridedLoop<3>(shape, strides, offs, [&](const std::array<int64_t, 3>& o) {
    double ar = ab ? roundTo(ab[o[1]], part) : a.v, ai = a_complex ? ab[o[1] + 1] : 0.0;
    double br = bb ? roundTo(bb[o[2]], part) : b.v, bi = b_complex ? bb[o[2] + 1] : 0.0;
    auto [re, im] = f(ar, ai, br, bi);
    ob[o[0]] = roundTo(re, part);
    ob[o[0] + 1] = roundTo(im, part);
  });
  return out;
}

bool isComplexOperand(const Operand& x) { return x.t && ir::isComplex(x.t->dtype); }

// A contiguous copy of complex `z` as complex `dtype` (parts rounded to its part dtype).
Tensor complexCopy(const Tensor& z, DType dtype) {
  Tensor out = complexEmpty(z.shape, dtype);
  const DType part = partDType(dtype);
  std::array<const Shape*, 2> strides = {&out.strides, &z.strides};
  double* ob = out.base();
  const double* zb = z.base();
  stridedLoop<2>(z.shape, strides, {out.offset, z.offset}, [&](const std::array<int64_t, 2>& o) {
    ob[o[0]] = roundTo(zb[o[1]], part);
    ob[o[0] + 1] = roundTo(zb[o[1] + 1], part);
  });
  return out;
}

// Copies and casts (to, _to_copy, clone, contiguous): of a complex tensor, to a complex
// dtype only (dropping the imaginary part is refused, not done silently); of a real one,
// the real op.
void wrapCopyOp(OpTable& t, const std::string& target) {
  const OpFn* real = t.find(target);
  if (!real) throw std::logic_error("ops_complex: no op " + target);
  t.add(target, [real_op = *real](Call& c) {
    const RValue& self = c.get("self", 0);
    if (self.kind != RValue::Kind::Tensor || !ir::isComplex(self.t.dtype)) return real_op(c);
    DType to = c.dtype("dtype").value_or(self.t.dtype);
    if (!ir::isComplex(to)) fail("{}: casting {} to a real dtype drops the imaginary part", c.target, self.t.describe());
    c.out(0, complexCopy(self.t, to));
  });
}

// view/reshape of a complex tensor: its real pairs reshaped to shape + [2] (a copy when the
// layout does not allow a view), viewed as complex again.
Tensor complexReshape(const Tensor& z, Shape shape) {
  int64_t known = 1, infer = -1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == -1 && infer < 0) infer = static_cast<int64_t>(k);
    else known *= shape[k];
  }
  if (infer >= 0 && known > 0) shape[static_cast<size_t>(infer)] = z.numel() / known;
  Tensor pairs = z;
  pairs.dtype = partDType(z.dtype);
  pairs.shape.push_back(2);
  pairs.strides.push_back(1);
  Shape with_pair = shape;
  with_pair.push_back(2);
  Tensor r = reshape(pairs, with_pair);
  if (!r.defined() || r.numel() != pairs.numel()) fail("view of complex {} as {}: sizes differ", z.describe(), shapeStr(shape));
  r.dtype = z.dtype;
  r.shape.pop_back();
  r.strides.pop_back();
  return r;
}

const char* const kViewOps[] = {"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default"};

const char* const kCopyOps[] = {"aten.to.dtype_layout", "aten.to.dtype", "aten._to_copy.default",
                                "aten.clone.default", "aten.contiguous.default"};

}  // namespace

bool acceptsComplex(const std::string& target) {
  static const std::unordered_set<std::string> kOps = {
      "aten.polar.default",   "aten.view_as_complex.default",  "aten.view_as_real.default",
      "aten.mul.Tensor",      "aten.slice.Tensor",             "aten.select.int",
      "aten.unsqueeze.default", "aten._assert_tensor_metadata.default",
  };
  if (kOps.count(target)) return true;
  for (const char* op : kCopyOps)
    if (target == op) return true;
  for (const char* op : kViewOps)
    if (target == op) return true;
  return false;
}

void registerComplexOps(OpTable& t) {
  // polar(abs, angle) = abs * (cos(angle) + i sin(angle))
  t.add("aten.polar", [](Call& c) {
    Tensor abs = c.tensor("abs", 0), angle = c.tensor("angle", 1);
    if (abs.dtype != angle.dtype) fail("polar: abs is {}, angle is {}", abs.describe(), angle.describe());
    DType dtype = complexOf(abs.dtype, "polar");
    c.out(0, complexBinary(Operand{&abs, 0}, Operand{&angle, 0}, dtype,
                           [](double r, double, double theta, double) {
                             return std::pair<double, double>{r * std::cos(theta), r * std::sin(theta)};
                           }));
  });
  // [..., 2] real pairs viewed as complex, and back: the same storage.
  t.add("aten.view_as_complex", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    if (x.dim() == 0 || x.shape.back() != 2 || x.strides.back() != 1)
      fail("view_as_complex: {} must end in a dimension of size 2 with stride 1", x.describe());
    for (size_t k = 0; k + 1 < x.shape.size(); ++k)
      if (x.shape[k] != 1 && x.strides[k] % 2 != 0) fail("view_as_complex: {} has an odd stride", x.describe());
    Tensor z = x;
    z.dtype = complexOf(x.dtype, "view_as_complex");
    z.shape.pop_back();
    z.strides.pop_back();
    c.out(0, z);
  });
  t.add("aten.view_as_real", [](Call& c) {
    Tensor z = c.tensor("self", 0);
    if (!ir::isComplex(z.dtype)) fail("view_as_real: {} is not complex", z.describe());
    Tensor x = z;
    x.dtype = partDType(z.dtype);
    x.shape.push_back(2);
    x.strides.push_back(1);
    c.out(0, x);
  });
  // mul with a complex operand: (a + bi)(c + di); a real tensor or number operand is
  // (re, 0). Real operands go to the real mul.
  const OpFn real_mul = *t.find("aten.mul");
  t.add("aten.mul.Tensor", [real_mul](Call& c) {
    Operand a = ops::operand(c.get("self", 0), "self"), b = ops::operand(c.get("other", 1), "other");
    if (!isComplexOperand(a) && !isComplexOperand(b)) return real_mul(c);
    DType dtype = isComplexOperand(a) ? a.t->dtype : b.t->dtype;
    if (isComplexOperand(a) && isComplexOperand(b) && a.t->dtype != b.t->dtype)
      fail("mul: complex operands of different dtypes");
    c.out(0, complexBinary(a, b, dtype, [](double ar, double ai, double br, double bi) {
            return std::pair<double, double>{ar * br - ai * bi, ar * bi + ai * br};
          }));
  });
  for (const char* op : kCopyOps) wrapCopyOp(t, op);
  for (const char* op : kViewOps) {
    const OpFn real = *t.find(op);
    t.add(op, [real](Call& c) {
      const RValue& self = c.get("self", 0);
      if (self.kind != RValue::Kind::Tensor || !ir::isComplex(self.t.dtype)) return real(c);
      c.out(0, complexReshape(self.t, c.ints(c.target == "aten.reshape.default" ? "shape" : "size", 1)));
    });
  }
}

}  // namespace fxfuse::interp
