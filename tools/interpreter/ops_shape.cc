// Views and data movement: view/reshape/permute/transpose/expand/slice/select/squeeze/
// unsqueeze/as_strided (share storage), cat/stack/split/chunk/unbind, indexing (index,
// index_select, gather, embedding, index_put), scatters, repeat, pad, copies, SymInt
// queries and runtime asserts.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "tools/interpreter/ops_common.h"

namespace fxfuse::interp {
namespace {

using namespace ops;

// Calls f(index) for every multi-index of `shape` in row-major order.
template <typename F>
void forEachIndex(const Shape& shape, F&& f) {
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

int64_t offsetOf(const Tensor& t, const Shape& idx) {
  int64_t o = t.offset;
  for (size_t i = 0; i < idx.size(); ++i) o += idx[i] * t.strides[i];
  return o;
}

Shape sizeArg(const Call& c, const char* name, int pos) { return c.ints(name, pos); }

void viewOp(Call& c, const char* size_name) {
  Tensor x = c.tensor("self", 0);
  const RValue* s = c.find("dtype");
  if (!s) s = c.find(size_name, 1);
  if (s && s->kind == RValue::Kind::DType) {
    // view.dtype: a bit cast between dtypes of the same size (a fresh tensor here).
    DType to = s->dt;
    if (ir::dtypeBytes(to) != ir::dtypeBytes(x.dtype))
      fail("view.dtype between dtypes of different sizes ({} -> {}) is not supported", ir::dtypeName(x.dtype),
           ir::dtypeName(to));
    std::vector<double> v = x.values();
    for (double& e : v) e = fromBits(toBits(e, x.dtype), to);
    c.out(0, tensorFromValues(c, 0, x.shape, to, v));
    return;
  }
  Shape shape = sizeArg(c, size_name, 1);
  c.out(0, reshape(x, shape));
}

// Output i of a multi-output view op.
void outViews(Call& c, const std::vector<Tensor>& parts) {
  if (c.outs.size() < parts.size()) c.outs.resize(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) c.out(i, parts[i]);
}

// Advanced indexing: broadcast index tensors; returns source storage offsets in the
// "front" layout [B..., rest...] and the final shape/permutation.
struct AdvIndex {
  Shape b_shape;            // broadcast index shape
  std::vector<int64_t> adv; // indexed dims of self
  std::vector<int64_t> rest;
  bool adjacent = true;
  std::vector<int64_t> offsets;  // per element of [B..., rest...]
  Shape front_shape;
  Shape result_shape;            // with B moved in place when adjacent
};

AdvIndex advancedIndex(const Tensor& self, const std::vector<RValue>& indices) {
  AdvIndex a;
  std::vector<Tensor> idx_t;
  std::vector<int64_t> dims;
  int64_t d = 0;
  for (const RValue& r : indices) {
    if (r.isNone()) {
      ++d;
      continue;
    }
    if (!r.isTensor()) fail("index: indices must be tensors or None");
    if (r.t.dtype == DType::BOOL || r.t.dtype == DType::U8) {
      // A mask over r.t.dim() dims -> one long index tensor per dim (nonzero).
      Shape ms = r.t.shape;
      for (size_t k = 0; k < ms.size(); ++k)
        if (d + static_cast<int64_t>(k) >= self.dim() || self.shape[d + k] != ms[k])
          fail("index: mask {} does not match {}", r.t.describe(), self.describe());
      std::vector<std::vector<double>> coords(ms.size());
      forEachIndex(ms, [&](const Shape& ix) {
        if (r.t.get(ix) != 0)
          for (size_t k = 0; k < ms.size(); ++k) coords[k].push_back(static_cast<double>(ix[k]));
      });
      for (size_t k = 0; k < ms.size(); ++k) {
        idx_t.push_back(Tensor::fromValues({static_cast<int64_t>(coords[k].size())}, DType::I64, coords[k]));
        dims.push_back(d + static_cast<int64_t>(k));
      }
      d += static_cast<int64_t>(ms.size());
      continue;
    }
    idx_t.push_back(r.t);
    dims.push_back(d);
    ++d;
  }
  if (d > self.dim()) fail("index: too many indices ({}) for {}", d, self.describe());
  a.adv = dims;
  for (int64_t k = 0; k < self.dim(); ++k)
    if (std::find(dims.begin(), dims.end(), k) == dims.end()) a.rest.push_back(k);
  for (size_t k = 1; k < dims.size(); ++k)
    if (dims[k] != dims[k - 1] + 1) a.adjacent = false;
  for (size_t k = 0; k < idx_t.size(); ++k) a.b_shape = k ? broadcastShapes(a.b_shape, idx_t[k].shape) : idx_t[k].shape;
  std::vector<Tensor> ex;
  for (auto& t : idx_t) ex.push_back(expand(t, a.b_shape));
  a.front_shape = a.b_shape;
  for (int64_t r : a.rest) a.front_shape.push_back(self.shape[r]);
  Shape rest_shape;
  for (int64_t r : a.rest) rest_shape.push_back(self.shape[r]);
  forEachIndex(a.b_shape, [&](const Shape& bi) {
    int64_t base = self.offset;
    for (size_t k = 0; k < ex.size(); ++k)
      base += wrapIndex(ex[k].get(bi), self.shape[dims[k]], "index") * self.strides[dims[k]];
    if (rest_shape.empty()) {
      a.offsets.push_back(base);
      return;
    }
    forEachIndex(rest_shape, [&](const Shape& ri) {
      int64_t o = base;
      for (size_t k = 0; k < ri.size(); ++k) o += ri[k] * self.strides[a.rest[k]];
      a.offsets.push_back(o);
    });
  });
  // Where B lands in the result: in place of the first indexed dim when adjacent.
  a.result_shape = a.front_shape;
  if (a.adjacent && !dims.empty() && dims[0] > 0) {
    a.result_shape.clear();
    size_t nb = a.b_shape.size();
    for (size_t k = 0; k < a.rest.size() && a.rest[k] < dims[0]; ++k) a.result_shape.push_back(self.shape[a.rest[k]]);
    for (int64_t s : a.b_shape) a.result_shape.push_back(s);
    for (size_t k = 0; k < a.rest.size(); ++k)
      if (a.rest[k] > dims[0]) a.result_shape.push_back(self.shape[a.rest[k]]);
    (void)nb;
  }
  return a;
}

// Permutation taking the front layout [B..., rest...] to the result layout.
Shape frontToResultPerm(const AdvIndex& a) {
  size_t nb = a.b_shape.size();
  Shape perm;
  if (!(a.adjacent && !a.adv.empty() && a.adv[0] > 0)) {
    for (size_t k = 0; k < a.front_shape.size(); ++k) perm.push_back(static_cast<int64_t>(k));
    return perm;
  }
  size_t before = 0;
  while (before < a.rest.size() && a.rest[before] < a.adv[0]) ++before;
  for (size_t k = 0; k < before; ++k) perm.push_back(static_cast<int64_t>(nb + k));
  for (size_t k = 0; k < nb; ++k) perm.push_back(static_cast<int64_t>(k));
  for (size_t k = before; k < a.rest.size(); ++k) perm.push_back(static_cast<int64_t>(nb + k));
  return perm;
}

void indexOp(Call& c) {
  Tensor x = c.tensor("self", 0);
  AdvIndex a = advancedIndex(x, c.list("indices", 1));
  std::vector<double> vals;
  vals.reserve(a.offsets.size());
  for (int64_t o : a.offsets) vals.push_back((*x.storage)[o]);
  Tensor front = Tensor::fromValues(a.front_shape, x.dtype, vals);
  Tensor res = permute(front, frontToResultPerm(a));
  Tensor out = c.alloc(0, res.shape, x.dtype);
  copyInto(out, res);
  c.out(0, out);
}

void indexPutOp(Call& c, bool inplace) {
  Tensor self = c.tensor("self", 0);
  Tensor out = inplace ? self : clonePreserve(self);
  AdvIndex a = advancedIndex(out, c.list("indices", 1));
  Tensor values = c.tensor("values", 2);
  bool accumulate = c.flag("accumulate", false, 3);
  // Values broadcast to the result layout, then permuted back to the front layout.
  Tensor vr = expand(values, a.result_shape);
  Shape perm = frontToResultPerm(a), inv(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) inv[perm[k]] = static_cast<int64_t>(k);
  Tensor vf = permute(vr, inv);
  std::vector<double> v = vf.values();
  for (size_t i = 0; i < a.offsets.size(); ++i) {
    double x = roundTo(v[i], out.dtype);
    double& dst = (*out.storage)[a.offsets[i]];
    dst = accumulate ? roundTo(dst + x, out.dtype) : x;
  }
  c.out(0, out);
}

Tensor catTensors(Call& c, const std::vector<RValue>& items, int64_t dim) {
  std::vector<Tensor> ts;
  DType dt = DType::DTYPE_UNSPECIFIED;
  for (const RValue& r : items) {
    if (!r.isTensor()) fail("cat: list items must be tensors");
    // Legacy: 1-D empty tensors are skipped.
    if (r.t.dim() == 1 && r.t.shape[0] == 0 && items.size() > 1) continue;
    ts.push_back(r.t);
    dt = promoteTypes(dt, r.t.dtype);
  }
  if (ts.empty()) fail("cat: no tensors");
  int64_t rank = ts[0].dim();
  dim = normDim(dim, rank);
  Shape shape = ts[0].shape;
  int64_t total = 0;
  for (const Tensor& t : ts) {
    if (t.dim() != rank) fail("cat: tensors of rank {} and {}", rank, t.dim());
    for (int64_t k = 0; k < rank; ++k)
      if (k != dim && t.shape[k] != shape[k])
        fail("cat: sizes {} and {} differ outside dim {}", shapeStr(ts[0].shape), shapeStr(t.shape), dim);
    total += t.shape[dim];
  }
  shape[dim] = total;
  Tensor out = c.alloc(0, shape, dt);
  int64_t at = 0;
  for (const Tensor& t : ts) {
    copyInto(slice(out, dim, at, at + t.shape[dim], 1), t);
    at += t.shape[dim];
  }
  return out;
}

// Views and layout changes: view/reshape, permutes, expands, squeezes, slices, selects, clones.
void registerViewOps(OpTable& t) {
  t.add("aten.view", [](Call& c) { viewOp(c, "size"); });
  t.add("aten.reshape", [](Call& c) { viewOp(c, "shape"); });
  t.add("aten._unsafe_view", [](Call& c) { viewOp(c, "size"); });
  t.add("aten._reshape_alias", [](Call& c) { viewOp(c, "size"); });
  t.add("aten.view_copy", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    c.out(0, contiguous(cast(reshape(x, c.ints("size", 1)), x.dtype)));
  });
  t.add("aten.alias", [](Call& c) { c.out(0, c.tensor("self", 0)); });
  t.alias("aten.detach", "aten.alias");
  t.alias("aten.lift_fresh", "aten.alias");
  t.alias("aten.positive", "aten.alias");
  t.add("aten.lift_fresh_copy", [](Call& c) { c.out(0, clonePreserve(c.tensor("self", 0))); });
  t.add("aten.clone", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    Tensor out = c.alloc(0, x.shape, x.dtype);
    copyInto(out, x);
    c.out(0, out);
  });
  t.add("aten.contiguous", [](Call& c) { c.out(0, contiguous(c.tensor("self", 0))); });
  t.add("aten.permute", [](Call& c) { c.out(0, permute(c.tensor("self", 0), c.ints("dims", 1))); });
  t.add("aten.transpose", [](Call& c) {
    c.out(0, transpose(c.tensor("self", 0), c.integer("dim0", 0, 1), c.integer("dim1", 1, 2)));
  });
  t.add("aten.t", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    c.out(0, x.dim() < 2 ? x : transpose(x, 0, 1));
  });
  t.add("aten.numpy_T", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    Shape p;
    for (int64_t d = x.dim(); d-- > 0;) p.push_back(d);
    c.out(0, permute(x, p));
  });
  t.add("aten.expand", [](Call& c) { c.out(0, expand(c.tensor("self", 0), c.ints("size", 1))); });
  t.add("aten.expand_as", [](Call& c) { c.out(0, expand(c.tensor("self", 0), c.tensor("other", 1).shape)); });
  t.add("aten.reshape_as", [](Call& c) { c.out(0, reshape(c.tensor("self", 0), c.tensor("other", 1).shape)); });
  t.add("aten.unsqueeze", [](Call& c) { c.out(0, unsqueeze(c.tensor("self", 0), c.integer("dim", 0, 1))); });
  t.add("aten.squeeze", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    const RValue* d = c.find("dim", 1);
    Shape dims;
    if (!d || d->isNone()) {
      for (int64_t k = 0; k < x.dim(); ++k) dims.push_back(k);
    } else if (d->kind == RValue::Kind::Int) {
      dims = {d->i};
    } else {
      dims = c.ints("dim", 1);
    }
    c.out(0, squeezeDims(x, dims));
  });
  t.add("aten.flatten", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    if (x.dim() == 0) {
      c.out(0, reshape(x, {1}));
      return;
    }
    int64_t s = normDim(c.integer("start_dim", 0, 1), x.dim()), e = normDim(c.integer("end_dim", -1, 2), x.dim());
    Shape shape;
    for (int64_t k = 0; k < s; ++k) shape.push_back(x.shape[k]);
    int64_t m = 1;
    for (int64_t k = s; k <= e; ++k) m *= x.shape[k];
    shape.push_back(m);
    for (int64_t k = e + 1; k < x.dim(); ++k) shape.push_back(x.shape[k]);
    c.out(0, reshape(x, shape));
  });
  t.add("aten.unflatten", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    int64_t d = shapeDim(c.integer("dim", 0, 1), x.dim(), "unflatten");
    Shape sizes = inferShape(c.ints("sizes", 2), x.shape[d]);
    Shape shape(x.shape.begin(), x.shape.begin() + d);
    shape.insert(shape.end(), sizes.begin(), sizes.end());
    shape.insert(shape.end(), x.shape.begin() + d + 1, x.shape.end());
    c.out(0, reshape(x, shape));
  });
  t.add("aten.slice", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    int64_t dim = c.integer("dim", 0, 1);
    int64_t start = c.integer("start", 0, 2);
    int64_t end = c.integer("end", std::numeric_limits<int64_t>::max(), 3);
    int64_t step = c.integer("step", 1, 4);
    c.out(0, slice(x, dim, start, end, step));
  });
  t.add("aten.narrow", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    int64_t dim = c.integer("dim", 0, 1), start = c.integer("start", 0, 2), len = c.integer("length", 0, 3);
    if (start < 0) start += x.size(dim);
    c.out(0, slice(x, dim, start, start + len, 1));
  });
  t.add("aten.select", [](Call& c) {
    c.out(0, select(c.tensor("self", 0), c.integer("dim", 0, 1), c.integer("index", 0, 2)));
  });
  t.add("aten.as_strided", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    int64_t off = c.has("storage_offset", 3) ? c.integer("storage_offset", 0, 3) : x.offset;
    c.out(0, asStrided(x, c.ints("size", 1), c.ints("stride", 2), off));
  });
}

