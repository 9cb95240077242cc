// kv-cache: vLLM's attention in its serving form. Every `fxfuse.attention` and
// `fxfuse.attention_quant` of layout 'vllm' (one prefill sequence with an empty cache)
// becomes `fxfuse.paged_attention`, which writes this step's keys and values into the
// layer's paged cache and attends over each sequence's cached context
// (docs/canonical-ops.md). Off unless `--kv-cache=DTYPE` is given; it runs after the
// fusions, so attention-quant-fusion still sees the plain vLLM form.
//
//   attention(q, k, v, layout='vllm', layer_name=L) ── o
//     ==>  paged_attention(q, k, v, L_key_cache, L_value_cache, slot_mapping, block_table,
//                          seq_lens, query_start_loc [, k_scale, v_scale] [, output_scale])
//            ── o, key_cache_out, value_cache_out
//
// New graph inputs: the batch metadata once per graph (slot_mapping i64[T],
// block_table i32[kv_num_seqs, kv_max_blocks], seq_lens i32[kv_num_seqs],
// query_start_loc i32[kv_num_seqs + 1]) and per layer its two caches
// [kv_num_blocks, block_size, Hk, E] (FP8: plus f32[1] k/v scales). The updated caches are
// user-input-mutation outputs of the cache inputs, placed before the user outputs
// (torch.export's order).
#include <cctype>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "passes/canonicalize/canonical_util.h"
#include "passes/passes.h"
#include "passes/toolkit/options.h"

namespace fxfuse::passes {
namespace {

constexpr const char* kPattern = "paged_attention";

// The batch-metadata inputs shared by every attention site of one graph.
struct BatchMetadata {
  ir::Value* slot_mapping = nullptr;
  ir::Value* block_table = nullptr;
  ir::Value* seq_lens = nullptr;
  ir::Value* query_start_loc = nullptr;
  ir::SymExpr tokens;  // T, the query token dim of the first site
};

// What one attention site needs from its operands.
struct AttentionSite {
  ir::Node* node = nullptr;
  bool quant = false;
  ir::DType model_dtype = ir::DType::DTYPE_UNSPECIFIED;
  ir::SymExpr tokens, kv_heads, head_size;
  std::string layer;
  // Token counts the graph does not prove equal to `tokens` (FX text gives query, key and
  // value symbols of their own): recorded as guards when the site is rewritten.
  std::vector<ir::SymExpr> same_tokens;
};

bool isVllmAttention(const ir::Node& n) {
  std::string name = compiler::fxfuseName(n.target);
  return (name == "attention" || name == "attention_quant") && fxString(n, "layout", "bhsd") == "vllm";
}

// Layer names as identifiers (graph input names must be Python identifiers in torch.export).
std::string sanitizedName(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "_" + out;
  return out;
}

ir::TensorType tensorType(ir::DType dtype, std::vector<ir::SymExpr> shape) {
  ir::TensorType t;
  t.dtype = dtype;
  t.stride = ir::TensorType::contiguousStrides(shape);
  t.shape = std::move(shape);
  return t;
}

ir::SymExpr symbolOf(ir::Module& m, const std::string& name, int64_t min, int64_t hint) {
  ir::SymbolInfo& s = m.symbols.getOrAdd(name);
  if (!s.min) s.min = min;
  if (!s.hint) s.hint = hint;
  if (s.source.empty()) s.source = "kv-cache pass";
  return ir::SymExpr::symbol(name);
}

class KvCachePass : public compiler::Pass {
 public:
  std::string_view name() const override { return "kv-cache"; }
  std::string_view summary() const override {
    return "--kv-cache=DTYPE: vLLM attention (layout 'vllm') -> paged_attention over a paged KV cache (new inputs)";
  }

  bool run(ir::Graph& g, compiler::PassContext& ctx) override {
    const compiler::CompileOptions& opts = ctx.options();
    if (opts.kv_cache_dtype.empty() || isNestedGraph(g)) return false;
    fp8_ = opts.kv_cache_dtype == "fp8";
    block_size_ = opts.kv_block_size;
    compiler::Rewriter rw(g);
    input_names_.clear();
    for (const auto& in : g.inputs()) input_names_.insert(in.value->name);
    BatchMetadata meta;
    std::vector<std::pair<ir::Value*, std::string>> mutations;  // (new cache, cache input name)
    bool changed = false;
    for (ir::Node* n : g.nodeList()) {
      if (!rw.alive(n) || n->kind != ir::NodeKind::Fxfuse || !isVllmAttention(*n)) continue;
      AttentionSite site;
      if (auto why = inspect(*n, opts, site, meta)) {
        ctx.rejected(kPattern, n->name, *why);
        continue;
      }
      for (const ir::SymExpr& t : site.same_tokens)
        ctx.module().addGuard(ir::SymExpr::apply(ir::SymExpr::Kind::Eq, {t, site.tokens}),
                              fmt::format("paged_attention at {}: query, key and value of every attention site "
                                          "are the batch's {} tokens",
                                          n->name, site.tokens.str()));
      if (!meta.slot_mapping) addBatchMetadata(g, ctx.module(), site.tokens, meta);
      ir::Node* paged = rewrite(g, rw, site, meta, mutations);
      ctx.addMatch(kPattern);
      ctx.applied(kPattern, paged,
                  fmt::format("layer {}, cache {}, block size {}{}", site.layer, opts.kv_cache_dtype, block_size_,
                              site.quant ? ", FP8 output" : ""));
      changed = true;
    }
    if (!changed) return false;
    rw.finish();
    addMutationOutputs(g, mutations);
    return true;
  }

