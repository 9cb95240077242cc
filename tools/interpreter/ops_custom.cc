// vLLM custom ops (`_C.*`, `vllm.*`), collectives, and fxfuse's canonical and fused ops
// (docs/canonical-ops.md). vLLM's mutating ops write into their `Tensor!` arguments
// through the arguments' strides (defunctionalized calls mutate graph values in place;
// auto_functionalized passes clones).
//
// All of them share the reference math of ops_common (rmsNormRows, quantize, siluF32,
// attention), so a fused op and the chain it replaced give identical bits when they round
// at the same points.
#include <cmath>

#include "tools/interpreter/lockstep.h"
#include "tools/interpreter/ops_common.h"

namespace fxfuse::interp {
namespace {

using namespace ops;

bool is16(DType t) { return t == DType::BF16 || t == DType::F16; }

// Rows over the last dim, widened to f32 values.
Rows rowsF32(const Tensor& x) {
  if (x.dim() == 0) fail("expected at least one dimension, got {}", x.describe());
  Rows r = gatherRows(x, {x.dim() - 1});
  if (x.dtype == DType::F64)
    for (double& v : r.data) v = roundF32(v);
  return r;
}

Rows rowsFromValues(std::vector<double> v, const Shape& shape) {
  Rows r;
  r.k = shape.empty() ? 1 : shape.back();
  r.outer_shape.assign(shape.begin(), shape.end() - (shape.empty() ? 0 : 1));
  r.data = std::move(v);
  return r;
}

void checkWeight(const std::optional<Tensor>& w, int64_t h) {
  if (w && w->numel() != h) fail("weight {} does not match the hidden size {}", w->describe(), h);
}

// s = f32(input) + f32(residual), rounded to f32.
std::vector<double> addF32(const Tensor& input, const Tensor& residual) {
  if (input.shape != residual.shape)
    fail("input {} and residual {} must have the same shape", input.describe(), residual.describe());
  std::vector<double> a = input.values(), b = residual.values();
  for (size_t i = 0; i < a.size(); ++i) a[i] = roundF32(roundF32(a[i]) + roundF32(b[i]));
  return a;
}

std::vector<double> roundAll(std::vector<double> v, DType t) {
  for (double& x : v) x = roundTo(x, t);
  return v;
}

// Writes `values` (row-major, the tensor's logical shape) into a mutable argument.
void writeInto(const Tensor& dst, const std::vector<double>& values, const char* what) {
  if (static_cast<int64_t>(values.size()) != dst.numel())
    fail("{} {} cannot hold {} values", what, dst.describe(), values.size());
  writeValues(dst, values);
}

// Static quant with a scale broadcastable to the input (per-tensor, per-channel, ...):
// fp8(clamp(divide ? x / s : x * f32(1 / s))).
std::vector<double> staticQuantBroadcast(const std::vector<double>& x, const Shape& shape, const Tensor& scale, DType fp8,
                                         bool divide) {
  Shape bs = broadcastShapes(shape, scale.shape);
  if (bs != shape) fail("scale {} does not broadcast to the input {}", scale.describe(), shapeStr(shape));
  std::vector<double> sv = expand(scale, shape).values(), out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = quantOne(x[i], sv[i], divide, fp8);
  return out;
}

QuantSpec staticSpec(const Tensor& scale, DType fp8, bool divide = false) {
  if (scale.numel() != 1) fail("static per-tensor quant needs a one-element scale, got {}", scale.describe());
  QuantSpec s;
  s.kind = "static_tensor";
  s.static_scale = scale.item();
  s.fp8 = fp8;
  s.divide = divide;
  return s;
}

// Quant arguments of the canonical/fused ops (names as in ir/op_schema.cc).
QuantSpec canonicalSpec(const Call& c, DType fp8) {
  QuantSpec s;
  s.kind = c.str("kind", "static_tensor");
  s.group_size = c.integer("group_size", 0);
  s.column_major = c.flag("column_major_scales", false);
  if (auto ub = c.optTensor("scale_ub")) s.scale_ub = ub->item();
  s.divide = c.flag("divide", false);
  s.min_abs = c.number("min_abs", 0.0);
  s.min_scale = c.number("min_scale", kMinScale);
  s.ue8m0 = c.flag("scale_ue8m0", false);
  s.fp8 = fp8;
  if (s.kind == "static_tensor") {
    auto sc = c.optTensor("scale");
    if (!sc) fail("kind='static_tensor' needs a scale");
    if (sc->numel() == 1) s.static_scale = sc->item();
  }
  return s;
}

// quantize(), or the broadcast static form when the static scale has several elements.
QuantResult quantizeCanonical(const Call& c, const std::vector<double>& v, const Shape& shape, const QuantSpec& s) {
  if (s.kind == "static_tensor" && !s.static_scale) {
    QuantResult r;
    r.q = staticQuantBroadcast(v, shape, *c.optTensor("scale"), s.fp8, s.divide);
    return r;
  }
  return quantize(v, shape, s);
}

// Scale output tensor of a quant: column-major storage when asked.
Tensor scaleTensor(Call& c, size_t i, const QuantResult& q, bool column_major) {
  if (column_major && q.scale_shape.size() >= 2) {
    Shape st = contiguousStrides(q.scale_shape);
    size_t n = q.scale_shape.size();
    // Transposed storage of the last two dims.
    st[n - 2] = 1;
    st[n - 1] = q.scale_shape[n - 2];
    int64_t inner = q.scale_shape[n - 2] * q.scale_shape[n - 1];
    for (size_t k = n - 2; k-- > 0;) {
      st[k] = inner;
      inner *= q.scale_shape[k];
    }
    Tensor t = Tensor::emptyStrided(q.scale_shape, st, DType::F32, kNaN);
    writeValues(t, q.scales);
    return t;
  }
  return tensorFromValues(c, i, q.scale_shape, DType::F32, q.scales);
}

// ------------------------------------------------------------------ canonical math

// fxfuse.rms_norm: returns values rounded to `out_dtype`.
std::vector<double> rmsNorm(const Tensor& input, const std::optional<Tensor>& w, double eps, DType norm_dtype,
                            DType out_dtype) {
  Rows r = rowsF32(input);
  checkWeight(w, r.k);
  std::vector<double> out;
  rmsNormRows(r, w, eps, norm_dtype, out_dtype, out);
  return out;
}

struct FusedAddResult {
  std::vector<double> out, residual;
};

FusedAddResult fusedAddRmsNorm(const Tensor& input, const Tensor& residual, const std::optional<Tensor>& w, double eps,
                               bool rounded, DType resid_dtype, DType norm_dtype, DType out_dtype) {
  FusedAddResult r;
  std::vector<double> s = addF32(input, residual);
  r.residual = roundAll(s, resid_dtype);
  Rows v = rowsFromValues(rounded ? r.residual : s, input.shape);
  if (rounded && resid_dtype == DType::F64)
    for (double& x : v.data) x = roundF32(x);
  checkWeight(w, v.k);
  rmsNormRows(v, w, eps, norm_dtype, out_dtype, r.out);
  return r;
}

std::optional<double> optScaleArg(const Call& c) {
  const RValue* s = c.find("scale");
  if (!s || s->isNone()) return std::nullopt;
  return s->number();
}

Tensor shapedLike(Call& c, size_t i, const Shape& computed, DType dt, const std::vector<double>& v) {
  // The canonical op's output type decides the shape (e.g. [T, H*E] for [T, H, E] values).
  if (i < c.out_values.size() && c.out_values[i] && c.out_values[i]->isTensor()) {
    Shape rec = c.interp->evalShape(c.out_values[i]->type.shape, "output");
    int64_t n = 1;
    for (int64_t s : rec) n *= s;
    if (rec != computed && n == static_cast<int64_t>(v.size())) return tensorFromValues(c, i, rec, dt, v);
  }
  return tensorFromValues(c, i, computed, dt, v);
}

AttentionResult canonicalAttention(const Call& c, int64_t heads_hint) {
  std::string layout = c.str("layout", "bhsd");
  Tensor q = c.tensor("query"), k = c.tensor("key"), v = c.tensor("value");
  if (layout == "vllm") return attentionVllm(q, k, v, optScaleArg(c), heads_hint);
  if (layout != "bhsd") fail("unknown attention layout '{}'", layout);
  AttentionArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.mask = c.optTensor("attn_mask");
  a.causal = c.flag("is_causal", false);
  a.scale = optScaleArg(c);
  a.gqa = c.flag("enable_gqa", false);
  return attention(a);
}

int64_t headsFromOutput(const Call& c, size_t i) {
  if (i < c.out_values.size() && c.out_values[i] && c.out_values[i]->isTensor() && c.out_values[i]->type.rank() == 3) {
    auto h = c.out_values[i]->type.shape[1].evaluate(c.interp->bindings());
    if (h) return *h;
  }
  return 0;
}

// Simulated all-reduce of the vLLM/c10d/fxfuse collectives.
int worldSize(const Call& c) { return c.interp->options().world_size; }

// all_reduce(sum) of this rank's `x`: the ranks' own values in a lockstep run (lockstep.h),
// else the single-rank simulation (world_size copies of `x`).
Tensor allReduceOf(const Call& c, const Tensor& x) {
  const Options& o = c.interp->options();
  if (o.collective) return o.collective->allReduceSum(o.rank, x, c.node ? c.node->name : c.target);
  return allReduceSim(x, worldSize(c));
}

// ------------------------------------------------------------------ rotary embedding

void rotary(const Tensor& positions, const Tensor& x, int64_t head_size, const Tensor& cache, bool neox) {
  std::vector<double> pos = positions.values();
  int64_t T = static_cast<int64_t>(pos.size());
  if (head_size <= 0) fail("rotary_embedding: head_size {} must be positive", head_size);
  if (cache.shape.size() != 2 || cache.shape[1] % 2 != 0)
    fail("rotary_embedding: cos_sin_cache {} must be [positions, rotary_dim] with an even rotary_dim", cache.describe());
  if (T == 0) return;
  if (x.numel() % (T * head_size) != 0)
    fail("rotary_embedding: {} is not [tokens={}, heads, head_size={}]", x.describe(), T, head_size);
  int64_t heads = x.numel() / (T * head_size);
  Tensor xv = reshape(x, {T, heads, head_size});
  if (xv.storage != x.storage) fail("rotary_embedding: query/key {} must be viewable as [T, H, D]", x.describe());
  int64_t rot = cache.shape[1], half = rot / 2;
  if (rot > head_size) fail("rotary_embedding: rotary dim {} exceeds head size {}", rot, head_size);
  DType dt = x.dtype;
  double* b = x.base();
  for (int64_t t = 0; t < T; ++t) {
    if (!(pos[t] >= 0 && pos[t] < static_cast<double>(cache.shape[0])))
      fail("rotary_embedding: position {} outside the cos/sin cache of {} rows", pos[t], cache.shape[0]);
    const auto p = static_cast<int64_t>(pos[t]);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        double cs = roundTo(cache.get({p, i}), dt), sn = roundTo(cache.get({p, half + i}), dt);
        int64_t i1 = neox ? i : 2 * i, i2 = neox ? i + half : 2 * i + 1;
        int64_t o1 = xv.offset + t * xv.strides[0] + h * xv.strides[1] + i1 * xv.strides[2];
        int64_t o2 = xv.offset + t * xv.strides[0] + h * xv.strides[1] + i2 * xv.strides[2];
        double x1 = b[o1], x2 = b[o2];
        b[o1] = roundTo(roundTo(x1 * cs, dt) - roundTo(x2 * sn, dt), dt);
        b[o2] = roundTo(roundTo(x2 * cs, dt) + roundTo(x1 * sn, dt), dt);
      }
    }
  }
}

}  // namespace