// Scatters into slices, concatenation, stacking, splitting.
void registerJoinSplitOps(OpTable& t) {
  t.add("aten.slice_scatter", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    Tensor src = c.tensor("src", 1);
    Tensor out = clonePreserve(x);
    Tensor view = slice(out, c.integer("dim", 0, 2), c.integer("start", 0, 3),
                        c.integer("end", std::numeric_limits<int64_t>::max(), 4), c.integer("step", 1, 5));
    if (view.shape != src.shape)
      fail("slice_scatter: src {} does not fit the slice {}", src.describe(), shapeStr(view.shape));
    copyInto(view, src);
    c.out(0, out);
  });
  t.add("aten.select_scatter", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    Tensor src = c.tensor("src", 1);
    Tensor out = clonePreserve(x);
    Tensor view = select(out, c.integer("dim", 0, 2), c.integer("index", 0, 3));
    if (view.shape != src.shape)
      fail("select_scatter: src {} does not fit {}", src.describe(), shapeStr(view.shape));
    copyInto(view, src);
    c.out(0, out);
  });
  t.add("aten.cat", [](Call& c) { c.out(0, catTensors(c, c.list("tensors", 0), c.integer("dim", 0, 1))); });
  t.alias("aten.concat", "aten.cat");
  // A device transfer: the CPU reference has one memory, so a copy.
  t.add("prims.device_put", [](Call& c) {
    Tensor x = c.tensor("a", 0);
    Tensor out = c.alloc(0, x.shape, x.dtype);
    copyInto(out, x);
    c.out(0, out);
  });
  t.alias("aten.concatenate", "aten.cat");
  t.add("aten.stack", [](Call& c) {
    std::vector<RValue> items = c.list("tensors", 0);
    if (items.empty()) fail("stack: no tensors");
    for (const RValue& r : items)  // before unsqueeze makes a tensor of whatever it is given
      if (!r.isTensor()) fail("stack: list items must be tensors, got {}", r.describe());
    int64_t dim = normDim(c.integer("dim", 0, 1), items[0].t.dim() + 1);
    for (auto& r : items) r = RValue::ofTensor(unsqueeze(r.t, dim));
    c.out(0, catTensors(c, items, dim));
  });
  t.add("aten.split", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    int64_t dim = shapeDim(c.integer("dim", 0, 2), x.dim(), "split");
    const RValue& s = c.get("split_size", 1);
    std::vector<Tensor> parts;
    if (s.kind == RValue::Kind::List) {
      int64_t at = 0;
      for (int64_t n : c.ints("split_size", 1)) {
        parts.push_back(slice(x, dim, at, at + n, 1));
        at += n;
      }
    } else {
      int64_t n = c.integer("split_size", 1, 1);
      if (n <= 0) fail("split: split_size must be positive");
      for (int64_t at = 0; at < x.shape[dim] || (at == 0 && x.shape[dim] == 0); at += n) {
        parts.push_back(slice(x, dim, at, at + n, 1));
        if (x.shape[dim] == 0) break;
      }
    }
    outViews(c, parts);
  });
  t.add("aten.split_with_sizes", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    int64_t dim = shapeDim(c.integer("dim", 0, 2), x.dim(), "split_with_sizes");
    Shape sizes = c.ints("split_sizes", 1);
    int64_t total = 0;
    for (int64_t n : sizes) total += n;
    if (total != x.shape[dim])
      fail("split_with_sizes: sizes {} do not add up to {} (dim {} of {})", shapeStr(sizes), x.shape[dim], dim, x.describe());
    std::vector<Tensor> parts;
    int64_t at = 0;
    for (int64_t n : sizes) {
      parts.push_back(slice(x, dim, at, at + n, 1));
      at += n;
    }
    outViews(c, parts);
  });
  t.add("aten.chunk", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    int64_t chunks = c.integer("chunks", 1, 1);
    int64_t dim = shapeDim(c.integer("dim", 0, 2), x.dim(), "chunk");
    int64_t n = (x.shape[dim] + chunks - 1) / chunks;
    std::vector<Tensor> parts;
    for (int64_t at = 0; at < x.shape[dim]; at += n) parts.push_back(slice(x, dim, at, at + n, 1));
    outViews(c, parts);
  });
  t.add("aten.unbind", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    int64_t dim = shapeDim(c.integer("dim", 0, 1), x.dim(), "unbind");
    std::vector<Tensor> parts;
    for (int64_t i = 0; i < x.shape[dim]; ++i) parts.push_back(select(x, dim, i));
    outViews(c, parts);
  });
}