 private:
  static bool isNestedGraph(const ir::Graph& g) {
    const ir::Module* m = g.module();
    int index = -1;
    for (size_t i = 0; i < m->graphs().size(); ++i)
      if (m->graphs()[i].get() == &g) index = static_cast<int>(i);
    std::function<bool(const ir::Attr&)> refers = [&](const ir::Attr& a) {
      if (a.kind == ir::Attr::Kind::Graph && a.graph == index) return true;
      for (const auto& e : a.list)
        if (refers(e)) return true;
      return false;
    };
    for (const auto& other : m->graphs())
      for (const auto& n : other->nodes())
        for (const auto& arg : n->args())
          if (refers(arg.value)) return true;
    return false;
  }

  // Fills `site` from the node's operands, or says why the site keeps its prefill form.
  std::optional<std::string> inspect(ir::Node& n, const compiler::CompileOptions& opts, AttentionSite& site,
                                     const BatchMetadata& meta) const {
    site.node = &n;
    site.quant = compiler::fxfuseName(n.target) == "attention_quant";
    ir::Value *q = compiler::valueArg(n, "query"), *k = compiler::valueArg(n, "key"),
              *v = compiler::valueArg(n, "value");
    if (!q || !k || !v || !compiler::hasKnownType(q) || !compiler::hasKnownType(k) || !compiler::hasKnownType(v))
      return "query, key or value has no known tensor type";
    if (compiler::valueArg(n, "attn_mask")) return "an attention mask (vLLM's attention takes none)";
    if (k->type.rank() != 3 || v->type.rank() != 3) return "key and value must be [T, Hk, E]";
    if (q->type.rank() != 2 && q->type.rank() != 3) return "query must be [T, Hq, E] or [T, Hq*E]";
    const ir::SymbolTable& syms = n.graph()->module()->symbols;
    auto same = [&](const ir::SymExpr& a, const ir::SymExpr& b) { return a == b || syms.knownEqual(a, b); };
    if (!same(k->type.shape[1], v->type.shape[1]) || !same(k->type.shape[2], v->type.shape[2]))
      return "key and value heads or head sizes differ (not one vLLM cache layout)";

    site.model_dtype = k->type.dtype;
    if (!ir::isHalf16(site.model_dtype) || q->type.dtype != site.model_dtype || v->type.dtype != site.model_dtype)
      return fmt::format("query/key/value are not one 16-bit dtype (key is {})", ir::dtypeName(k->type.dtype));
    if (!fp8_ && ir::dtypeName(site.model_dtype) != opts.kv_cache_dtype)
      return fmt::format("--kv-cache={} but the model dtype is {} (a cache in another dtype is not vLLM's form)",
                         opts.kv_cache_dtype, ir::dtypeName(site.model_dtype));
    site.tokens = meta.slot_mapping ? meta.tokens : q->type.shape[0];
    site.kv_heads = k->type.shape[1];
    site.head_size = k->type.shape[2];
    for (const ir::Value* x : {q, k, v}) {
      const ir::SymExpr& t = x->type.shape[0];
      if (same(t, site.tokens)) continue;
      if (syms.knownNotEqual(t, site.tokens))
        return fmt::format("token count {} is not the batch's {} (one slot_mapping per graph)", t.str(),
                           site.tokens.str());
      site.same_tokens.push_back(t);
    }
    std::string layer = fxString(n, "layer_name");
    site.layer = sanitizedName(layer.empty() ? n.name : layer);
    return std::nullopt;
  }

  // A new graph input named `name`, or `name_N` when an input has that name (input_names_
  // holds the graph's input names: one set per run, not one per input, which made the pass
  // quadratic in the attention sites).
  ir::Value* addInput(ir::Graph& g, const std::string& name, ir::TensorType type) {
    std::string unique = name;
    for (int i = 1; input_names_.count(unique); ++i) unique = fmt::format("{}_{}", name, i);
    input_names_.insert(unique);
    ir::Value* v = g.addInput(ir::ValueKind::Tensor, unique);
    v->type = std::move(type);
    return v;
  }

