// fxfuse.paged_attention (the kv-cache pass's serving attention) lowered to two runtime steps
// over the layer's paged KV cache (kernels/runtime/paged_attention.h):
//
//   rt.reshape_and_cache: key, value, slot_mapping [, k_scale, v_scale]  -> key_cache, value_cache
//                         [, query, positions, cos_sin_cache, is_neox: rotary first, below]
//   rt.paged_attention:   query, key_cache, value_cache, block_table, seq_lens, query_start_loc
//                         [, k_scale, v_scale] [, output_scale]            -> out
//
// The caches are updated in place: the steps write into the cache inputs' own buffers, and the
// node's cache outputs (the graph's user-input-mutation outputs) are the inputs' tensors, so a
// serving step neither copies a cache nor holds a second cache-sized buffer.
//
// A rotary whose written-back qkv only this attention reads is folded into the cache write:
//
//   qkv ─ rotary_embedding(q, k) ─ slice_scatter ×2 ─ views ─ paged_attention(q', k', v)
//     ==>  rt.reshape_and_cache(query = q view of qkv, key, value, positions, cos_sin_cache)
//          (q rotated in place in qkv, k rotated on its way into the cache)
//          rt.paged_attention(q view of qkv, caches)
//
// one launch instead of the generated rotary kernel and the cache write. When the attention's
// views are not the rotary's heads (another head size, v overlapping q or k), the rotary still
// runs in place on qkv (a rotation-only cache-write step) before the plain cache write.
#include "compiler/lowering/lowerer.h"