// Advanced indexing, index_put, index_select, gather and embedding.
void registerIndexingOps(OpTable& t) {
  t.add("aten.index", indexOp);
  t.alias("aten._unsafe_index", "aten.index");
  t.add("aten.index_put", [](Call& c) { indexPutOp(c, false); });
  t.alias("aten._unsafe_index_put", "aten.index_put");
  t.add("aten.index_put_", [](Call& c) { indexPutOp(c, true); });
  t.add("aten.index_select", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    int64_t dim = shapeDim(c.integer("dim", 0, 1), x.dim(), "index_select");
    Tensor idx = c.tensor("index", 2);
    std::vector<double> iv = idx.values();
    Shape shape = x.shape;
    if (x.dim() > 0) shape[dim] = static_cast<int64_t>(iv.size());
    Tensor out = c.alloc(0, shape, x.dtype);
    for (size_t i = 0; i < iv.size(); ++i) {
      int64_t k = wrapIndex(iv[i], x.dim() > 0 ? x.shape[dim] : 1, "index_select");
      if (x.dim() == 0) {
        copyInto(out, x);
      } else {
        copyInto(select(out, dim, static_cast<int64_t>(i)), select(x, dim, k));
      }
    }
    c.out(0, out);
  });
  t.add("aten.gather", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    int64_t dim = shapeDim(c.integer("dim", 0, 1), x.dim(), "gather");
    Tensor idx = c.tensor("index", 2);
    if (idx.dim() != x.dim()) fail("gather: index {} and self {} differ in rank", idx.describe(), x.describe());
    for (int64_t d = 0; d < idx.dim(); ++d)  // torch: index.size(d) <= self.size(d) for d != dim
      if (d != dim && idx.shape[d] > x.shape[d])
        fail("gather: index {} is larger than self {} in dim {}", idx.describe(), x.describe(), d);
    std::vector<double> vals;
    forEachIndex(idx.shape, [&](const Shape& ix) {
      Shape src = ix;
      src[dim] = wrapIndex(idx.get(ix), x.shape[dim], "gather");
      vals.push_back((*x.storage)[offsetOf(x, src)]);
    });
    c.out(0, tensorFromValues(c, 0, idx.shape, x.dtype, vals));
  });
  t.add("aten.embedding", [](Call& c) {
    Tensor w = c.tensor("weight", 0);
    Tensor idx = c.tensor("indices", 1);
    if (w.dim() != 2) fail("embedding: weight must be 2-D, got {}", w.describe());
    std::vector<double> iv = idx.values();
    Shape shape = idx.shape;
    shape.push_back(w.shape[1]);
    Tensor out = Tensor::empty(shape, w.dtype, kNaN);
    Tensor flat = reshape(out, {static_cast<int64_t>(iv.size()), w.shape[1]});
    if (!flat.defined() || flat.storage != out.storage) fail("internal: embedding output is not viewable");
    for (size_t i = 0; i < iv.size(); ++i) {
      if (!(iv[i] >= 0 && iv[i] < static_cast<double>(w.shape[0])))
        fail("embedding: token id {} is outside the vocabulary of {} rows", iv[i], w.shape[0]);
      const auto k = static_cast<int64_t>(iv[i]);
      copyInto(select(flat, 0, static_cast<int64_t>(i)), select(w, 0, k));
    }
    c.out(0, out);
  });
}

