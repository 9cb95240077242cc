// Serving batches for paged attention (kv_batch.h): lengths, block placement, metadata
// tensors, and the interpreter's binding of the batch symbols.
#include "tools/interpreter/kv_batch.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include <fmt/format.h>

#include "ir/checked_math.h"
#include "ir/status.h"
#include "tools/interpreter/interpreter.h"

namespace fxfuse::interp {

std::string KvBatchPlan::describe() const {
  std::string seqs;
  for (int64_t b = 0; b < batch(); ++b)
    seqs += fmt::format("{}{}/{}", seqs.empty() ? "" : " ", query_lens[b], context_lens[b]);
  return fmt::format("{} sequences (query/context: {}), block size {}, {} blocks", batch(), seqs, block_size,
                     num_blocks);
}

KvBatchPlan planKvLengths(int64_t tokens, int64_t batch, int64_t block_size, const KvBatchOptions& o) {
  if (batch < 1) fail("kv batch: {} sequences (need at least 1)", batch);
  if (block_size < 1) fail("kv batch: the key cache's block size (its dim 1) is {}, need at least 1", block_size);
  KvBatchPlan p;
  p.tokens = tokens;
  p.block_size = block_size;
  if (o.query_len > 0) {
    if (batch * o.query_len > tokens)
      fail("kv batch: {} sequences of {} query tokens exceed the {} tokens of the graph", batch, o.query_len, tokens);
    p.query_lens.assign(static_cast<size_t>(batch), o.query_len);
  } else {
    if (batch > tokens) fail("kv batch: {} sequences need at least {} tokens, the graph has {}", batch, batch, tokens);
    p.query_lens.assign(static_cast<size_t>(batch - 1), 1);
    p.query_lens.push_back(tokens - (batch - 1));
  }
  const int64_t bs = block_size;
  const std::vector<int64_t> varied = {bs + 1, 1, 2 * bs, 3 * bs - 1, bs, 2 * bs + 3, 7};
  for (int64_t b = 0; b < batch; ++b) {
    int64_t ql = p.query_lens[b];
    int64_t ctx = o.context > 0 ? o.context : (o.query_len == 0 && ql == 1 ? varied[b % varied.size()] : ql);
    if (ctx < ql) fail("kv batch: --kv-context {} is shorter than the {} query tokens of sequence {}", ctx, ql, b);
    p.context_lens.push_back(ctx);
  }
  return p;
}

int64_t kvBlocksNeeded(const KvBatchPlan& plan, bool sum) {
  int64_t total = 0, most = 0;
  for (int64_t ctx : plan.context_lens) {
    int64_t n = (ctx + plan.block_size - 1) / plan.block_size;
    total += n;
    most = std::max(most, n);
  }
  return sum ? total : most;
}

namespace {

// Elements of placeKvBlocks' host vectors: a block id per cache block, the block table, a slot
// per token.
int64_t metadataElements(const KvBatchPlan& p, int64_t num_blocks, int64_t max_blocks) {
  const char* what = "kv batch metadata";
  return ir::addOrFail(ir::addOrFail(num_blocks, ir::mulOrFail(p.batch(), max_blocks, what), what), p.tokens, what);
}

}  // namespace

void placeKvBlocks(KvBatchPlan& p, int64_t num_blocks, int64_t max_blocks, uint64_t seed) {
  if (max_blocks < kvBlocksNeeded(p, false) || num_blocks < kvBlocksNeeded(p, true))
    fail("kv batch: {} needs {} blocks per sequence and {} in all; the bindings give {} and {}", p.describe(),
         kvBlocksNeeded(p, false), kvBlocksNeeded(p, true), max_blocks, num_blocks);
  // Refused before the vectors are built: a billion-key context is one line, not minutes of
  // shuffling gigabytes of block ids first.
  Storage::requireRoomFor(metadataElements(p, num_blocks, max_blocks),
                          fmt::format("the block table and slot mapping of {} sequences", p.batch()));
  p.num_blocks = num_blocks;
  p.max_blocks = max_blocks;
  std::vector<int64_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 rng(seed ^ 0x6b765f626c6f636bULL);
  for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng() % i]);
  p.block_table.assign(static_cast<size_t>(p.batch() * max_blocks), 0);
  size_t next = 0;
  for (int64_t b = 0; b < p.batch(); ++b)
    for (int64_t j = 0; j * p.block_size < p.context_lens[b]; ++j) p.block_table[b * max_blocks + j] = ids[next++];
  p.slots.assign(static_cast<size_t>(p.tokens), -1);
  int64_t token = 0;
  for (int64_t b = 0; b < p.batch(); ++b) {
    int64_t ql = p.query_lens[b], ctx = p.context_lens[b];
    for (int64_t i = 0; i < ql; ++i, ++token) {
      int64_t pos = ctx - ql + i;
      p.slots[token] = p.block_table[b * max_blocks + pos / p.block_size] * p.block_size + pos % p.block_size;
    }
  }
}

