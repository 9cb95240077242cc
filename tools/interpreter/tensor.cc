#include "tools/interpreter/tensor.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "ir/checked_math.h"

namespace fxfuse::interp {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;

// Bytes of tensor storage alive in this process, against a budget: half of the memory
// this process may use, or FXFUSE_INTERP_MAX_BYTES. A graph whose sizes need more is refused
// with a message before anything is allocated, instead of being killed by the kernel.
std::atomic<int64_t> g_live_bytes{0};

int64_t storageBudget() {
  static const int64_t budget = [] {
    if (const char* env = std::getenv("FXFUSE_INTERP_MAX_BYTES")) {
      char* end = nullptr;
      long long v = std::strtoll(env, &end, 10);
      if (end && *end == '\0' && v > 0) return static_cast<int64_t>(v);
    }
    // Half of the memory this process may use: the machine's, or its cgroup's limit when
    // lower. The other half is for copies outside tensors' storage and for other processes.
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    int64_t memory = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{64} << 30;
    if (std::FILE* f = std::fopen("/sys/fs/cgroup/memory.max", "r")) {
      long long limit = 0;
      if (std::fscanf(f, "%lld", &limit) == 1 && limit > 0 && limit < memory) memory = limit;
      std::fclose(f);
    }
    return memory / 2;
  }();
  return budget;
}

// "12.3 GiB", "4.0 MiB" or "18432 bytes".
std::string bytesText(int64_t bytes) {
  constexpr double kMiB = 1024.0 * 1024.0, kGiB = 1024.0 * kMiB;
  if (bytes >= kGiB) return fmt::format("{:.1f} GiB", bytes / kGiB);
  if (bytes >= kMiB) return fmt::format("{:.1f} MiB", bytes / kMiB);
  return fmt::format("{} bytes", bytes);
}

[[noreturn]] void overBudget(int64_t need, const std::string& what) {
  fail("the interpreter needs {} more for {}, over its budget of {} "
       "(FXFUSE_INTERP_MAX_BYTES; by default half of this machine's memory); use smaller sizes (--bind)",
       bytesText(need), what, bytesText(storageBudget()));
}
}  // namespace

void Storage::requireRoomFor(int64_t elements, const std::string& what) {
  const int64_t need = ir::bytesOrFail(std::max<int64_t>(elements, 1), sizeof(double), what);
  if (need > storageBudget() - g_live_bytes.load()) overBudget(need, what);
}

Storage::Storage(size_t n) : n_(n) {
  if (n > static_cast<size_t>(std::numeric_limits<int64_t>::max())) fail("interpreter tensor of {} elements", n);
  const int64_t need = ir::bytesOrFail(std::max<int64_t>(static_cast<int64_t>(n), 1), sizeof(double), "interpreter tensor");
  const int64_t live = g_live_bytes.fetch_add(need) + need;
  if (live > storageBudget()) {
    g_live_bytes.fetch_sub(need);
    overBudget(need, fmt::format("a tensor of {} elements", n));
  }
  size_t bytes = static_cast<size_t>(need);
  if (bytes >= 2 * kHugePage) {
    size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    void* p = std::aligned_alloc(kHugePage, rounded);
    if (p) madvise(p, rounded, MADV_HUGEPAGE);
    p_ = static_cast<double*>(p);
  } else {
    p_ = static_cast<double*>(std::malloc(bytes));
  }
  if (!p_) {
    g_live_bytes.fetch_sub(need);
    throw std::bad_alloc();
  }
}