// Repeats, constant padding, differences, flips and rolls.
void registerRepeatPadOps(OpTable& t) {
  t.add("aten.repeat", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    Shape reps = c.ints("repeats", 1);
    if (reps.size() < x.shape.size()) fail("repeat: fewer repeats than dims");
    Tensor xs = x;
    while (xs.shape.size() < reps.size()) xs = unsqueeze(xs, 0);
    Shape shape(reps.size());
    for (size_t k = 0; k < reps.size(); ++k) shape[k] = xs.shape[k] * reps[k];
    Tensor out = Tensor::empty(shape, x.dtype, kNaN);
    // out viewed as [r0, s0, r1, s1, ...] = expand of xs.
    Shape split;
    for (size_t k = 0; k < reps.size(); ++k) {
      split.push_back(reps[k]);
      split.push_back(xs.shape[k]);
    }
    Tensor outv = reshape(out, split);
    Tensor src = xs;
    for (size_t k = 0; k < reps.size(); ++k) src = unsqueeze(src, static_cast<int64_t>(2 * k));
    if (outv.storage != out.storage) fail("internal: repeat output is not viewable");
    copyInto(outv, expand(src, split));
    c.out(0, out);
  });
  t.add("aten.repeat_interleave", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    int64_t reps = c.integer("repeats", 1, 1);
    const RValue* dv = c.find("dim", 2);
    Tensor src = x;
    int64_t dim = 0;
    if (!dv || dv->isNone()) {
      src = reshape(x, {x.numel()});
    } else {
      dim = normDim(dv->i, x.dim());
    }
    Shape shape = src.shape;
    shape[dim] *= reps;
    Tensor out = c.alloc(0, shape, x.dtype);
    for (int64_t i = 0; i < src.shape[dim]; ++i)
      for (int64_t r = 0; r < reps; ++r) copyInto(select(out, dim, i * reps + r), select(src, dim, i));
    c.out(0, out);
  });
  t.add("aten.constant_pad_nd", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    Shape pad = c.ints("pad", 1);
    double value = c.number("value", 0.0, 2);
    if (pad.size() % 2 || static_cast<int64_t>(pad.size() / 2) > x.dim()) fail("constant_pad_nd: bad pad {}", shapeStr(pad));
    Shape shape = x.shape;
    Tensor src = x;
    std::vector<std::pair<int64_t, int64_t>> place(x.dim(), {0, 0});
    for (size_t k = 0; k < pad.size() / 2; ++k) {
      int64_t d = x.dim() - 1 - static_cast<int64_t>(k);
      int64_t lo = pad[2 * k], hi = pad[2 * k + 1];
      shape[d] = x.shape[d] + lo + hi;
      if (shape[d] < 0) fail("constant_pad_nd: negative size");
      // Crop the source for negative pads.
      int64_t s0 = lo < 0 ? -lo : 0, s1 = hi < 0 ? x.shape[d] + hi : x.shape[d];
      src = slice(src, d, s0, s1, 1);
      place[d] = {lo > 0 ? lo : 0, 0};
    }
    Tensor out = c.alloc(0, shape, x.dtype);
    writeValues(out, std::vector<double>(static_cast<size_t>(out.numel()), value));
    Tensor dst = out;
    for (int64_t d = 0; d < x.dim(); ++d) dst = slice(dst, d, place[d].first, place[d].first + src.shape[d], 1);
    copyInto(dst, src);
    c.out(0, out);
  });
  t.add("aten.diff", [](Call& c) {
    // diff(self, n=1, dim=-1, prepend=None, append=None): out[i] = x[i+1] - x[i], n times.
    Tensor x = c.tensor("self", 0);
    int64_t n = c.integer("n", 1, 1);
    int64_t dim = shapeDim(c.integer("dim", -1, 2), x.dim(), "diff");
    std::vector<RValue> parts;
    if (auto p = c.optTensor("prepend", 3)) parts.push_back(RValue::ofTensor(*p));
    parts.push_back(RValue::ofTensor(x));
    if (auto a = c.optTensor("append", 4)) parts.push_back(RValue::ofTensor(*a));
    Tensor cur = x;
    if (parts.size() > 1) {
      Call tmp;
      tmp.interp = c.interp;
      cur = catTensors(tmp, parts, dim);
    }
    DType dt = cur.dtype;
    for (int64_t k = 0; k < n && cur.shape[dim] > 0; ++k) {
      int64_t len = cur.shape[dim];
      Tensor hi = slice(cur, dim, 1, len, 1), lo = slice(cur, dim, 0, len - 1, 1);
      Tensor next = Tensor::empty(hi.shape, dt, kNaN);
      mapInto<2>(next, {Operand{&hi, 0}, Operand{&lo, 0}}, dt, [dt](const std::array<double, 2>& v) {
        return dt == DType::BOOL ? ((v[0] != 0) != (v[1] != 0) ? 1.0 : 0.0) : v[0] - v[1];
      });
      cur = next;
    }
    Tensor out = c.alloc(0, cur.shape, dt);
    copyInto(out, cur);
    c.out(0, out);
  });
  t.add("aten.flip", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    Tensor v = x;
    std::set<int64_t> seen;
    for (int64_t d : c.ints("dims", 1)) {
      int64_t nd = normDim(d, x.dim());
      if (!seen.insert(nd).second) fail("flip: dim {} appears twice in dims", d);
      if (v.shape[nd] > 0) {
        v.offset += (v.shape[nd] - 1) * v.strides[nd];
        v.strides[nd] = -v.strides[nd];
      }
    }
    Tensor out = c.alloc(0, x.shape, x.dtype);
    copyInto(out, v);
    c.out(0, out);
  });
  t.add("aten.roll", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    Shape shifts = c.ints("shifts", 1);
    Shape dims = c.optInts("dims", 2).value_or(Shape{});
    Tensor src = dims.empty() ? reshape(x, {x.numel()}) : x;
    if (dims.empty()) dims = {0};
    Tensor cur = contiguous(src);
    for (size_t k = 0; k < dims.size(); ++k) {
      int64_t d = normDim(dims[k], cur.dim());
      int64_t n = cur.shape[d];
      if (n == 0) continue;
      int64_t s = ((shifts[k] % n) + n) % n;
      Tensor next = Tensor::empty(cur.shape, cur.dtype, 0.0);
      copyInto(slice(next, d, s, n, 1), slice(cur, d, 0, n - s, 1));
      copyInto(slice(next, d, 0, s, 1), slice(cur, d, n - s, n, 1));
      cur = next;
    }
    Tensor out = c.alloc(0, x.shape, x.dtype);
    copyInto(out, reshape(cur, x.shape));
    c.out(0, out);
  });
}