// ===================================================================================== vLLM

namespace {

// vLLM's norm, quant, activation, rotary and GEMM custom ops (_C.*).
void registerVllmNormQuantOps(OpTable& t) {
  t.add("_C.rms_norm", [](Call& c) {
    Tensor result = c.tensor("result", 0), input = c.tensor("input", 1);
    std::optional<Tensor> w = c.optTensor("weight", 2);
    double eps = c.number("epsilon", 1e-6, 3);
    writeInto(result, rmsNorm(input, w, eps, input.dtype, result.dtype), "result");
  });
  t.add("_C.fused_add_rms_norm", [](Call& c) {
    Tensor input = c.tensor("input", 0), residual = c.tensor("residual", 1);
    std::optional<Tensor> w = c.optTensor("weight", 2);
    double eps = c.number("epsilon", 1e-6, 3);
    FusedAddResult r = fusedAddRmsNorm(input, residual, w, eps, true, residual.dtype, input.dtype, input.dtype);
    writeInto(residual, r.residual, "residual");
    writeInto(input, r.out, "input");
  });
  t.add("_C.static_scaled_fp8_quant", [](Call& c) {
    Tensor result = c.tensor("result", 0), input = c.tensor("input", 1), scale = c.tensor("scale", 2);
    std::vector<double> x = valuesF32(input);
    if (scale.numel() == 1) {
      writeInto(result, quantize(x, input.shape, staticSpec(scale, result.dtype)).q, "result");
      return;
    }
    // Per-channel static scale (later vLLM): broadcast against the input.
    writeInto(result, staticQuantBroadcast(x, input.shape, scale, result.dtype, false), "result");
  });
  t.add("_C.dynamic_scaled_fp8_quant", [](Call& c) {
    Tensor result = c.tensor("result", 0), input = c.tensor("input", 1), scale = c.tensor("scale", 2);
    QuantSpec s;
    s.kind = "dynamic_tensor";
    s.min_scale = 0;  // the kernel has no floor
    s.fp8 = result.dtype;
    QuantResult q = quantize(valuesF32(input), input.shape, s);
    writeInto(result, q.q, "result");
    writeInto(scale, q.scales, "scale");
  });
  t.add("_C.dynamic_per_token_scaled_fp8_quant", [](Call& c) {
    Tensor result = c.tensor("result", 0), input = c.tensor("input", 1), scale = c.tensor("scale", 2);
    QuantSpec s;
    s.kind = "dynamic_token";
    s.divide = true;  // the kernel divides
    s.fp8 = result.dtype;
    if (auto ub = c.optTensor("scale_ub", 3)) s.scale_ub = ub->item();
    QuantResult q = quantize(valuesF32(input), input.shape, s);
    writeInto(result, q.q, "result");
    writeInto(scale, q.scales, "scale");
  });
  t.add("_C.per_token_group_fp8_quant", [](Call& c) {
    Tensor input = c.tensor("input", 0), oq = c.tensor("output_q", 1), os = c.tensor("output_s", 2);
    QuantSpec s;
    s.kind = "dynamic_group";
    s.group_size = c.integer("group_size", 128, 3);
    s.min_abs = c.number("eps", 1e-10, 4);
    s.min_scale = 0;
    s.fp8_max = c.number("fp8_max", kFp8Max, 6);
    s.ue8m0 = c.flag("scale_ue8m0", false, 7);
    s.divide = true;
    s.fp8 = oq.dtype;
    QuantResult q = quantize(valuesF32(input), input.shape, s);
    writeInto(oq, q.q, "output_q");
    writeInto(os, q.scales, "output_s");
  });
  t.add("_C.silu_and_mul", [](Call& c) {
    Tensor result = c.tensor("result", 0), input = c.tensor("input", 1);
    int64_t d = input.shape.back() / 2;
    Tensor g = slice(input, -1, 0, d, 1), u = slice(input, -1, d, 2 * d, 1);
    std::vector<double> gv = valuesF32(g), uv = valuesF32(u);
    for (size_t i = 0; i < gv.size(); ++i) gv[i] = roundF32(roundTo(siluF32(gv[i]), input.dtype) * uv[i]);
    writeInto(result, gv, "result");
  });
  t.add("_C.rms_norm_static_fp8_quant", [](Call& c) {
    Tensor result = c.tensor("result", 0), input = c.tensor("input", 1), w = c.tensor("weight", 2);
    Tensor scale = c.tensor("scale", 3);
    double eps = c.number("epsilon", 1e-6, 4);
    std::vector<double> n = rmsNorm(input, w, eps, input.dtype, input.dtype);
    writeInto(result, quantize(n, input.shape, staticSpec(scale, result.dtype)).q, "result");
  });
  t.add("_C.fused_add_rms_norm_static_fp8_quant", [](Call& c) {
    Tensor result = c.tensor("result", 0), input = c.tensor("input", 1), residual = c.tensor("residual", 2);
    Tensor w = c.tensor("weight", 3), scale = c.tensor("scale", 4);
    double eps = c.number("epsilon", 1e-6, 5);
    FusedAddResult r = fusedAddRmsNorm(input, residual, w, eps, true, residual.dtype, input.dtype, input.dtype);
    writeInto(residual, r.residual, "residual");
    writeInto(result, quantize(r.out, input.shape, staticSpec(scale, result.dtype)).q, "result");
  });
  t.add("_C.rms_norm_dynamic_per_token_quant", [](Call& c) {
    Tensor result = c.tensor("result", 0), input = c.tensor("input", 1), w = c.tensor("weight", 2);
    Tensor scale = c.tensor("scale", 3);
    double eps = c.number("epsilon", 1e-6, 4);
    std::optional<Tensor> ub = c.optTensor("scale_ub", 5), residual = c.optTensor("residual", 6);
    std::vector<double> n;
    if (residual) {
      // Variance of the unrounded f32 sum (like native), residual written rounded.
      FusedAddResult r = fusedAddRmsNorm(input, *residual, w, eps, false, residual->dtype, input.dtype, input.dtype);
      writeInto(*residual, r.residual, "residual");
      n = std::move(r.out);
    } else {
      n = rmsNorm(input, w, eps, input.dtype, input.dtype);
    }
    QuantSpec s;
    s.kind = "dynamic_token";
    s.divide = true;
    s.fp8 = result.dtype;
    if (ub) s.scale_ub = ub->item();
    QuantResult q = quantize(n, input.shape, s);
    writeInto(result, q.q, "result");
    writeInto(scale, q.scales, "scale");
  });
  t.add("_C.silu_and_mul_quant", [](Call& c) {
    Tensor result = c.tensor("result", 0), input = c.tensor("input", 1), scale = c.tensor("scale", 2);
    int64_t d = input.shape.back() / 2;
    Tensor g = slice(input, -1, 0, d, 1), u = slice(input, -1, d, 2 * d, 1);
    std::vector<double> gv = valuesF32(g), uv = valuesF32(u);
    for (size_t i = 0; i < gv.size(); ++i)
      gv[i] = roundTo(roundF32(roundTo(siluF32(gv[i]), input.dtype) * uv[i]), input.dtype);
    Shape hs = input.shape;
    hs.back() = d;
    writeInto(result, quantize(gv, hs, staticSpec(scale, result.dtype)).q, "result");
  });
  t.add("_C.rotary_embedding", [](Call& c) {
    Tensor pos = c.tensor("positions", 0), q = c.tensor("query", 1);
    std::optional<Tensor> k = c.optTensor("key", 2);
    int64_t hs = c.integer("head_size", 0, 3);
    Tensor cache = c.tensor("cos_sin_cache", 4);
    bool neox = c.flag("is_neox", true, 5);
    rotary(pos, q, hs, cache, neox);
    if (k) rotary(pos, *k, hs, cache, neox);
  });
  t.add("_C.cutlass_scaled_mm", [](Call& c) {
    Tensor out = c.tensor("out", 0), a = c.tensor("a", 1), b = c.tensor("b", 2);
    std::vector<double> v = scaledMmValues(a, b, c.tensor("a_scales", 3), c.tensor("b_scales", 4), c.optTensor("bias", 5),
                                           std::nullopt, out.dtype, "cutlass_scaled_mm");
    writeInto(out, v, "out");
  });
}

// vLLM's attention and collective ops, and the FlashInfer fused all-reduce + norm.
void registerVllmAttentionCollectiveOps(OpTable& t) {
  // Attention (single prefill sequence, empty KV cache: causal over the T tokens).
  t.add("vllm.unified_attention", [](Call& c) {
    Tensor q = c.tensor("query", 0);
    AttentionResult r = attentionVllm(q, c.tensor("key", 1), c.tensor("value", 2), std::nullopt, headsFromOutput(c, 0));
    c.out(0, shapedLike(c, 0, r.shape, c.outDType(0, q.dtype), r.out));
  });
  t.add("vllm.unified_attention_with_output", [](Call& c) {
    Tensor q = c.tensor("query", 0), out = c.tensor("output", 3);
    int64_t heads = out.dim() == 3 ? out.shape[1] : 0;
    AttentionResult r = attentionVllm(q, c.tensor("key", 1), c.tensor("value", 2), std::nullopt, heads);
    if (auto os = c.optTensor("output_scale", 5)) {
      // The kernel epilogue: fp8(clamp(acc * (1/output_scale))) without a D16 rounding.
      std::vector<double> v = r.out;
      for (double& x : v) x = roundF32(x);
      writeInto(out, quantize(v, r.shape, staticSpec(*os, out.dtype)).q, "output");
    } else {
      writeInto(out, r.out, "output");
    }
  });
  // Collectives: world_size ranks holding the same partial tensor, summed in f32.
  t.add("vllm.all_reduce", [](Call& c) { c.out(0, allReduceOf(c, c.tensor("tensor", 0))); });
  t.add("_c10d_functional.all_reduce", [](Call& c) {
    std::string op = c.str("reduce_op", "sum", 1);
    Tensor x = c.tensor("input", 0);
    if (op == "sum") {
      c.out(0, allReduceOf(c, x));
    } else if (op == "avg" || op == "max" || op == "min") {
      c.out(0, clonePreserve(x));
    } else {
      fail("all_reduce: reduce_op '{}' is not supported", op);
    }
  });
  t.add("_c10d_functional.all_reduce_", [](Call& c) {
    Tensor x = c.tensor("input", 0);
    copyInto(x, allReduceOf(c, x));
    c.out(0, x);
  });
  t.add("_c10d_functional.wait_tensor", [](Call& c) { c.out(0, c.tensor("tensor", 0)); });
  auto gather = [](Call& c, const Tensor& x, int64_t dim, int64_t n) {
    if (c.interp->options().collective) fail("{}: all_gather is not supported in a lockstep (multi-rank) run", c.target);
    Shape s = x.shape;
    dim = shapeDim(dim, x.dim(), "all_gather");
    s[dim] *= n;
    Tensor out = c.alloc(0, s, x.dtype);
    for (int64_t r = 0; r < n; ++r) copyInto(slice(out, dim, r * x.shape[dim], (r + 1) * x.shape[dim], 1), x);
    c.out(0, out);
  };
  auto scatter = [](Call& c, const Tensor& x, int64_t dim, int64_t n) {
    if (c.interp->options().collective) fail("{}: reduce_scatter is not supported in a lockstep (multi-rank) run", c.target);
    dim = shapeDim(dim, x.dim(), "reduce_scatter");
    if (x.shape[dim] % n) fail("reduce_scatter: dim {} of {} is not divisible by {}", dim, x.describe(), n);
    Tensor sum = allReduceSim(x, static_cast<int>(n));
    Tensor part = slice(sum, dim, 0, x.shape[dim] / n, 1);
    Tensor out = c.alloc(0, part.shape, x.dtype);
    copyInto(out, part);
    c.out(0, out);
  };
  t.add("_c10d_functional.all_gather_into_tensor", [gather](Call& c) {
    Tensor x = c.tensor("input", 0);
    gather(c, x, 0, c.integer("group_size", worldSize(c), 1));
  });
  t.add("_c10d_functional.reduce_scatter_tensor", [scatter](Call& c) {
    Tensor x = c.tensor("input", 0);
    scatter(c, x, 0, c.integer("group_size", worldSize(c), 2));
  });
  t.add("vllm.all_gather", [gather](Call& c) {
    Tensor x = c.tensor("tensor", 0);
    gather(c, x, c.integer("dim", 0, 1), c.integer("world_size", worldSize(c), 2));
  });
  t.add("vllm.reduce_scatter", [scatter](Call& c) {
    Tensor x = c.tensor("tensor", 0);
    scatter(c, x, c.integer("dim", 0, 1), c.integer("world_size", worldSize(c), 2));
  });
  // FlashInfer/TRT-LLM fused all-reduce + residual + RMSNorm (+ FP8 quant), §5.5:
  // a = round16(sum of ranks), z = round16(a + residual), n = round16(f32(z) * inv * f32(gamma)).
  t.add("vllm.flashinfer_trtllm_fused_allreduce_norm", [](Call& c) {
    Tensor ar = c.tensor("allreduce_in"), residual = c.tensor("residual"), gamma = c.tensor("rms_gamma");
    double eps = c.number("rms_eps", 1e-6);
    int ws = static_cast<int>(c.integer("world_size", worldSize(c)));
    Tensor a = c.interp->options().collective ? allReduceOf(c, ar) : allReduceSim(ar, ws);
    std::vector<double> z = roundAll(addF32(a, residual), residual.dtype);
    Rows zr = rowsFromValues(z, ar.shape);
    std::vector<double> n;
    rmsNormRowsSingleRounding(zr, gamma, eps, ar.dtype, n);
    int64_t pattern = c.integer("pattern_code", 1);
    std::optional<Tensor> norm_out = c.optTensor("norm_out"), quant_out = c.optTensor("quant_out");
    writeInto(residual, z, "residual");
    if (pattern == 2 || quant_out) {
      if (!quant_out) fail("FP8 pattern without quant_out");
      auto sf = c.optTensor("scale_factor");
      if (!sf) fail("FP8 pattern without scale_factor");
      writeInto(*quant_out, quantize(n, ar.shape, staticSpec(*sf, quant_out->dtype)).q, "quant_out");
    }
    if (norm_out) {
      writeInto(*norm_out, n, "norm_out");
    } else if (!quant_out) {
      writeInto(ar, n, "allreduce_in");
    }
  });
}

}  // namespace

