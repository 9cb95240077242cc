// Helpers shared by the op implementations (ops_*.cc): the elementwise engine, row
// gathering for reductions, BLAS matrix products, attention and the reference math of the
// norm/quant/activation ops (one implementation used by vLLM's ops, fxfuse's canonical
// ops and the fused ops, so equal compositions give equal bits).
#pragma once

#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "kernels/types.h"
#include "tools/interpreter/interpreter.h"

namespace fxfuse::interp::ops {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kFp8Max = kernels::kFp8E4m3Max;  // kernels/types.h is the home
// 1 / (448 * 512) as written in graphs; used as f32.
constexpr double kMinScale = 4.359654017857143e-06;

// ------------------------------------------------------------------ elementwise engine

// A tensor operand or a Python scalar ("wrapped number").
struct Operand {
  const Tensor* t = nullptr;
  double v = 0;
};
Operand operand(const RValue& r, const char* what);

// ------------------------------------------------------------------ integer elements

// An integer tensor's element as int64. Elements are doubles holding int64 values, but a
// graph's arithmetic can push one past int64 (an overflowing product is exact only as a
// double, a cast of 1e30 or inf to int64 keeps it): refused, never converted out of range.
int64_t asI64(double v);
// An element of an index tensor into a dimension of `size`, negative counting from the end
// as torch indexes: refused when NaN or outside [-size, size), naming `what` and the value.
int64_t wrapIndex(double v, int64_t size, const char* what);

Shape broadcastOperands(const Operand* ops, size_t n);

// out[i] = round(f(vals...), out.dtype) where each tensor operand is converted to `common`
// and each scalar to opmath(common) first (torch's TensorIterator rules). `out` must have
// the broadcast shape.
template <size_t N, typename F>
void mapInto(const Tensor& out, const std::array<Operand, N>& ops, DType common, F&& f) {
  std::array<Shape, N + 1> st;
  std::array<int64_t, N + 1> offs{};
  std::array<double, N> scalar{};
  std::array<bool, N> is_t{}, conv{};
  std::array<const double*, N> base{};
  st[0] = out.strides;
  offs[0] = out.offset;
  DType om = opmathType(common);
  for (size_t k = 0; k < N; ++k) {
    if (ops[k].t) {
      is_t[k] = true;
      st[k + 1] = broadcastStrides(*ops[k].t, out.shape);
      offs[k + 1] = ops[k].t->offset;
      base[k] = ops[k].t->base();
      conv[k] = ops[k].t->dtype != common;
    } else {
      st[k + 1] = Shape(out.shape.size(), 0);
      scalar[k] = roundTo(ops[k].v, om);
    }
  }
  std::array<const Shape*, N + 1> sp;
  for (size_t k = 0; k <= N; ++k) sp[k] = &st[k];
  double* ob = out.base();
  const DType od = out.dtype;
  stridedLoop<N + 1>(out.shape, sp, offs, [&](const std::array<int64_t, N + 1>& o) {
    std::array<double, N> x;
    for (size_t k = 0; k < N; ++k) {
      if (is_t[k]) {
        double v = base[k][o[k + 1]];
        x[k] = conv[k] ? roundTo(v, common) : v;
      } else {
        x[k] = scalar[k];
      }
    }
    ob[o[0]] = roundTo(f(x), od);
  });
}

// ------------------------------------------------------------------ rows and reductions

// Values of `x` arranged as [outer..., reduced...] with the reduced dims last, row-major:
// rows() rows of length k.
struct Rows {
  Shape outer_shape;   // shape without the reduced dims
  int64_t k = 1;       // product of the reduced dims
  std::vector<double> data;
  int64_t rows() const { return k == 0 ? 0 : static_cast<int64_t>(data.size()) / k; }
  const double* row(int64_t r) const { return data.data() + r * k; }
};
Rows gatherRows(const Tensor& x, const std::vector<int64_t>& dims);
// Normalized, deduplicated reduction dims; empty `dims` = all dims.
std::vector<int64_t> reductionDims(const Tensor& x, const std::optional<Shape>& dims);
Shape keepdimShape(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim);

// Applies f(in_row, out_row, k) along `dim` and returns a tensor of x's shape (dtype
// `out_dtype`, values rounded). Rows are in f64.
template <typename F>
Tensor applyAlongDim(const Tensor& x, int64_t dim, const Tensor& out, F&& f) {
  dim = normDim(dim, x.dim());
  Rows r = gatherRows(x, {dim});
  std::vector<double> res(r.data.size());
  for (int64_t i = 0; i < r.rows(); ++i) f(r.row(i), res.data() + i * r.k, r.k);
  // Write back: out viewed with `dim` moved last.
  Shape perm;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != dim) perm.push_back(d);
  if (x.dim() > 0) perm.push_back(dim);
  Tensor ov = x.dim() > 0 ? permute(out, perm) : out;
  size_t idx = 0;
  double* ob = ov.base();
  DType od = ov.dtype;
  stridedLoop<1>(ov.shape, {&ov.strides}, {ov.offset}, [&](const std::array<int64_t, 1>& o) {
    ob[o[0]] = roundTo(res[idx++], od);
  });
  return out;
}

// ------------------------------------------------------------------ matrix products

