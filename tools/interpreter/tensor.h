// Strided CPU tensors for the reference interpreter.
//
// A Tensor is a view (dtype, sizes, strides, storage offset) onto shared storage of
// doubles; each element holds a value exactly representable in the dtype (see
// numerics.h). Views share storage, so in-place ops (`copy_`, defunctionalized `_C.*`
// calls, auto_functionalized clones) behave as in torch. Fresh memory from `empty` is
// filled with NaN so an element nobody wrote shows up in the comparison.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tools/interpreter/numerics.h"
#include "ir/status.h"

namespace fxfuse::interp {

using Shape = std::vector<int64_t>;

// Element storage: a flat array of doubles (left uninitialized when the creator writes
// every element itself).
// Large buffers are 2 MiB aligned and marked for transparent huge pages (far fewer page
// faults for the weights of a real model).
class Storage {
 public:
  // Fails, as a constructor over the budget would, when `elements` more doubles do not fit the
  // interpreter's storage budget now; allocates nothing. For plans whose host-side bookkeeping
  // (a serving batch's block ids) grows with tensors that will be refused anyway.
  static void requireRoomFor(int64_t elements, const std::string& what);

  explicit Storage(size_t n);
  Storage(size_t n, double fill) : Storage(n) { std::fill(p_, p_ + n_, fill); }
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  size_t size() const { return n_; }
  double* data() { return p_; }
  const double* data() const { return p_; }
  double& operator[](size_t i) { return p_[i]; }
  double operator[](size_t i) const { return p_[i]; }
  double* begin() { return p_; }
  double* end() { return p_ + n_; }

 private:
  size_t n_;
  double* p_;
};

struct Tensor {
  DType dtype = DType::DTYPE_UNSPECIFIED;
  Shape shape;
  Shape strides;
  int64_t offset = 0;
  std::shared_ptr<Storage> storage;

  bool defined() const { return storage != nullptr; }
  int64_t dim() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const;
  int64_t size(int64_t d) const;  // negative d counts from the end
  bool isContiguous() const;
  // Dense and non-overlapping in some dimension order (a permutation of contiguous).
  bool isNonOverlappingAndDense() const;
  double* base() const { return storage->data(); }

  // Element access by multi-index (slow; tests and small helpers).
  double get(const Shape& idx) const;
  void set(const Shape& idx, double v) const;
  double item() const;  // requires numel() == 1

  // Row-major copy of all values.
  std::vector<double> values() const;
  std::string describe() const;  // "bf16[4, 8]"

  static Tensor empty(const Shape& shape, DType dtype, double fill);
  // Contiguous, elements uninitialized: the caller writes every one.
  static Tensor uninitialized(const Shape& shape, DType dtype);
  static Tensor emptyStrided(const Shape& shape, const Shape& strides, DType dtype, double fill);
  static Tensor full(const Shape& shape, DType dtype, double v) { return empty(shape, dtype, roundTo(v, dtype)); }
  static Tensor scalar(double v, DType dtype) { return full({}, dtype, v); }
  // Values are rounded to the dtype.
  static Tensor fromValues(const Shape& shape, DType dtype, const std::vector<double>& values);
};

Shape contiguousStrides(const Shape& shape);
int64_t normDim(int64_t d, int64_t rank, const char* what = "dim");
// A dim of `rank` that indexes the shape (split, unbind, gather, ...): as normDim, but a 0-d
// tensor has no dimension to index, so `op` fails in one line.
int64_t shapeDim(int64_t d, int64_t rank, const char* op);
std::string shapeStr(const Shape& s);

// Broadcasts two shapes (numpy rules); throws FxError naming both shapes when they clash.
Shape broadcastShapes(const Shape& a, const Shape& b);
// Strides of `t` viewed as `shape` (broadcast dims get stride 0).
Shape broadcastStrides(const Tensor& t, const Shape& shape);

// Calls f(offsets) for every element of `shape` in row-major order, where offsets[k] is the
// storage index for operand k (base offset plus index * strides[k]).
template <size_t N, typename F>
void stridedLoop(const Shape& shape, const std::array<const Shape*, N>& strides, std::array<int64_t, N> offs, F&& f) {
  const size_t nd = shape.size();
  for (int64_t s : shape)
    if (s == 0) return;
  if (nd == 0) {
    f(offs);
    return;
  }
  std::vector<int64_t> idx(nd, 0);
  const int64_t inner = shape[nd - 1];
  std::array<int64_t, N> inner_stride;
  for (size_t k = 0; k < N; ++k) inner_stride[k] = (*strides[k])[nd - 1];
  while (true) {
    auto o = offs;
    for (int64_t i = 0; i < inner; ++i) {
      f(o);
      for (size_t k = 0; k < N; ++k) o[k] += inner_stride[k];
    }
    int d = static_cast<int>(nd) - 2;
    for (; d >= 0; --d) {
      ++idx[d];
      for (size_t k = 0; k < N; ++k) offs[k] += (*strides[k])[d];
      if (idx[d] < shape[d]) break;
      for (size_t k = 0; k < N; ++k) offs[k] -= (*strides[k])[d] * shape[d];
      idx[d] = 0;
    }
    if (d < 0) break;
  }
}

// Views (share storage).
Tensor asStrided(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset);
Tensor permute(const Tensor& t, const Shape& dims);
Tensor transpose(const Tensor& t, int64_t d0, int64_t d1);
Tensor expand(const Tensor& t, const Shape& shape);  // -1 keeps a size
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step);
Tensor select(const Tensor& t, int64_t dim, int64_t index);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor squeezeDims(const Tensor& t, const Shape& dims);  // only dims of size 1 are removed
// A view with the new shape when the strides allow it (torch's computeStride), else
// an undefined tensor. `shape` may contain one -1.
Tensor tryView(const Tensor& t, Shape shape);
Shape inferShape(Shape shape, int64_t numel);  // resolves one -1; throws on mismatch
// reshape: a view when possible, else a contiguous copy.
Tensor reshape(const Tensor& t, const Shape& shape);

// Copies.
Tensor contiguous(const Tensor& t);
// A fresh tensor with the same values; keeps the strides when t is dense, else contiguous.
Tensor clonePreserve(const Tensor& t);
Tensor cast(const Tensor& t, DType dtype);  // always a fresh tensor
// dst[...] = round(src broadcast to dst.shape, dst.dtype); dst is written through its strides.
void copyInto(const Tensor& dst, const Tensor& src);

}  // namespace fxfuse::interp
