// fxfuse.paged_attention (docs/canonical-ops.md): vLLM's attention over a paged KV cache.
// Step (a) writes this step's keys and values into the caches at their slots (FP8 caches:
// divided by the layer's scale, saturated to ±448, rounded to e4m3); step (b) attends each
// sequence's queries over its cached context, causal and bottom-right aligned, with the
// interpreter's one attention implementation (f64 scores and softmax, one rounding).
// Every index of the batch metadata is checked: bad metadata is an FxError, never a read
// out of bounds.
#include <cmath>
#include <set>

#include "tools/interpreter/ops_common.h"

namespace fxfuse::interp {
namespace {

using namespace ops;

// The batch metadata as integers, checked against the operands' sizes.
struct PagedBatch {
  int64_t tokens = 0, num_blocks = 0, block_size = 0, max_blocks = 0;
  std::vector<int64_t> slots, block_table, seq_lens, query_start;
  int64_t numSeqs() const { return static_cast<int64_t>(seq_lens.size()); }
  int64_t block(int64_t seq, int64_t j) const { return block_table[seq * max_blocks + j]; }
};

std::vector<int64_t> integers(const Tensor& t, const char* what, int64_t rank) {
  if (t.dim() != rank) fail("paged_attention: {} must be {}-D, got {}", what, rank, t.describe());
  if (category(t.dtype) == Category::Float) fail("paged_attention: {} must be an integer tensor, got {}", what, t.describe());
  std::vector<int64_t> out;
  for (double v : t.values()) out.push_back(asI64(v));
  return out;
}

void checkSlots(const PagedBatch& b) {
  int64_t capacity = b.num_blocks * b.block_size;
  std::vector<int64_t> writer(static_cast<size_t>(capacity), -1);
  for (int64_t t = 0; t < b.tokens; ++t) {
    int64_t s = b.slots[t];
    if (s == -1) continue;
    if (s < -1 || s >= capacity)
      fail("paged_attention: slot_mapping[{}] = {} is outside [-1, {}) (num_blocks {} x block_size {})", t, s, capacity,
           b.num_blocks, b.block_size);
    if (writer[s] >= 0) fail("paged_attention: slot {} is written by tokens {} and {}", s, writer[s], t);
    writer[s] = t;
  }
}

void checkSequences(const PagedBatch& b) {
  if (b.query_start.empty() || b.query_start[0] != 0)
    fail("paged_attention: query_start_loc[0] must be 0, got {}", b.query_start.empty() ? -1 : b.query_start[0]);
  for (int64_t s = 0; s < b.numSeqs(); ++s) {
    int64_t qs = b.query_start[s], qe = b.query_start[s + 1], ctx = b.seq_lens[s];
    if (qe < qs) fail("paged_attention: query_start_loc decreases at sequence {} ({} -> {})", s, qs, qe);
    if (qe > b.tokens) fail("paged_attention: query_start_loc[{}] = {} is past the {} tokens", s + 1, qe, b.tokens);
    if (ctx < 0 || ctx > b.max_blocks * b.block_size)
      fail("paged_attention: seq_lens[{}] = {} is outside [0, {}] (max_blocks {} x block_size {})", s, ctx,
           b.max_blocks * b.block_size, b.max_blocks, b.block_size);
    if (qe - qs > ctx) fail("paged_attention: sequence {} has {} queries but a context of {}", s, qe - qs, ctx);
    for (int64_t j = 0; j * b.block_size < ctx; ++j)
      if (b.block(s, j) < 0 || b.block(s, j) >= b.num_blocks)
        fail("paged_attention: block_table[{}, {}] = {} is outside [0, {})", s, j, b.block(s, j), b.num_blocks);
  }
}

PagedBatch readBatch(const Call& c, int64_t tokens, const Tensor& key_cache) {
  PagedBatch b;
  b.tokens = tokens;
  b.num_blocks = key_cache.shape[0];
  b.block_size = key_cache.shape[1];
  if (b.block_size < 1) fail("paged_attention: key_cache {} has block size 0", key_cache.describe());
  Tensor table = c.tensor("block_table");
  b.slots = integers(c.tensor("slot_mapping"), "slot_mapping", 1);
  b.block_table = integers(table, "block_table", 2);
  b.seq_lens = integers(c.tensor("seq_lens"), "seq_lens", 1);
  b.query_start = integers(c.tensor("query_start_loc"), "query_start_loc", 1);
  b.max_blocks = table.shape[1];
  if (static_cast<int64_t>(b.slots.size()) != tokens)
    fail("paged_attention: slot_mapping has {} entries for {} tokens", b.slots.size(), tokens);
  if (table.shape[0] != b.numSeqs() || static_cast<int64_t>(b.query_start.size()) != b.numSeqs() + 1)
    fail("paged_attention: block_table {}, seq_lens [{}] and query_start_loc [{}] disagree on the number of sequences",
         table.describe(), b.numSeqs(), b.query_start.size());
  checkSlots(b);
  checkSequences(b);
  return b;
}

// One cache operand: its values row-major [num_blocks, block_size, Hk, E], and the FP8
// scale (nullopt for a model-dtype cache).
struct Cache {
  Tensor input;
  std::vector<double> values;
  std::optional<double> scale;
};

Cache readCache(const Call& c, const char* name, const char* scale_name, const Tensor& src) {
  Cache k;
  k.input = c.tensor(name);
  const Tensor& t = k.input;
  if (t.dim() != 4 || t.shape[2] != src.shape[1] || t.shape[3] != src.shape[2])
    fail("paged_attention: {} {} must be [num_blocks, block_size, {}, {}]", name, t.describe(), src.shape[1],
         src.shape[2]);
  if (t.dtype == DType::F8E4M3FN) {
    std::optional<Tensor> s = c.optTensor(scale_name);
    if (!s || s->numel() != 1)
      fail("paged_attention: an FP8 {} needs a one-element {}", name, scale_name);
    k.scale = roundF32(s->item());
  } else if (t.dtype != src.dtype) {
    fail("paged_attention: {} {} is neither the model dtype {} nor f8e4m3fn", name, t.describe(), ir::dtypeName(src.dtype));
  }
  k.values = t.values();
  return k;
}

// Step (a): cache[slot] = src[token] for every token with a slot (FP8: vLLM's
// reshape_and_cache_flash, fp8(clamp(f32(x) / scale, ±448))).
void writeCache(Cache& cache, const Tensor& src, const PagedBatch& b) {
  int64_t row = src.shape[1] * src.shape[2];
  std::vector<double> x = src.values();
  for (int64_t t = 0; t < b.tokens; ++t) {
    if (b.slots[t] < 0) continue;
    double* dst = cache.values.data() + b.slots[t] * row;
    for (int64_t i = 0; i < row; ++i) {
      double v = x[t * row + i];
      dst[i] = cache.scale ? quantOne(roundF32(v), *cache.scale, /*divide=*/true) : v;
    }
  }
}

// Keys (or values) 0..ctx-1 of sequence `s` as [1, Hk, ctx, E] (FP8: f32(fp8) * scale).
Tensor gatherContext(const Cache& cache, const PagedBatch& b, int64_t s, int64_t ctx, int64_t heads, int64_t dim) {
  Tensor out = Tensor::uninitialized({1, ctx, heads, dim}, DType::F32);
  double* o = out.base();
  int64_t row = heads * dim;
  for (int64_t j = 0; j < ctx; ++j) {
    const double* src = cache.values.data() + (b.block(s, j / b.block_size) * b.block_size + j % b.block_size) * row;
    for (int64_t i = 0; i < row; ++i) o[j * row + i] = cache.scale ? roundF32(src[i] * *cache.scale) : src[i];
  }
  return transpose(out, 1, 2);
}

// Bottom-right aligned causal keep-mask [ql, ctx]: query i sits at position ctx - ql + i.
Tensor causalMask(int64_t ql, int64_t ctx) {
  Tensor m = Tensor::uninitialized({ql, ctx}, DType::BOOL);
  for (int64_t i = 0; i < ql; ++i)
    for (int64_t j = 0; j < ctx; ++j) m.base()[i * ctx + j] = j <= ctx - ql + i ? 1.0 : 0.0;
  return m;
}

// Step (b): f64 attention values [T, Hq, E]; rows of padding tokens stay 0.
std::vector<double> attendSequences(const Tensor& q, const Cache& kc, const Cache& vc, const PagedBatch& b,
                                    std::optional<double> scale) {
  int64_t T = q.shape[0], Hq = q.shape[1], E = q.shape[2];
  int64_t Hk = kc.input.shape[2];
  std::vector<double> out(static_cast<size_t>(T * Hq * E), 0.0);
  for (int64_t s = 0; s < b.numSeqs(); ++s) {
    int64_t qs = b.query_start[s], ql = b.query_start[s + 1] - qs, ctx = b.seq_lens[s];
    if (ql == 0) continue;
    AttentionArgs a;
    a.q = unsqueeze(transpose(slice(q, 0, qs, qs + ql, 1), 0, 1), 0);  // [1, Hq, ql, E]
    a.k = gatherContext(kc, b, s, ctx, Hk, E);
    a.v = gatherContext(vc, b, s, ctx, Hk, E);
    a.mask = causalMask(ql, ctx);
    a.scale = scale;
    a.gqa = true;
    AttentionResult r = attention(a);  // [1, Hq, ql, E]
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < ql; ++i)
        for (int64_t e = 0; e < E; ++e) out[((qs + i) * Hq + h) * E + e] = r.out[(h * ql + i) * E + e];
  }
  return out;
}

// The query as [T, Hq, E] (a 2-D [T, Hq*E] query takes E from the key).
Tensor queryHeads(const Tensor& q0, const Tensor& key) {
  if (key.dim() != 3) fail("paged_attention: key must be [T, Hk, E], got {}", key.describe());
  int64_t E = key.shape[2];
  Tensor q = q0;
  if (q0.dim() == 2 && E > 0 && q0.shape[1] % E == 0) q = reshape(q0, {q0.shape[0], q0.shape[1] / E, E});
  if (q.dim() != 3 || q.shape[2] != E)
    fail("paged_attention: query {} must be [T, Hq, {}] or [T, Hq*{}]", q0.describe(), E, E);
  if (q.shape[0] != key.shape[0]) fail("paged_attention: query {} and key {} differ in tokens", q0.describe(), key.describe());
  if (key.shape[1] == 0 || q.shape[1] % key.shape[1] != 0)
    fail("paged_attention: {} query heads are not a multiple of {} key/value heads", q.shape[1], key.shape[1]);
  return q;
}

// The output's recorded shape when it holds the values (e.g. [T, Hq*E]), else [T, Hq, E].
Shape outputShape(const Call& c, const Shape& computed, int64_t n) {
  if (!c.out_values.empty() && c.out_values[0] && c.out_values[0]->isTensor()) {
    Shape rec = c.interp->evalShape(c.out_values[0]->type.shape, "output");
    int64_t m = 1;
    for (int64_t s : rec) m *= s;
    if (m == n) return rec;
  }
  return computed;
}

void pagedAttention(Call& c) {
  Tensor key = c.tensor("key"), value = c.tensor("value");
  Tensor q = queryHeads(c.tensor("query"), key);
  if (value.shape != key.shape) fail("paged_attention: key {} and value {} differ", key.describe(), value.describe());
  Cache kc = readCache(c, "key_cache", "k_scale", key), vc = readCache(c, "value_cache", "v_scale", value);
  if (kc.input.shape != vc.input.shape || kc.input.dtype != vc.input.dtype)
    fail("paged_attention: key_cache {} and value_cache {} differ", kc.input.describe(), vc.input.describe());
  PagedBatch batch = readBatch(c, key.shape[0], kc.input);
  writeCache(kc, key, batch);
  writeCache(vc, value, batch);
  const RValue* sv = c.find("scale");
  std::optional<double> scale = sv && !sv->isNone() ? std::optional<double>(sv->number()) : std::nullopt;
  std::vector<double> out = attendSequences(q, kc, vc, batch, scale);
  std::optional<Tensor> os = c.optTensor("output_scale");
  DType od = c.outDType(0, os ? DType::F8E4M3FN : q.dtype);
  if (os) {
    // As attention_quant: round to the model dtype (unless --attn-quant-skip-rounding), then
    // the static quant's reciprocal multiply.
    if (os->numel() != 1) fail("paged_attention: output_scale must have one element, got {}", os->describe());
    DType mid = c.interp->options().numerics.attention_quant_skips_rounding ? DType::F32 : q.dtype;
    double inv = roundF32(1.0 / roundF32(os->item()));
    for (double& x : out) x = quantOneRecip(roundTo(x, mid), inv, od);
  }
  Shape shape = outputShape(c, q.shape, static_cast<int64_t>(out.size()));
  c.out(0, tensorFromValues(c, 0, shape, od, out));
  c.out(1, tensorFromValues(c, 1, kc.input.shape, kc.input.dtype, kc.values));
  c.out(2, tensorFromValues(c, 2, vc.input.shape, vc.input.dtype, vc.values));
}

}  // namespace

void registerPagedAttentionOps(OpTable& t) { t.add("fxfuse.paged_attention", pagedAttention); }

}  // namespace fxfuse::interp