// C (row-major m x n, f64) = A (m x k) @ B (k x n), both 2-D strided views, via dgemm.
void gemm(const Tensor& a, const Tensor& b, double* c);
// torch.matmul semantics (1-D, 2-D, batched with broadcasting) in f64; returns the
// result shape and the row-major values.
std::pair<Shape, std::vector<double>> matmulValues(const Tensor& a, const Tensor& b);

// _scaled_mm / cutlass_scaled_mm: row-major values of round(f32(acc) * f32(sa*sb) + bias),
// per-tensor or row-wise (scale_a per row, scale_b per column) scales; FP8 outputs are
// clamped to the finite range. The caller rounds to `od`.
std::vector<double> scaledMmValues(const Tensor& a, const Tensor& b, const Tensor& sa, const Tensor& sb,
                                   const std::optional<Tensor>& bias, const std::optional<Tensor>& scale_result,
                                   DType od, const char* op);

// ------------------------------------------------------------------ attention

struct AttentionArgs {
  Tensor q, k, v;                 // [B, Hq, Sq, E], [B, Hk, Sk, E], [B, Hk, Sk, Ev]
  std::optional<Tensor> mask;     // broadcastable to [B, Hq, Sq, Sk]; bool keep-mask or additive
  bool causal = false;            // top-left aligned: query i sees keys j <= i
  std::optional<double> scale;    // default 1/sqrt(E)
  bool gqa = true;                // allow Hq a multiple of Hk
};
// Row-major f64 values of the [B, Hq, Sq, Ev] output (not rounded), and the logsumexp
// [B, Hq, Sq] (natural log).
struct AttentionResult {
  Shape shape;
  std::vector<double> out;
  std::vector<double> lse;
};
AttentionResult attention(const AttentionArgs& a);
// vLLM layout: q [T, Hq, E] (or [T, Hq*E] with the head count from `num_heads`), k/v
// [T, Hk, E]; causal over the T tokens. Returns values shaped [T, Hq, Ev].
AttentionResult attentionVllm(const Tensor& q, const Tensor& k, const Tensor& v, std::optional<double> scale,
                              int64_t num_heads_hint);

// ------------------------------------------------------------------ reference math

// RMSNorm pieces, rows over the last dim. `x` values are f32-exact.
// inv = f32(1 / sqrt(f32(f32(sum f32(x*x)) / H) + f32(eps)))
double rmsInv(const double* x, int64_t h, double eps);
// The full rms_norm of canonical-ops.md on rows of `x` (already widened to f32 values):
// n = round_N(f32(x * inv)); out = weight ? round_O(f32(n * w)) : n. Returns row-major values
// rounded to `out_dtype`.
void rmsNormRows(const Rows& x, const std::optional<Tensor>& weight, double eps, DType norm_dtype, DType out_dtype,
                 std::vector<double>& out);
// The TRT-LLM variant: round_O(f32(f32(x * inv) * w)) (single rounding).
void rmsNormRowsSingleRounding(const Rows& x, const std::optional<Tensor>& weight, double eps, DType out_dtype,
                               std::vector<double>& out);

// FP8 quantization of f32-exact values with scale s: fp8(clamp(divide ? x/s : x*f32(1/s), ±max)).
double quantOne(double x, double s, bool divide, DType fp8 = DType::F8E4M3FN);
double quantOneRecip(double x, double inv_s, DType fp8 = DType::F8E4M3FN);  // inv_s precomputed
// Dynamic scale: s = max(f32(max(a, min_abs) / fp8max), min_scale) with optional ue8m0.
double dynamicScale(double absmax, double fp8_max, double min_abs, double min_scale, bool ue8m0);

struct QuantSpec {
  std::string kind = "static_tensor";  // static_tensor | dynamic_token | dynamic_tensor | dynamic_group
  int64_t group_size = 0;
  bool column_major = false;
  std::optional<double> scale_ub;
  bool divide = false;
  double min_abs = 0.0;
  double min_scale = kMinScale;
  bool ue8m0 = false;
  std::optional<double> static_scale;
  DType fp8 = DType::F8E4M3FN;
  double fp8_max = 0;  // 0: the dtype's largest finite value (448 for e4m3fn)
};
// Quantizes `values` (row-major, shape `shape`, f32-exact) per spec. Returns q values and
// the scale tensor values with its shape (per-token: [..., 1]; per-tensor: [1];
// group: [..., H/g]).
struct QuantResult {
  std::vector<double> q;
  std::vector<double> scales;
  Shape scale_shape;
};
QuantResult quantize(const std::vector<double>& values, const Shape& shape, const QuantSpec& spec);

// silu(g) * u with the canonical rounding points: h = round_G(f32(g / f32(1 + f32(exp(-g)))));
// out = f32(h * u) (caller rounds).
double siluF32(double g);

// Tensor from row-major values, rounded to `dtype`, written into `out` (any strides).
void writeValues(const Tensor& out, const std::vector<double>& values);
Tensor tensorFromValues(Call& c, size_t out_index, const Shape& shape, DType dtype, const std::vector<double>& values);

// Widen to f32-exact values (row-major).
std::vector<double> valuesF32(const Tensor& t);

// Simulated all-reduce: world_size copies summed in f32, rounded to the dtype.
Tensor allReduceSim(const Tensor& x, int world_size);

}  // namespace fxfuse::interp::ops
