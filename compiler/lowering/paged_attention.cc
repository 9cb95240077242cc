// fxfuse.paged_attention (the kv-cache pass's serving attention) lowered to two runtime steps
// over the layer's paged KV cache (kernels/runtime/paged_attention.h):
//
//   rt.reshape_and_cache: key, value, slot_mapping [, k_scale, v_scale]  -> key_cache, value_cache
//   rt.paged_attention:   query, key_cache, value_cache, block_table, seq_lens, query_start_loc
//                         [, k_scale, v_scale] [, output_scale]            -> out
//
// The caches are updated in place: the steps write into the cache inputs' own buffers, and the
// node's cache outputs (the graph's user-input-mutation outputs) are the inputs' tensors, so a
// serving step neither copies a cache nor holds a second cache-sized buffer.
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

  pb::KernelLaunch* w = addStep({n.name}, fp8_cache ? "reshape_and_cache fp8 (in place)" : "reshape_and_cache (in place)")
                            ->mutable_kernel();
  w->set_kernel("rt.reshape_and_cache");
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

  mat_[out] = to;
  if (Value* k_out = n.numOutputs() > 1 ? n.output(1) : nullptr) mat_[k_out] = kc;
  if (Value* v_out = n.numOutputs() > 2 ? n.output(2) : nullptr) mat_[v_out] = vc;
  // What `fxfuse run` needs to rebuild the reference graph of a kv-cache plan.
  (*plan_.mutable_metadata())["kv_cache"] = fp8_cache ? "fp8" : std::string(ir::dtypeName(dt));
  (*plan_.mutable_metadata())["kv_block_size"] = block_size.str();
  stats_.attention++;
}

}  // namespace fxfuse::lowering::detail