// Copies, dropout (inference: identity), SymInt queries and runtime asserts.
void registerCopyAndQueryOps(OpTable& t) {
  // Copies.
  t.add("aten.copy", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    Tensor out = c.alloc(0, x.shape, x.dtype);
    copyInto(out, c.tensor("src", 1));
    c.out(0, out);
  });
  t.add("aten.copy_", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    copyInto(x, c.tensor("src", 1));
    c.out(0, x);
  });
  t.add("aten.fill_", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    writeValues(x, std::vector<double>(static_cast<size_t>(x.numel()), c.number("value", 0.0, 1)));
    c.out(0, x);
  });
  // The functional forms functionalize makes of fill_ and zero_: a new tensor of self's shape.
  t.add("aten.fill", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    c.out(0, Tensor::full(x.shape, x.dtype, c.number("value", 0.0, 1)));
  });
  t.add("aten.zero", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    c.out(0, Tensor::full(x.shape, x.dtype, 0.0));
  });
  t.add("aten.zero_", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    writeValues(x, std::vector<double>(static_cast<size_t>(x.numel()), 0.0));
    c.out(0, x);
  });
  t.add("aten.dropout", [](Call& c) {
    if (c.flag("train", false, 2) && c.number("p", 0.0, 1) > 0)
      c.interp->warn((c.node ? c.node->name : c.target) + ": training-mode dropout ignored (inference semantics)");
    c.out(0, c.tensor("input", 0));
  });
  t.add("aten.native_dropout", [](Call& c) {
    Tensor x = c.tensor("input", 0);
    if (c.flag("train", false, 2) && c.number("p", 0.0, 1) > 0)
      c.interp->warn((c.node ? c.node->name : c.target) + ": training-mode dropout ignored (inference semantics)");
    c.out(0, x);
    c.out(1, Tensor::full(x.shape, DType::BOOL, 1.0));
  });
  // SymInt queries.
  t.add("aten.sym_size", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    c.out(0, RValue::ofInt(x.size(c.integer("dim", 0, 1))));
  });
  t.add("aten.size", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    c.out(0, RValue::ofInt(x.size(c.integer("dim", 0, 1))));
  });
  t.add("aten.sym_numel", [](Call& c) { c.out(0, RValue::ofInt(c.tensor("self", 0).numel())); });
  t.add("aten.numel", [](Call& c) { c.out(0, RValue::ofInt(c.tensor("self", 0).numel())); });
  t.add("aten.sym_stride", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    c.out(0, RValue::ofInt(x.strides[shapeDim(c.integer("dim", 0, 1), x.dim(), "sym_stride")]));
  });
  t.add("aten.sym_storage_offset", [](Call& c) { c.out(0, RValue::ofInt(c.tensor("self", 0).offset)); });
  t.add("aten._local_scalar_dense", [](Call& c) {
    Tensor x = c.tensor("self", 0);
    double v = x.item();
    c.out(0, category(x.dtype) == Category::Float ? RValue::ofFloat(v)
             : x.dtype == DType::BOOL               ? RValue::ofBool(v != 0)
                                                    : RValue::ofInt(asI64(v)));
  });
  t.alias("aten.item", "aten._local_scalar_dense");
  // Runtime asserts: checked against the bound sizes.
  t.add("aten._assert_tensor_metadata", [](Call& c) {
    Tensor x = c.tensor("a", 0);
    if (auto d = c.dtype("dtype"); d && *d != x.dtype)
      fail("_assert_tensor_metadata: tensor is {}, asserted dtype {}", x.describe(), ir::dtypeName(*d));
    if (auto s = c.optInts("size"); s && *s != x.shape)
      fail("_assert_tensor_metadata: tensor is {}, asserted size {}", x.describe(), shapeStr(*s));
  });
  t.add("aten._assert_scalar", [](Call& c) {
    const RValue& v = c.get("self", 0);
    if (v.isNumber() && v.number() == 0)
      fail("runtime assert failed under the symbol bindings: {}", c.str("assert_msg", "", 1));
  });
  t.add("aten._assert_async", [](Call& c) {
    const RValue& v = c.get("self", 0);
    double x = v.isTensor() ? v.t.item() : v.number();
    if (x == 0) fail("_assert_async failed: {}", c.str("assert_msg", "", 1));
  });
  t.add("aten.sym_constrain_range_for_size", [](Call& c) {
    double v = c.number("size", 0.0, 0);
    if (c.has("min") && v < c.number("min", 0.0)) fail("size {} below its constrained minimum {}", v, c.number("min", 0.0));
    if (c.has("max") && v > c.number("max", 0.0)) fail("size {} above its constrained maximum {}", v, c.number("max", 0.0));
  });
  t.alias("aten.sym_constrain_range", "aten.sym_constrain_range_for_size");
}

}  // namespace

void registerShapeOps(OpTable& t) {
  registerViewOps(t);
  registerJoinSplitOps(t);
  registerIndexingOps(t);
  registerRepeatPadOps(t);
  registerCopyAndQueryOps(t);
}

}  // namespace fxfuse::interp