Storage::~Storage() {
  std::free(p_);
  g_live_bytes.fetch_sub(static_cast<int64_t>(std::max<size_t>(n_, 1) * sizeof(double)));
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t Tensor::size(int64_t d) const { return shape[shapeDim(d, dim(), "size")]; }

bool Tensor::isContiguous() const {
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

bool Tensor::isNonOverlappingAndDense() const {
  if (isContiguous()) return true;
  std::vector<size_t> perm(shape.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::sort(perm.begin(), perm.end(), [&](size_t a, size_t b) {
    if (shape[a] < 2) return false;
    if (shape[b] < 2) return true;
    return strides[a] < strides[b];
  });
  int64_t expected = 1;
  for (size_t i : perm) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

double Tensor::get(const Shape& idx) const {
  int64_t o = offset;
  for (size_t i = 0; i < idx.size(); ++i) o += idx[i] * strides[i];
  return (*storage)[o];
}

void Tensor::set(const Shape& idx, double v) const {
  int64_t o = offset;
  for (size_t i = 0; i < idx.size(); ++i) o += idx[i] * strides[i];
  (*storage)[o] = roundTo(v, dtype);
}

double Tensor::item() const {
  if (numel() != 1) fail("expected a one-element tensor, got {}", describe());
  int64_t o = offset;
  return (*storage)[o];
}

std::vector<double> Tensor::values() const {
  std::vector<double> out;
  out.reserve(numel());
  const double* b = base();
  stridedLoop<1>(shape, {&strides}, {offset}, [&](const std::array<int64_t, 1>& o) { out.push_back(b[o[0]]); });
  return out;
}

std::string shapeStr(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string Tensor::describe() const { return std::string(ir::dtypeName(dtype)) + shapeStr(shape); }

// Row-major strides, a size-0 dim counted as 1 (torch's convention). A tensor with a size-0 dim
// holds no elements whatever its other sizes, so those may be huge and their product, which
// only the strides need, is checked: refused in one line rather than wrapped.
Shape contiguousStrides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    st[i] = acc;
    if (i == 0) break;  // the outermost size multiplies no stride
    const std::optional<int64_t> next = ir::checkedMul(acc, std::max<int64_t>(shape[i], 1));
    if (!next) fail("the contiguous strides of shape {} overflow int64", shapeStr(shape));
    acc = *next;
  }
  return st;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, double fill) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  const int64_t n = ir::numelOrFail(shape, "interpreter tensor");
  t.strides = contiguousStrides(shape);
  t.storage = std::make_shared<Storage>(static_cast<size_t>(n), fill);
  return t;
}

Tensor Tensor::uninitialized(const Shape& shape, DType dtype) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  const int64_t n = ir::numelOrFail(shape, "interpreter tensor");
  t.strides = contiguousStrides(shape);
  t.storage = std::make_shared<Storage>(static_cast<size_t>(n));
  return t;
}

Tensor Tensor::emptyStrided(const Shape& shape, const Shape& strides, DType dtype, double fill) {
  const int64_t extent = ir::extentOrFail(shape, strides, 0, "interpreter tensor");
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.strides = strides;
  t.storage = std::make_shared<Storage>(static_cast<size_t>(extent), fill);
  return t;
}

Tensor Tensor::fromValues(const Shape& shape, DType dtype, const std::vector<double>& values) {
  Tensor t = uninitialized(shape, dtype);
  if (static_cast<int64_t>(values.size()) != t.numel())
    fail("{} values for shape {}", values.size(), shapeStr(shape));
  for (size_t i = 0; i < values.size(); ++i) (*t.storage)[i] = roundTo(values[i], dtype);
  return t;
}

int64_t normDim(int64_t d, int64_t rank, const char* what) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (d < -r || d >= r) fail("{} {} out of range for a rank-{} tensor", what, d, rank);
  return d < 0 ? d + r : d;
}

int64_t shapeDim(int64_t d, int64_t rank, const char* op) {
  if (rank == 0) fail("{}: a 0-d tensor has no dimension {}", op, d);
  return normDim(d, rank);
}

Shape broadcastShapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) fail("shapes {} and {} cannot be broadcast together", shapeStr(a), shapeStr(b));
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Shape broadcastStrides(const Tensor& t, const Shape& shape) {
  Shape st(shape.size(), 0);
  size_t off = shape.size() - t.shape.size();
  if (t.shape.size() > shape.size()) fail("cannot broadcast {} to {}", t.describe(), shapeStr(shape));
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] == shape[i + off]) {
      st[i + off] = t.strides[i];
    } else if (t.shape[i] == 1) {
      st[i + off] = 0;
    } else {
      fail("cannot broadcast {} to {}", t.describe(), shapeStr(shape));
    }
  }
  return st;
}

Tensor asStrided(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset) {
  Tensor v = t;
  v.shape = shape;
  v.strides = strides;
  v.offset = offset;
  if (shape.size() != strides.size()) fail("as_strided: size {} and stride {} differ in rank", shapeStr(shape), shapeStr(strides));
  int64_t hi = offset;
  bool empty = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) empty = true;
    hi += (shape[i] - 1) * strides[i];
  }
  if (!empty && (offset < 0 || hi >= static_cast<int64_t>(t.storage->size())))
    fail("view {} strides {} offset {} runs outside its storage of {} elements", shapeStr(shape), shapeStr(strides), offset,
         t.storage->size());
  return v;
}

Tensor permute(const Tensor& t, const Shape& dims) {
  if (static_cast<int64_t>(dims.size()) != t.dim()) fail("permute: {} dims for {}", dims.size(), t.describe());
  Tensor v = t;
  std::vector<bool> seen(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    int64_t d = normDim(dims[i], t.dim());
    if (seen[d]) fail("permute: repeated dim {}", dims[i]);
    seen[d] = true;
    v.shape[i] = t.shape[d];
    v.strides[i] = t.strides[d];
  }
  return v;
}

Tensor transpose(const Tensor& t, int64_t d0, int64_t d1) {
  if (t.dim() == 0) return t;
  d0 = normDim(d0, t.dim());
  d1 = normDim(d1, t.dim());
  Tensor v = t;
  std::swap(v.shape[d0], v.shape[d1]);
  std::swap(v.strides[d0], v.strides[d1]);
  return v;
}