void registerVllmOps(OpTable& t) {
  registerVllmNormQuantOps(t);
  registerVllmAttentionCollectiveOps(t);
}

// ===================================================================================== fxfuse

namespace {

// The canonical ops the passes lift every spelling into.
void registerFxfuseCanonicalOps(OpTable& t) {
  t.add("fxfuse.rms_norm", [](Call& c) {
    Tensor x = c.tensor("input");
    std::optional<Tensor> w = c.optTensor("weight");
    DType n = c.dtype("norm_dtype").value_or(x.dtype);
    DType o = c.outDType(0, w ? promoteTypes(n, w->dtype) : n);
    c.out(0, tensorFromValues(c, 0, x.shape, o, rmsNorm(x, w, c.number("epsilon"), n, o)));
  });
  t.add("fxfuse.fused_add_rms_norm", [](Call& c) {
    Tensor x = c.tensor("input"), r = c.tensor("residual");
    std::optional<Tensor> w = c.optTensor("weight");
    bool rounded = c.flag("variance_of_rounded_sum", false);
    DType n = c.dtype("norm_dtype").value_or(r.dtype);
    DType rd = c.outDType(1, r.dtype);
    DType o = c.outDType(0, w ? promoteTypes(n, w->dtype) : n);
    FusedAddResult res = fusedAddRmsNorm(x, r, w, c.number("epsilon"), rounded, rd, n, o);
    c.out(0, tensorFromValues(c, 0, x.shape, o, res.out));
    c.out(1, tensorFromValues(c, 1, x.shape, rd, res.residual));
  });
  t.add("fxfuse.quant_fp8", [](Call& c) {
    Tensor x = c.tensor("input");
    DType q8 = c.outDType(0, DType::F8E4M3FN);
    QuantSpec s = canonicalSpec(c, q8);
    QuantResult q = quantizeCanonical(c, valuesF32(x), x.shape, s);
    c.out(0, tensorFromValues(c, 0, x.shape, q8, q.q));
    if (s.kind == "static_tensor") {
      if (c.numOutputs() > 1 && c.out_values.size() > 1 && c.out_values[1]) c.out(1, c.tensor("scale"));
    } else {
      c.out(1, scaleTensor(c, 1, q, s.column_major));
    }
  });
  t.add("fxfuse.silu_and_mul", [](Call& c) {
    Tensor x = c.tensor("input");
    std::optional<Tensor> up = c.optTensor("up");
    Tensor g = x, u;
    if (up) {
      u = *up;
      if (u.shape != g.shape) fail("silu_and_mul: gate {} and up {} differ", g.describe(), u.describe());
    } else {
      int64_t d = x.shape.back() / 2;
      if (x.shape.back() % 2) fail("silu_and_mul: last dim of {} is odd", x.describe());
      g = slice(x, -1, 0, d, 1);
      u = slice(x, -1, d, 2 * d, 1);
    }
    DType o = c.outDType(0, promoteTypes(g.dtype, u.dtype));
    std::vector<double> gv = valuesF32(g), uv = valuesF32(u);
    for (size_t i = 0; i < gv.size(); ++i) gv[i] = roundF32(roundTo(siluF32(gv[i]), g.dtype) * uv[i]);
    c.out(0, tensorFromValues(c, 0, g.shape, o, gv));
  });
  t.add("fxfuse.attention", [](Call& c) {
    AttentionResult r = canonicalAttention(c, headsFromOutput(c, 0));
    c.out(0, shapedLike(c, 0, r.shape, c.outDType(0, c.tensor("query").dtype), r.out));
  });
  t.add("fxfuse.all_reduce", [](Call& c) {
    std::string op = c.str("reduce_op", "sum");
    if (op != "sum") fail("fxfuse.all_reduce: reduce_op '{}' is not supported", op);
    c.out(0, allReduceOf(c, c.tensor("input")));
  });
}

// The fused ops the fusion passes produce (docs/canonical-ops.md).
void registerFxfuseFusedOps(OpTable& t) {
  // ------------------------------------------------------------------ fused
  t.add("fxfuse.rms_norm_quant", [](Call& c) {
    Tensor x = c.tensor("input");
    std::optional<Tensor> w = c.optTensor("weight");
    DType n = c.dtype("norm_dtype").value_or(x.dtype);
    DType nd = is16(x.dtype) ? x.dtype : n;  // docs/canonical-ops.md: the normed value's dtype
    DType q8 = c.outDType(0, DType::F8E4M3FN);
    std::vector<double> v = rmsNorm(x, w, c.number("epsilon"), n, nd);
    QuantSpec s = canonicalSpec(c, q8);
    QuantResult q = quantizeCanonical(c, v, x.shape, s);
    c.out(0, tensorFromValues(c, 0, x.shape, q8, q.q));
    if (s.kind == "static_tensor") {
      if (c.out_values.size() > 1 && c.out_values[1]) c.out(1, c.tensor("scale"));
    } else {
      c.out(1, scaleTensor(c, 1, q, s.column_major));
    }
  });
  t.add("fxfuse.fused_add_rms_norm_quant", [](Call& c) {
    Tensor x = c.tensor("input"), r = c.tensor("residual");
    std::optional<Tensor> w = c.optTensor("weight");
    bool rounded = c.flag("variance_of_rounded_sum", true);
    DType n = c.dtype("norm_dtype").value_or(r.dtype);
    DType rd = c.outDType(1, r.dtype);
    DType q8 = c.outDType(0, DType::F8E4M3FN);
    FusedAddResult res = fusedAddRmsNorm(x, r, w, c.number("epsilon"), rounded, rd, n, n);
    QuantSpec s = canonicalSpec(c, q8);
    QuantResult q = quantizeCanonical(c, res.out, x.shape, s);
    c.out(0, tensorFromValues(c, 0, x.shape, q8, q.q));
    c.out(1, tensorFromValues(c, 1, x.shape, rd, res.residual));
    if (s.kind == "static_tensor") {
      if (c.out_values.size() > 2 && c.out_values[2]) c.out(2, c.tensor("scale"));
    } else {
      c.out(2, scaleTensor(c, 2, q, s.column_major));
    }
  });
  t.add("fxfuse.silu_and_mul_quant", [](Call& c) {
    Tensor x = c.tensor("input"), scale = c.tensor("scale");
    std::optional<Tensor> up = c.optTensor("up");
    Tensor g = x, u;
    if (up) {
      u = *up;
    } else {
      int64_t d = x.shape.back() / 2;
      g = slice(x, -1, 0, d, 1);
      u = slice(x, -1, d, 2 * d, 1);
    }
    DType hd = promoteTypes(g.dtype, u.dtype);
    std::vector<double> gv = valuesF32(g), uv = valuesF32(u);
    for (size_t i = 0; i < gv.size(); ++i) gv[i] = roundTo(roundF32(roundTo(siluF32(gv[i]), g.dtype) * uv[i]), hd);
    DType q8 = c.outDType(0, DType::F8E4M3FN);
    c.out(0, tensorFromValues(c, 0, g.shape, q8, quantize(gv, g.shape, staticSpec(scale, q8)).q));
  });
  t.add("fxfuse.attention_quant", [](Call& c) {
    Tensor q = c.tensor("query"), os = c.tensor("output_scale");
    AttentionResult r = canonicalAttention(c, headsFromOutput(c, 0));
    DType q8 = c.outDType(0, DType::F8E4M3FN);
    std::vector<double> v = r.out;
    // Canonical: the attention output rounded to the model dtype first (the unfused chain);
    // NumericsOptions::attention_quant_skips_rounding follows vLLM's Triton epilogue.
    DType mid = c.interp->options().numerics.attention_quant_skips_rounding ? DType::F32 : q.dtype;
    for (double& x : v) x = roundTo(x, mid);
    c.out(0, shapedLike(c, 0, r.shape, q8, quantize(v, r.shape, staticSpec(os, q8)).q));
  });
  auto allReduceNorm = [](Call& c, bool quant) {
    Tensor x = c.tensor("input");
    std::optional<Tensor> residual = c.optTensor("residual"), w = c.optTensor("weight");
    double eps = c.number("epsilon");
    bool rounded = c.flag("variance_of_rounded_sum", false);
    const NumericsOptions& num = c.interp->options().numerics;
    Tensor a = allReduceOf(c, x);
    DType n = c.dtype("norm_dtype").value_or(residual ? residual->dtype : x.dtype);
    DType rd = c.outDType(1, residual ? residual->dtype : x.dtype);
    DType o = quant ? (w ? promoteTypes(n, w->dtype) : n) : c.outDType(0, w ? promoteTypes(n, w->dtype) : n);
    std::vector<double> out, resid;
    if (num.allreduce_norm_single_rounding) {
      // FlashInfer/TRT-LLM: z = round(a + residual), norm from z, gamma multiplied in f32.
      std::vector<double> z = residual ? roundAll(addF32(a, *residual), rd) : a.values();
      Rows zr = rowsFromValues(z, x.shape);
      rmsNormRowsSingleRounding(zr, w, eps, o, out);
      resid = z;
    } else if (residual) {
      FusedAddResult r = fusedAddRmsNorm(a, *residual, w, eps, rounded, rd, n, o);
      out = std::move(r.out);
      resid = std::move(r.residual);
    } else {
      out = rmsNorm(a, w, eps, n, o);
      resid = a.values();
    }
    if (quant) {
      Tensor scale = c.tensor("scale");
      DType q8 = c.outDType(0, DType::F8E4M3FN);
      c.out(0, tensorFromValues(c, 0, x.shape, q8,
                                quantize(out, x.shape, staticSpec(scale, q8, c.flag("divide", false))).q));
    } else {
      c.out(0, tensorFromValues(c, 0, x.shape, o, out));
    }
    c.out(1, tensorFromValues(c, 1, x.shape, rd, resid));
  };
  t.add("fxfuse.all_reduce_rms_norm", [allReduceNorm](Call& c) { allReduceNorm(c, false); });
  t.add("fxfuse.all_reduce_rms_norm_quant", [allReduceNorm](Call& c) { allReduceNorm(c, true); });
}

}  // namespace

void registerFxfuseOps(OpTable& t) {
  registerFxfuseCanonicalOps(t);
  registerFxfuseFusedOps(t);
}

}  // namespace fxfuse::interp