namespace fxfuse::lowering::detail {

namespace {

// The paged kernels' largest head size (kernels/runtime/paged_attention.h, kPagedMaxHeadSize).
constexpr int64_t kPagedMaxHeadSize = 256;

bool isD16(DType t) { return t == DType::BF16 || t == DType::F16; }

}  // namespace

// A [T, H, E] or [T, H*E] operand as a [T, H, E] view with a contiguous head dimension.
int Lowerer::tokenHeadView(const Node& n, int tref, const SymExpr& head_size, const std::string& what) {
  TRef x = trefs_[static_cast<size_t>(tref)];
  if (x.shape.size() == 2) {
    x.shape = {x.shape[0], floorDiv(x.shape[1], head_size), head_size};
    x.stride = {x.stride[0], head_size * x.stride[1], x.stride[1]};
  } else if (x.shape.size() != 3) {
    unsupported(n, fmt::format("paged attention: {} must be [T, H, E] or [T, H*E]", what));
  }
  if (!isOne(x.stride[2]) && !isOne(x.shape[2]))
    unsupported(n, fmt::format("paged attention: the head dimension of {} must be contiguous", what));
  return newTRef(std::move(x));
}

// A cache operand, written in place: it must be a contiguous graph input that nothing but this
// node reads (its old contents are gone after the step).
int Lowerer::inPlaceCache(const Node& n, const std::string& name, DType model_dtype) {
  Value* cache = tensorArg(n, name);
  const int t = mat(cache, n);
  const TRef& tr = trefs_[static_cast<size_t>(t)];
  if (bufs_[static_cast<size_t>(tr.buffer)].kind != pb::INPUT || cache->numUses() != 1 || cache->graphOutputUses() != 0)
    unsupported(n, fmt::format("paged attention: {} must be a graph input read only by this node (it is updated in place)",
                               name));
  if (tr.shape.size() != 4 || !isContiguous(tr))
    unsupported(n, fmt::format("paged attention: {} must be a contiguous [num_blocks, block_size, Hk, E] tensor", name));
  if (tr.dtype != model_dtype && tr.dtype != DType::F8E4M3FN)
    unsupported(n, fmt::format("paged attention: {} is {}, neither the model dtype {} nor f8e4m3fn", name,
                               ir::dtypeName(tr.dtype), ir::dtypeName(model_dtype)));
  return t;
}

// A batch-metadata operand: a contiguous integer tensor of the kernels' dtype and rank.
int Lowerer::pagedMetadata(const Node& n, const std::string& name, DType dtype, size_t rank) {
  const int t = mat(tensorArg(n, name), n);
  const TRef& tr = trefs_[static_cast<size_t>(t)];
  if (tr.dtype != dtype || tr.shape.size() != rank || !isContiguous(tr))
    unsupported(n, fmt::format("paged attention: {} must be a contiguous {}-D {} tensor", name, rank, ir::dtypeName(dtype)));
  return t;
}

// ------------------------------------------------------------ the rotary folded into the cache write

namespace {

// A view that keeps the token rows of a [T, C] qkv: a split or slice of the last dim, or the
// last dim reshaped into [heads, E] (these always alias, so the views read qkv's memory).
bool isHeadView(const Node& u, const Value* of) {
  const std::string& t = u.target;
  const Value* out = u.numOutputs() > 0 ? u.output(0) : nullptr;
  const size_t rank = of->type.rank();
  auto lastDim = [&](const Attr* d) {
    auto v = d ? d->asInt() : std::optional<int64_t>();
    return v && (*v == -1 || *v == static_cast<int64_t>(rank) - 1);
  };
  if (t == "aten.split_with_sizes.default" || t == "aten.split.Tensor") return lastDim(u.arg("dim", 2));
  if (t == "aten.slice.Tensor") {
    const Attr* step = u.arg("step", 4);
    return lastDim(u.arg("dim", 1)) && (!step || step->asInt() == std::optional<int64_t>(1));
  }
  if (t != "aten.reshape.default" && t != "aten.view.default" && t != "aten._unsafe_view.default") return false;
  if (!out || rank == 0 || out->type.rank() != rank + 1) return false;
  for (size_t d = 0; d + 1 < rank; ++d)
    if (!(out->type.shape[d] == of->type.shape[d])) return false;
  const SymExpr& c = of->type.shape[rank - 1];
  const SymExpr &h = out->type.shape[rank - 1], &e = out->type.shape[rank];
  return c.isInt() && h.isInt() && e.isInt() && h.intValue() * e.intValue() == c.intValue();
}

}  // namespace

// The one fxfuse.paged_attention reading `qkv` through head views as its query, key or value;
// null when anything else reads it or one of its views (or a graph output is one of them).
const Node* Lowerer::pagedAttentionReading(Value* qkv) {
  const Node* attention = nullptr;
  std::vector<Value*> work{qkv};
  std::set<const Node*> seen;
  while (!work.empty()) {
    Value* v = work.back();
    work.pop_back();
    if (v->graphOutputUses() != 0) return nullptr;
    for (Node* u : v->users()) {
      if (u->target == "fxfuse.paged_attention.default") {
        for (const auto& a : u->args())
          if (a.value.isValue() && a.value.value == v && a.name != "query" && a.name != "key" && a.name != "value")
            return nullptr;
        if (attention && attention != u) return nullptr;
        attention = u;
        continue;
      }
      if (!isHeadView(*u, v) || valArg(*u, "self") != v) return nullptr;
      if (seen.insert(u).second)
        for (Value* o : u->outputs())
          if (o) work.push_back(o);
    }
  }
  return attention;
}

// Nothing but the rotary reads qkv's memory before the attention: qkv is an arena tensor of its
// own whose readers are the rotary (through its query/key views) and the first scatter.
bool Lowerer::onlyRotaryReads(const Node& rotary, const RotaryWriteback& wb) {
  auto readOnlyByRotary = [&](const Value* v) {
    if (v->graphOutputUses() != 0) return false;
    for (const Node* r : v->users())
      if (r != &rotary) return false;
    return true;
  };
  const int base = mat_.at(wb.base);
  const TRef& b = trefs_[static_cast<size_t>(base)];
  if (bufs_[static_cast<size_t>(b.buffer)].kind != pb::ARENA || wb.base->graphOutputUses() != 0) return false;
  for (const Node* u : wb.base->users()) {
    if (u == wb.first) continue;
    for (const Value* o : u->outputs())
      if (o && !readOnlyByRotary(o)) return false;
  }
  for (const Value* v : valuesOnBuffer(b.buffer))
    if (v != wb.base && !readOnlyByRotary(v)) return false;
  return true;
}

// lowerRotary's first choice for the writeback form: no kernel now; the written-back qkv is qkv
// itself (rotated later, in place, by the attention's cache-write step).
bool Lowerer::deferRotaryToPagedAttention(Node& n, const RotaryWriteback& wb, int64_t head, bool neox) {
  Value* pos = valArg(n, "positions");
  Value* table = valArg(n, "cos_sin_cache");
  Value* query = valArg(n, "query");
  if (!pos->isTensor() || !table->isTensor() || !query->isTensor()) return false;
  const DType dt = wb.base->type.dtype, table_dt = table->type.dtype;
  if (!isD16(dt) || pos->type.dtype != DType::I64 || pos->type.rank() != 1) return false;
  if (!isD16(table_dt) && table_dt != DType::F32) return false;
  const int64_t rot = table->type.shape[1].intValue();
  if (rot % 2 != 0 || rot > head || !query->type.shape[1].isInt()) return false;
  const TRef& b = trefs_[static_cast<size_t>(mat_.at(wb.base))];
  if (b.shape.size() != 2 || !isOne(b.stride[1]) || !onlyRotaryReads(n, wb)) return false;
  Value* written_back = wb.second->output(0);
  const Node* attention = pagedAttentionReading(written_back);
  if (!attention || deferred_rotary_.count(attention)) return false;
  DeferredRotary d;
  d.rotary = &n;
  d.base = mat_.at(wb.base);
  d.positions = pos;
  d.cos_sin_cache = table;
  d.head = head;
  d.query_cols = query->type.shape[1].intValue();
  d.rotated = wb.rotated;
  d.neox = neox;
  deferred_rotary_[attention] = d;
  setMat(written_back, newTRef(b));
  for (Node* s : {wb.first, wb.second}) lowered_ahead_.insert(s);
  return true;
}

// The attention's query and key are the rotary's heads of qkv ([T, heads, head] at columns 0
// and query_cols) and its value lies past them: the cache write can rotate as it goes.
bool Lowerer::rotaryFoldsIntoCacheWrite(const DeferredRotary& d, int tq, int tk, int tv, const SymExpr& head_size) {
  const TRef& b = trefs_[static_cast<size_t>(d.base)];
  auto headsAt = [&](const TRef& t, int64_t col, int64_t cols) {
    return t.buffer == b.buffer && t.shape.size() == 3 && t.shape[0] == b.shape[0] && t.shape[1] == I(cols / d.head) &&
           t.shape[2] == I(d.head) && t.stride[0] == b.stride[0] && t.stride[1] == I(d.head) && isOne(t.stride[2]) &&
           t.offset == b.offset + I(col);
  };
  if (!head_size.isInt() || head_size.intValue() != d.head) return false;
  if (!headsAt(trefs_[static_cast<size_t>(tq)], 0, d.query_cols) ||
      !headsAt(trefs_[static_cast<size_t>(tk)], d.query_cols, d.rotated - d.query_cols))
    return false;
  const TRef& v = trefs_[static_cast<size_t>(tv)];
  if (v.buffer != b.buffer) return true;
  const SymExpr gap = v.offset - b.offset;
  return v.stride.size() == 3 && v.stride[0] == b.stride[0] && gap.isInt() && gap.intValue() >= d.rotated;
}

// The rotary operands of a cache-write step: `query` ([T, heads, head]) rotated in place.
void Lowerer::rotaryArgs(pb::KernelLaunch* k, const DeferredRotary& d, int query, const Node& attention) {
  argT(k, "query", query);
  argT(k, "positions", mat(d.positions, attention));
  argT(k, "cos_sin_cache", mat(d.cos_sin_cache, attention));
  argB(k, "is_neox", d.neox);
}

// The rotary as it was written: every head of qkv's first `rotated` columns, in place.
void Lowerer::lowerRotaryInPlace(const DeferredRotary& d, const Node& attention) {
  TRef heads = trefs_[static_cast<size_t>(d.base)];
  heads.shape = {heads.shape[0], I(d.rotated / d.head), I(d.head)};
  heads.stride = {heads.stride[0], I(d.head), I(1)};
  const int view = newTRef(std::move(heads));
  pb::KernelLaunch* k = addStep({d.rotary->name}, "rotary (in place)")->mutable_kernel();
  k->set_kernel("rt.reshape_and_cache");
  rotaryArgs(k, d, view, attention);
}

// ------------------------------------------------------------ a dense plan's rotary

// x ([T, H*E] or [T, H, E], rows of contiguous heads) as a [T, H, E] view; nullopt otherwise.
std::optional<int> Lowerer::headRowsView(int tref, int64_t head) {
  TRef x = trefs_[static_cast<size_t>(tref)];
  if (x.shape.size() == 2 && x.shape[1].isInt() && x.shape[1].intValue() % head == 0 && isOne(x.stride[1])) {
    x.shape = {x.shape[0], I(x.shape[1].intValue() / head), I(head)};
    x.stride = {x.stride[0], I(head), I(1)};
    return newTRef(std::move(x));
  }
  if (x.shape.size() == 3 && x.shape[2] == I(head) && isOne(x.stride[2])) return tref;
  return std::nullopt;
}

// Whether the rotation step takes rotary_embedding `n`'s operand x (its output `out`): x in
// memory already (not in an open kernel: the generated rotary would fuse with its producer),
// bf16/f16, positions i64 [T], a bf16/f16/f32 table of an even rot <= head.
bool Lowerer::rotaryStepTakes(const Node& n, Value* x, Value* out, int64_t head) {
  Value* pos = valArg(n, "positions");
  Value* table = valArg(n, "cos_sin_cache");
  if (!x->isTensor() || !pos->isTensor() || !table->isTensor() || pending(x) || !mat_.count(x)) return false;
  if (pending(pos) || pending(table)) return false;
  const DType dt = x->type.dtype, table_dt = table->type.dtype;
  if (!isD16(dt) || out->type.dtype != dt || (!isD16(table_dt) && table_dt != DType::F32)) return false;
  if (pos->type.dtype != DType::I64 || pos->type.rank() != 1 || x->type.rank() < 2 ||
      !(pos->type.shape[0] == x->type.shape[0]))
    return false;
  const int64_t rot = table->type.shape[1].intValue();
  return rot % 2 == 0 && rot <= head;
}

// The rotation step: `query` ([T, H, E]) rotated into `query_out` ([T, H, E]).
void Lowerer::addRotaryStep(const Node& n, int query, int query_out, const std::string& what) {
  closeGroup();
  pb::KernelLaunch* k = addStep({n.name}, "rotary (" + what + ")")->mutable_kernel();
  k->set_kernel("rt.reshape_and_cache");
  argT(k, "query", query);
  argT(k, "query_out", query_out);
  argT(k, "positions", mat(valArg(n, "positions"), n));
  argT(k, "cos_sin_cache", mat(valArg(n, "cos_sin_cache"), n));
  argB(k, "is_neox", flag(n, "is_neox", true));
}

// A dense plan's rotary_embedding as the cache-write step's rotation-only form, out of place
// (kernels/runtime/cache_write.cu): the generated rotary's rounding, but eight pairs per thread
// in 16-byte vectors where RotaryQueryWidth allows. When query and key are adjacent column
// ranges of one tensor (vLLM's q, k split of the fused qkv), one step rotates both into one
// buffer whose two column ranges are the new query and key, as the graph's own output strides
// say (one launch instead of two):
//
//   qkv ─ split ─ q [T, Q] ─┐
//                 k [T, K] ─┴ rotary_embedding(positions, cos_sin_cache) ─ q', k'
//     ==>  rt.reshape_and_cache(query = qkv[:, :Q+K] as [T, (Q+K)/E, E], query_out = qk')
//          q' = qk'[:, :Q], k' = qk'[:, Q:]
//
// True when both outputs are lowered here; false leaves them to lowerRotary's per-output
// choice (a step of its own for each the step takes, else the generated rotary).
bool Lowerer::lowerRotaryPairStep(Node& n, int64_t head) {
  Value *q = valArg(n, "query"), *k = valArg(n, "key");
  Value *q_out = n.output(1), *k_out = n.output(2);
  if (!q || !k || !q_out || !k_out || q_out->numUses() == 0 || k_out->numUses() == 0) return false;
  if (!rotaryStepTakes(n, q, q_out, head) || !rotaryStepTakes(n, k, k_out, head)) return false;
  const TRef &tq = trefs_[static_cast<size_t>(mat_.at(q))], &tk = trefs_[static_cast<size_t>(mat_.at(k))];
  if (tq.shape.size() != 2 || tk.shape.size() != 2 || q_out->type.rank() != 2 || k_out->type.rank() != 2) return false;
  if (!tq.shape[1].isInt() || !tk.shape[1].isInt()) return false;
  const int64_t Q = tq.shape[1].intValue(), K = tk.shape[1].intValue();
  if (Q % head != 0 || K % head != 0 || tq.buffer != tk.buffer || !(tq.shape[0] == tk.shape[0]) ||
      !(tq.stride[0] == tk.stride[0]) || !isOne(tq.stride[1]) || !isOne(tk.stride[1]) ||
      !(tk.offset == tq.offset + I(Q)))
    return false;
  const SymExpr T = tq.shape[0];
  TRef both = tq;
  both.shape = {T, I((Q + K) / head), I(head)};
  both.stride = {tq.stride[0], I(head), I(1)};
  const int query = newTRef(std::move(both));
  const int out = freshTensor(q_out->type.dtype, {T, I(Q + K)}, q_out->name + "_" + k_out->name);
  TRef heads = trefs_[static_cast<size_t>(out)];
  heads.shape = {T, I((Q + K) / head), I(head)};
  heads.stride = {I(Q + K), I(head), I(1)};
  addRotaryStep(n, query, newTRef(heads), "query and key");
  TRef cols = trefs_[static_cast<size_t>(out)];
  cols.shape = {T, I(Q)};
  const int q_cols = newTRef(cols);
  cols.shape = {T, I(K)};
  cols.offset = cols.offset + I(Q);
  const int k_cols = newTRef(cols);
  setMat(q_out, q_cols);
  setMat(k_out, k_cols);
  return true;
}

// One output of the rotary (`x` its query or key) as a rotation step of its own; false when
// the step does not take it (the generated rotary then computes it).
bool Lowerer::lowerRotaryStep(Node& n, Value* x, Value* out, int64_t head) {
  if (!rotaryStepTakes(n, x, out, head)) return false;
  const std::optional<int> query = headRowsView(mat_.at(x), head);
  if (!query) return false;
  const int to = freshFor(out);
  const std::optional<int> query_out = headRowsView(to, head);
  if (!query_out) return false;  // unreachable: a fresh tensor of x's shape has x's head rows
  addRotaryStep(n, *query, *query_out, x == valArg(n, "query") ? "query" : "key");
  setMat(out, to);
  return true;
}

// ------------------------------------------------------------ the attention

void Lowerer::lowerPagedAttention(Node& n) {
  Value* out = n.output(0);
  if (!out) unsupported(n, "paged attention without an output");
  Value* key = tensorArg(n, "key");
  const DType dt = key->type.dtype;
  if (!isD16(dt) || tensorArg(n, "query")->type.dtype != dt || tensorArg(n, "value")->type.dtype != dt)
    unsupported(n, "paged attention: query, key and value must be one dtype, bf16 or f16");
  if (key->type.rank() != 3) unsupported(n, "paged attention: key must be [T, Hk, E]");
  const SymExpr E = key->type.shape[2];
  if (!E.isInt()) unsupported(n, "paged attention: the head size must be a constant");
  if (E.intValue() > kPagedMaxHeadSize)
    unsupported(n, fmt::format("paged attention: head size {} is above {}, the paged kernels' limit", E.intValue(),
                               kPagedMaxHeadSize));
  const int tq = tokenHeadView(n, mat(tensorArg(n, "query"), n), E, "query");
  const int tk = tokenHeadView(n, mat(key, n), E, "key");
  const int tv = tokenHeadView(n, mat(tensorArg(n, "value"), n), E, "value");
  const int kc = inPlaceCache(n, "key_cache", dt), vc = inPlaceCache(n, "value_cache", dt);
  const DType cache_dt = trefs_[static_cast<size_t>(kc)].dtype;
  if (trefs_[static_cast<size_t>(vc)].dtype != cache_dt || trefs_[static_cast<size_t>(vc)].shape != trefs_[static_cast<size_t>(kc)].shape)
    unsupported(n, "paged attention: key_cache and value_cache differ in dtype or shape");
  const SymExpr block_size = trefs_[static_cast<size_t>(kc)].shape[1];
  const bool fp8_cache = cache_dt == DType::F8E4M3FN;
  const int slots = pagedMetadata(n, "slot_mapping", DType::I64, 1);
  const int table = pagedMetadata(n, "block_table", DType::I32, 2);
  const int lens = pagedMetadata(n, "seq_lens", DType::I32, 1);
  const int qsl = pagedMetadata(n, "query_start_loc", DType::I32, 1);
  int k_scale = -1, v_scale = -1, out_scale = -1;
  if (fp8_cache) {
    if (!valArg(n, "k_scale") || !valArg(n, "v_scale")) unsupported(n, "paged attention: an FP8 cache needs k_scale and v_scale");
    k_scale = pagedMetadata(n, "k_scale", DType::F32, 1);
    v_scale = pagedMetadata(n, "v_scale", DType::F32, 1);
  }
  if (valArg(n, "output_scale")) out_scale = pagedMetadata(n, "output_scale", DType::F32, 1);
  if ((out_scale >= 0) != (out->type.dtype == DType::F8E4M3FN) || (out_scale < 0 && out->type.dtype != dt))
    unsupported(n, "paged attention: the output must be the model dtype, or f8e4m3fn with output_scale");
  closeGroup();
  const int to = freshFor(out);
  const int to3 = tokenHeadView(n, to, E, "the output");

  const auto deferred = deferred_rotary_.find(&n);
  const bool fold = deferred != deferred_rotary_.end() && rotaryFoldsIntoCacheWrite(deferred->second, tq, tk, tv, E);
  if (deferred != deferred_rotary_.end() && !fold) lowerRotaryInPlace(deferred->second, n);
  std::vector<std::string> nodes = {n.name};
  if (fold) nodes.insert(nodes.begin(), deferred->second.rotary->name);
  pb::KernelLaunch* w = addStep(nodes, std::string(fold ? "rotary + " : "") + "reshape_and_cache" +
                                           (fp8_cache ? " fp8" : "") + " (in place)")
                            ->mutable_kernel();
  w->set_kernel("rt.reshape_and_cache");
  if (fold) rotaryArgs(w, deferred->second, tq, n);
  argT(w, "key", tk);
  argT(w, "value", tv);
  argT(w, "key_cache", kc);
  argT(w, "value_cache", vc);
  argT(w, "slot_mapping", slots);
  if (fp8_cache) argT(w, "k_scale", k_scale), argT(w, "v_scale", v_scale);

  pb::KernelLaunch* a = addStep({n.name}, std::string("paged_attention") + (fp8_cache ? " fp8-cache" : "") +
                                              (out_scale >= 0 ? " fp8-out" : ""))
                            ->mutable_kernel();
  a->set_kernel("rt.paged_attention");
  argT(a, "q", tq);
  argT(a, "key_cache", kc);
  argT(a, "value_cache", vc);
  argT(a, "block_table", table);
  argT(a, "seq_lens", lens);
  argT(a, "query_start_loc", qsl);
  if (fp8_cache) argT(a, "k_scale", k_scale), argT(a, "v_scale", v_scale);
  argT(a, "out", to3);
  if (out_scale >= 0) argT(a, "out_scale", out_scale);
  const Attr* sc = arg(n, "scale");
  if (sc && sc->asDouble()) argF(a, "scale", *sc->asDouble());

  setMat(out, to);
  if (Value* k_out = n.numOutputs() > 1 ? n.output(1) : nullptr) setMat(k_out, kc);
  if (Value* v_out = n.numOutputs() > 2 ? n.output(2) : nullptr) setMat(v_out, vc);
  // What `fxfuse run` needs to rebuild the reference graph of a kv-cache plan.
  (*plan_.mutable_metadata())["kv_cache"] = fp8_cache ? "fp8" : std::string(ir::dtypeName(dt));
  (*plan_.mutable_metadata())["kv_block_size"] = block_size.str();
  stats_.attention++;
}

}  // namespace fxfuse::lowering::detail