Tensor expand(const Tensor& t, const Shape& shape) {
  if (shape.size() < t.shape.size()) fail("expand: {} to fewer dims {}", t.describe(), shapeStr(shape));
  Tensor v = t;
  size_t off = shape.size() - t.shape.size();
  v.shape.assign(shape.size(), 0);
  v.strides.assign(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < off) {
      if (shape[i] < 0) fail("expand: -1 for a new leading dim in {}", shapeStr(shape));
      v.shape[i] = shape[i];
      v.strides[i] = 0;
      continue;
    }
    int64_t src = t.shape[i - off];
    int64_t want = shape[i] == -1 ? src : shape[i];
    if (src == want) {
      v.shape[i] = src;
      v.strides[i] = t.strides[i - off];
    } else if (src == 1) {
      v.shape[i] = want;
      v.strides[i] = 0;
    } else {
      fail("expand: size {} of {} cannot become {}", src, t.describe(), want);
    }
  }
  return v;
}

Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  dim = normDim(dim, t.dim());
  if (step <= 0) fail("slice: step must be positive, got {}", step);
  int64_t n = t.shape[dim];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Tensor v = t;
  v.offset += start * t.strides[dim];
  v.shape[dim] = (end - start + step - 1) / step;
  v.strides[dim] = t.strides[dim] * step;
  return v;
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  dim = normDim(dim, t.dim());
  int64_t n = t.shape[dim];
  if (index < -n || index >= n) fail("select: index {} out of range for size {}", index, n);
  if (index < 0) index += n;
  Tensor v = t;
  v.offset += index * t.strides[dim];
  v.shape.erase(v.shape.begin() + dim);
  v.strides.erase(v.strides.begin() + dim);
  return v;
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  dim = normDim(dim, t.dim() + 1);
  Tensor v = t;
  int64_t st = dim < t.dim() ? t.shape[dim] * t.strides[dim] : 1;
  v.shape.insert(v.shape.begin() + dim, 1);
  v.strides.insert(v.strides.begin() + dim, st);
  return v;
}

Tensor squeezeDims(const Tensor& t, const Shape& dims) {
  std::vector<bool> drop(t.shape.size(), false);
  for (int64_t d : dims) {
    if (t.dim() == 0) continue;
    int64_t nd = normDim(d, t.dim());
    if (t.shape[nd] == 1) drop[nd] = true;
  }
  Tensor v = t;
  v.shape.clear();
  v.strides.clear();
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (drop[i]) continue;
    v.shape.push_back(t.shape[i]);
    v.strides.push_back(t.strides[i]);
  }
  return v;
}

Shape inferShape(Shape shape, int64_t numel) {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) fail("only one dimension can be inferred in {}", shapeStr(shape));
      infer = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      fail("invalid size {} in {}", shape[i], shapeStr(shape));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0) fail("shape {} is invalid for {} elements", shapeStr(shape), numel);
    shape[infer] = numel / known;
  } else if (known != numel) {
    fail("shape {} is invalid for {} elements", shapeStr(shape), numel);
  }
  return shape;
}

Tensor tryView(const Tensor& t, Shape shape) {
  shape = inferShape(shape, t.numel());
  Tensor v = t;
  v.shape = shape;
  if (t.shape.empty()) {
    v.strides.assign(shape.size(), 1);
    return v;
  }
  if (t.numel() == 0 || t.isContiguous()) {
    v.strides = contiguousStrides(shape);
    return v;
  }
  // torch's computeStride (aten/src/ATen/TensorUtils.cpp).
  const Shape& os = t.shape;
  const Shape& ost = t.strides;
  Shape ns(shape.size(), 0);
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = ost.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t td = static_cast<int64_t>(os.size()) - 1; td >= 0; --td) {
    tensor_numel *= os[td];
    if (td == 0 || (os[td - 1] != 1 && ost[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        ns[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return Tensor{};
      if (td > 0) {
        chunk_base_stride = ost[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return Tensor{};
  v.strides = ns;
  return v;
}

Tensor reshape(const Tensor& t, const Shape& shape) {
  Tensor v = tryView(t, shape);
  if (v.defined()) return v;
  Tensor c = contiguous(t);
  Tensor out = tryView(c, shape);
  return out;
}

void copyInto(const Tensor& dst, const Tensor& src) {
  Shape sst = broadcastStrides(src, dst.shape);
  double* d = dst.base();
  const double* s = src.base();
  DType dt = dst.dtype;
  bool same = dst.dtype == src.dtype;
  // Conversions go through torch's rules: floats -> narrower floats via f32.
  stridedLoop<2>(dst.shape, {&dst.strides, &sst}, {dst.offset, src.offset}, [&](const std::array<int64_t, 2>& o) {
    d[o[0]] = same ? s[o[1]] : roundTo(s[o[1]], dt);
  });
}

Tensor contiguous(const Tensor& t) {
  if (t.isContiguous()) return t;
  Tensor out = Tensor::uninitialized(t.shape, t.dtype);
  copyInto(out, t);
  return out;
}

Tensor clonePreserve(const Tensor& t) {
  Tensor out = t.isNonOverlappingAndDense() && !t.isContiguous() ? Tensor::emptyStrided(t.shape, t.strides, t.dtype, 0.0)
                                                                 : Tensor::uninitialized(t.shape, t.dtype);
  copyInto(out, t);
  return out;
}

Tensor cast(const Tensor& t, DType dtype) {
  Tensor out = Tensor::uninitialized(t.shape, dtype);
  copyInto(out, t);
  return out;
}

}  // namespace fxfuse::interp