  void addBatchMetadata(ir::Graph& g, ir::Module& m, const ir::SymExpr& tokens, BatchMetadata& meta) {
    ir::SymExpr seqs = symbolOf(m, "kv_num_seqs", 1, 4);
    ir::SymExpr blocks = symbolOf(m, "kv_max_blocks", 1, 8);
    meta.tokens = tokens;
    meta.slot_mapping = addInput(g, "slot_mapping", tensorType(ir::DType::I64, {tokens}));
    meta.block_table = addInput(g, "block_table", tensorType(ir::DType::I32, {seqs, blocks}));
    meta.seq_lens = addInput(g, "seq_lens", tensorType(ir::DType::I32, {seqs}));
    meta.query_start_loc =
        addInput(g, "query_start_loc", tensorType(ir::DType::I32, {seqs + ir::SymExpr::integer(1)}));
  }

  ir::Node* rewrite(ir::Graph& g, compiler::Rewriter& rw, const AttentionSite& site, const BatchMetadata& meta,
                    std::vector<std::pair<ir::Value*, std::string>>& mutations) {
    ir::Node& n = *site.node;
    ir::SymExpr num_blocks = symbolOf(*g.module(), "kv_num_blocks", 1, 64);
    ir::TensorType cache = tensorType(fp8_ ? ir::DType::F8E4M3FN : site.model_dtype,
                                      {num_blocks, ir::SymExpr::integer(block_size_), site.kv_heads, site.head_size});
    ir::Value* key_cache = addInput(g, site.layer + "_key_cache", cache);
    ir::Value* value_cache = addInput(g, site.layer + "_value_cache", cache);
    ir::Value *k_scale = nullptr, *v_scale = nullptr;
    if (fp8_) {
      k_scale = addInput(g, site.layer + "_k_scale", tensorType(ir::DType::F32, {ir::SymExpr::integer(1)}));
      v_scale = addInput(g, site.layer + "_v_scale", tensorType(ir::DType::F32, {ir::SymExpr::integer(1)}));
    }
    std::vector<ir::Arg> args = {
        A("query", V(compiler::valueArg(n, "query"))),
        A("key", V(compiler::valueArg(n, "key"))),
        A("value", V(compiler::valueArg(n, "value"))),
        A("key_cache", V(key_cache)),
        A("value_cache", V(value_cache)),
        A("slot_mapping", V(meta.slot_mapping)),
        A("block_table", V(meta.block_table)),
        A("seq_lens", V(meta.seq_lens)),
        A("query_start_loc", V(meta.query_start_loc)),
    };
    if (fp8_) {
      args.push_back(A("k_scale", V(k_scale)));
      args.push_back(A("v_scale", V(v_scale)));
    }
    if (site.quant) args.push_back(A("output_scale", V(compiler::valueArg(n, "output_scale"))));
    if (const ir::Attr* scale = compiler::argOf(n, "scale"); scale && !scale->isNone()) args.push_back(A("scale", *scale));
    std::string layer_name = fxString(n, "layer_name");
    if (!layer_name.empty()) args.push_back(A("layer_name", S(layer_name)));
    std::vector<Out> outs(3);
    outs[0].replaces = n.output(0);
    outs[1].type = cache;
    outs[2].type = cache;
    ir::Node* paged = rw.create(compiler::fxfuseTarget("paged_attention"), std::move(args), outs, &n, {&n},
                                "paged_attention");
    rw.replaceOutputs(paged, outs);
    rw.eraseDead({&n});
    mutations.emplace_back(paged->output(1), key_cache->name);
    mutations.emplace_back(paged->output(2), value_cache->name);
    return paged;
  }

  // The new caches as user-input mutations, after the graph's own mutation outputs and
  // before its user outputs.
  static void addMutationOutputs(ir::Graph& g, const std::vector<std::pair<ir::Value*, std::string>>& mutations) {
    size_t at = 0;
    while (at < g.outputs().size() && g.outputs()[at].kind != ir::OutputKind::UserOutput &&
           g.outputs()[at].kind != ir::OutputKind::LossOutput)
      ++at;
    bool constant_after = false;
    for (size_t i = at; i < g.outputs().size(); ++i)
      if (!g.outputs()[i].value && !g.outputs()[i].constant.isNone()) constant_after = true;
    if (constant_after) at = g.outputs().size();  // constants cannot be moved: append instead
    std::vector<ir::GraphOutput> tail(g.outputs().begin() + static_cast<std::ptrdiff_t>(at), g.outputs().end());
    for (size_t i = 0; i < mutations.size(); ++i) g.addOutput(nullptr);
    for (size_t i = 0; i < tail.size(); ++i) {
      size_t to = at + mutations.size() + i;
      g.setOutputValue(to, tail[i].value);
      g.setOutputRole(to, tail[i].kind, tail[i].target);
    }
    for (size_t i = 0; i < mutations.size(); ++i) {
      g.setOutputValue(at + i, mutations[i].first);
      g.setOutputRole(at + i, ir::OutputKind::UserInputMutation, mutations[i].second);
    }
  }

  std::set<std::string> input_names_;
  bool fp8_ = false;
  int64_t block_size_ = compiler::CompileOptions::kDefaultKvBlockSize;
};

}  // namespace

std::unique_ptr<Pass> createKvCachePass() { return std::make_unique<KvCachePass>(); }

}  // namespace fxfuse::passes
