// Serving-batch flags and the kv-cache reference graph (kv_options.h).
#include "tools/cli/kv_options.h"

#include <algorithm>

#include "ir/status.h"
#include "passes/pipeline/pipeline.h"

namespace fxfuse::cli {

void addKvBatchFlags(CLI::App* cmd, interp::KvBatchOptions& o) {
  cmd->add_option("--kv-batch", o.batch, "paged attention: sequences in the batch (default 4, at most T)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--kv-context", o.context,
                  "paged attention: context length of every sequence (default: varied decode contexts)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--kv-query-len", o.query_len,
                  "paged attention: query tokens of every sequence (default: decode rows of 1 and one prefill)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
}

void compileKvReference(ir::Module& ref, const compiler::CompileOptions& co) {
  compiler::CompileOptions rco = co;
  rco.passes.clear();
  for (const auto& p : co.passes.empty() ? compiler::defaultPipelineFor(co) : co.passes)
    if (p.size() < 7 || p.compare(p.size() - 7, 7, "-fusion") != 0) rco.passes.push_back(p);
  compiler::compileModule(ref, rco);
}

std::map<std::string, int> pagedPlanInputs(const plan::v1::Plan& plan) {
  std::map<std::string, int> tensor_of;  // argument of the paged steps -> TensorRef
  for (const auto& st : plan.steps())
    if (st.has_kernel() && (st.kernel().kernel() == "rt.reshape_and_cache" || st.kernel().kernel() == "rt.paged_attention"))
      for (const auto& a : st.kernel().args())
        if (a.v_case() == plan::v1::KernelArg::kTensor) tensor_of.emplace(a.name(), a.tensor());
  std::map<std::string, int> input_of;
  for (const char* arg : {"slot_mapping", "block_table", "seq_lens", "query_start_loc", "key_cache"}) {
    auto t = tensor_of.find(arg);
    for (int i = 0; t != tensor_of.end() && i < plan.inputs_size(); ++i) {
      const auto& in = plan.inputs(i);
      if (in.tensor() == t->second && !in.is_scalar() && !in.is_symint()) {
        input_of.emplace(arg, i);
        break;
      }
    }
  }
  return input_of;
}

namespace {

// One dim of a paged input: its symbol (or "") and its value under `binds`, else the hint.
struct PlanDim {
  std::string symbol;
  std::optional<int64_t> value;
};

PlanDim planDim(const plan::v1::Plan& plan, int input, int d, const std::map<std::string, int64_t>& binds) {
  const auto& in = plan.inputs(input);
  if (d >= in.shape_size()) fail("kv-cache plan: input '{}' has no dim {}", in.name(), d);
  const ir::v1::SymExpr& e = in.shape(d);
  if (e.k_case() == ir::v1::SymExpr::kInt) return {"", e.int_()};
  if (e.k_case() != ir::v1::SymExpr::kSym) fail("kv-cache plan: dim {} of input '{}' is an expression", d, in.name());
  PlanDim out{e.sym(), std::nullopt};
  if (auto b = binds.find(e.sym()); b != binds.end()) {
    out.value = b->second;
    return out;
  }
  for (const auto& s : plan.symbols())
    if (s.name() == e.sym() && s.has_hint()) out.value = s.hint();
  return out;
}

int64_t known(const PlanDim& d, const char* what) {
  if (!d.value) fail("kv-cache plan: the {} ({}) has no value; pass --bind {}=N", what, d.symbol, d.symbol);
  return *d.value;
}

}  // namespace

std::optional<interp::KvBatchPlan> planKvBatchOfPlan(const plan::v1::Plan& plan, std::map<std::string, int64_t>& binds,
                                                     const interp::KvBatchOptions& o, uint64_t seed) {
  const std::map<std::string, int> in = pagedPlanInputs(plan);
  for (const char* arg : {"slot_mapping", "block_table", "key_cache"})
    if (!in.count(arg)) return std::nullopt;
  const std::map<std::string, int64_t> given = binds;  // --bind: never overridden
  auto dim = [&](const char* arg, int d) { return planDim(plan, in.at(arg), d, binds); };
  auto bind = [&](const std::string& sym, int64_t v) {
    if (!sym.empty() && !given.count(sym)) binds[sym] = v;
  };
  const PlanDim seqs = dim("block_table", 0);
  const PlanDim tokens_dim = dim("slot_mapping", 0);
  int64_t batch = seqs.symbol.empty() || given.count(seqs.symbol) ? known(seqs, "batch size") : o.batch;
  int64_t tokens = 0;
  if (!tokens_dim.symbol.empty() && !given.count(tokens_dim.symbol) && o.query_len > 0)
    tokens = (batch > 0 ? batch : 4) * o.query_len;
  else
    tokens = known(tokens_dim, "token count");
  bind(tokens_dim.symbol, tokens);
  if (batch <= 0) batch = std::min<int64_t>(4, tokens);
  interp::KvBatchPlan kv = interp::planKvLengths(tokens, batch, known(dim("key_cache", 1), "cache block size"), o);
  bind(seqs.symbol, batch);
  bind(dim("block_table", 1).symbol, std::max<int64_t>(1, interp::kvBlocksNeeded(kv, false)));
  bind(dim("key_cache", 0).symbol, interp::kvBlocksNeeded(kv, true) + 2);  // spare blocks, as the interpreter
  interp::placeKvBlocks(kv, known(dim("key_cache", 0), "cache blocks"), known(dim("block_table", 1), "block-table width"),
                        seed);
  return kv;
}

}  // namespace fxfuse::cli