Tensor kvMetadataTensor(const KvBatchPlan& p, const std::string& arg, const Shape& shape, DType dtype) {
  std::vector<int64_t> v;
  if (arg == "slot_mapping") {
    v = p.slots;
  } else if (arg == "block_table") {
    v = p.block_table;
  } else if (arg == "seq_lens") {
    v = p.context_lens;
  } else if (arg == "query_start_loc") {
    v.push_back(0);
    for (int64_t ql : p.query_lens) v.push_back(v.back() + ql);
  } else {
    fail("kv batch: unknown metadata argument '{}'", arg);
  }
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  if (n != static_cast<int64_t>(v.size()))
    fail("kv batch: {} has shape {} but the batch plan gives {} values", arg, shapeStr(shape), v.size());
  return Tensor::fromValues(shape, dtype, std::vector<double>(v.begin(), v.end()));
}

namespace {

const ir::Node* firstPagedAttention(const ir::Graph& g) {
  for (const auto& n : g.nodes())
    if (n->target.rfind("fxfuse.paged_attention", 0) == 0) return n.get();
  return nullptr;
}

// The bare symbol of dim `d` of operand `arg` of `n`, or "".
std::string symbolOf(const ir::Node& n, const char* arg, size_t d) {
  const ir::Value* v = n.input(arg);
  if (!v || !v->isTensor() || v->type.rank() <= d) return {};
  const ir::SymExpr& e = v->type.shape[d];
  return e.kind() == ir::SymExpr::Kind::Sym ? e.name() : std::string();
}

// Token-count symbols of every paged_attention (query, key, value, slot_mapping): one T.
std::set<std::string> tokenSymbols(const ir::Graph& g) {
  std::set<std::string> out;
  for (const auto& n : g.nodes())
    if (n->target.rfind("fxfuse.paged_attention", 0) == 0)
      for (const char* arg : {"query", "key", "value", "slot_mapping"})
        if (std::string s = symbolOf(*n, arg, 0); !s.empty()) out.insert(s);
  return out;
}

}  // namespace

void Interpreter::planKvBatch() {
  const ir::Node* n = firstPagedAttention(*entry_);
  if (!n) return;
  const KvBatchOptions& o = options_.kv;
  auto bound = [&](const std::string& sym) { return !sym.empty() && env_source_[sym] == "--bind"; };
  auto dim = [&](const char* arg, size_t d) {
    const ir::Value* v = n->input(arg);
    if (!v || !v->isTensor() || v->type.rank() <= d) fail("node '{}': paged_attention has no {} dim {}", n->name, arg, d);
    return evalSize(v->type.shape[d], fmt::format("'{}' of {}", arg, n->name));
  };
  auto bindKv = [&](const std::string& sym, int64_t v) {
    if (sym.empty() || bound(sym)) return;
    env_[sym] = v;
    env_source_[sym] = "kv batch";
  };
  std::string seqs_sym = symbolOf(*n, "seq_lens", 0), max_sym = symbolOf(*n, "block_table", 1);
  std::string blocks_sym = symbolOf(*n, "key_cache", 0);
  int64_t batch = bound(seqs_sym) || seqs_sym.empty() ? dim("seq_lens", 0) : o.batch;
  int64_t tokens = dim("slot_mapping", 0);
  std::set<std::string> token_syms = tokenSymbols(*entry_);
  for (const auto& s : token_syms)
    if (bound(s)) tokens = env_[s];
  if (o.query_len > 0 && !symbolOf(*n, "slot_mapping", 0).empty() && !bound(symbolOf(*n, "slot_mapping", 0)))
    tokens = (batch > 0 ? batch : 4) * o.query_len;
  for (const auto& s : token_syms) bindKv(s, tokens);
  tokens = dim("slot_mapping", 0);
  if (batch <= 0) batch = std::min<int64_t>(4, tokens);
  KvBatchPlan plan = planKvLengths(tokens, batch, dim("key_cache", 1), o);
  bindKv(seqs_sym, batch);
  bindKv(max_sym, std::max<int64_t>(1, kvBlocksNeeded(plan, false)));
  bindKv(blocks_sym, kvBlocksNeeded(plan, true) + 2);  // spare blocks: the ids are not 0..n-1
  // The K and V caches this batch binds, with the metadata, before any of it is built.
  int64_t elements = metadataElements(plan, dim("key_cache", 0), dim("block_table", 1));
  int64_t cache = 2;
  for (size_t d = 0; d < n->input("key_cache")->type.rank(); ++d)
    cache = ir::mulOrFail(cache, dim("key_cache", d), "kv batch: the key and value caches");
  Storage::requireRoomFor(ir::addOrFail(elements, cache, "kv batch"),
                          fmt::format("the KV caches and batch metadata of node '{}' ({}, {} sequences)", n->name,
                                      n->target, plan.batch()));
  placeKvBlocks(plan, dim("key_cache", 0), dim("block_table", 1), options_.seed);
  kv_plan_ = std::move(plan);
}

}  // namespace fxfuse::interp
