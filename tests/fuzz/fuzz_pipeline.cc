// Fuzz target: the whole pipeline past the readers. A `.fxg` text goes through import ->
// verifier -> every pass (default pipeline, verifier after each) -> the CPU interpreter on
// small shapes (before and after compilation) -> lowering to a launch plan -> plan text
// round trip. Then the serving form of the same text (`--kv-cache`): the kv-cache pass turns
// vLLM's attention into paged attention over a KV cache, the interpreter runs a serving batch
// it plans itself, and the paged plan is lowered and round-tripped. Any stage may reject the
// input with FxError; anything else (a crash, a sanitizer report, another exception, a plan
// whose text form does not parse back to the same plan) is a finding.
//
// LLVMFuzzerCustomMutator (fxg_mutator.h) mutates the text structurally: op targets from the
// built-in op schema table, dimensions, symbols, dtypes, operands and attribute nesting.
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tools/interpreter/interpreter.h"
#include "compiler/lowering/lowering.h"
#include "passes/pipeline/pipeline.h"
#include "ir/fxg.h"
#include "ir/status.h"
#include "ir/validate.h"
#include "ir/verifier.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fxg_mutator.h"

namespace {

using fxfuse::FxError;
namespace ir = fxfuse::ir;
namespace interp = fxfuse::interp;

// Interpreter work cap: every tensor of the graph, evaluated at the bound sizes, must have at
// most this many elements, else the graph is not interpreted (passes and lowering still run).
constexpr int64_t kMaxElements = 1 << 14;
constexpr int64_t kSmallSymbol = 4;

bool smallTensor(interp::Interpreter& in, const ir::Value* v) {
  if (!v || !v->isTensor()) return true;
  interp::Shape s = in.evalShape(v->type.shape, "fuzz");
  int64_t numel = 1;
  for (int64_t d : s) {
    if (d < 0 || d > kMaxElements) return false;
    numel *= d == 0 ? 1 : d;
    if (numel > kMaxElements) return false;
  }
  return true;
}

bool smallEnough(interp::Interpreter& in, const ir::Graph& g) {
  for (const auto& input : g.inputs())
    if (!smallTensor(in, input.value)) return false;
  for (const auto& n : g.nodes())
    for (const auto* v : n->outputs())
      if (!smallTensor(in, v)) return false;
  return true;
}

// Runs the entry graph on seeded inputs with the symbols in `bind` (all of the module's when
// null) bound small; the serving form leaves the batch symbols the kv-cache pass adds to the
// interpreter's serving batch. FxError is a clean rejection (an op the interpreter does not
// support, a shape it cannot evaluate).
void interpretSmall(ir::Module& m, const std::set<std::string>* bind = nullptr, const interp::KvBatchOptions& kv = {}) {
  interp::Options o;
  o.default_symbol_size = kSmallSymbol;
  o.world_size = 2;
  o.kv = kv;
  for (const auto& [name, info] : m.symbols.all()) {
    if (bind && !bind->count(name)) continue;
    int64_t v = kSmallSymbol;
    if (info.min && v < *info.min) v = *info.min;
    if (info.max && v > *info.max) v = *info.max;
    o.bind[name] = v;
  }
  try {
    interp::Interpreter in(m, o);
    if (!smallEnough(in, in.entry())) return;
    auto inputs = in.makeInputs(1);
    (void)in.run(inputs);
  } catch (const FxError&) {
  } catch (const std::bad_alloc&) {
    // the CLI reports this as "out of memory", exit 2: a clean rejection here too
  }
}

void lowerAndRoundTrip(ir::Module& m) {
  fxfuse::lowering::LowerOptions lo;
  lo.source = "fuzz.fxg";
  fxfuse::plan::v1::Plan plan;
  try {
    plan = fxfuse::lowering::lowerModule(m, lo);
  } catch (const FxError&) {
    return;
  }
  std::string text = fxfuse::lowering::planToText(plan);
  fxfuse::plan::v1::Plan again;
  try {
    again = fxfuse::lowering::parsePlan(text, /*text=*/true, "plan.txt");
  } catch (const FxError& e) {
    fxfuse::fuzz::finding("lowered plan's text form does not parse back", std::string(e.what()) + "\n" + text);
  }
  if (fxfuse::lowering::planToText(again) != text) fxfuse::fuzz::finding("plan text round trip differs", text);
  (void)fxfuse::lowering::describePlan(again);
}

// What the CLI's compute commands do after import (ir::loadModuleForCompute): validation at
// the door, the verifier, every op node against its schema. Null when the text is rejected.
std::unique_ptr<ir::Module> importChecked(std::string_view text) {
  try {
    std::unique_ptr<ir::Module> m = ir::parseFxg(text, "fuzz.fxg");
    ir::validateModule(*m, "fuzz.fxg");
    ir::verifyOrThrow(*m, "fuzz.fxg");
    ir::validateNodesAgainstSchemas(*m, "fuzz.fxg");
    return m;
  } catch (const FxError&) {
    return nullptr;
  }
}

// The default pipeline (or, with `kv_cache_dtype`, the serving one); false when it rejects.
bool compiled(ir::Module& m, const std::string& kv_cache_dtype = "", int64_t kv_block_size = 16) {
  try {
    fxfuse::compiler::CompileOptions co;
    co.world_size = 2;
    co.verify_each_pass = co.check_change_flags = true;
    co.kv_cache_dtype = kv_cache_dtype;
    co.kv_block_size = kv_block_size;
    (void)fxfuse::compiler::compileModule(m, co);
    return true;
  } catch (const FxError&) {
    return false;
  }
}

bool hasPagedAttention(const ir::Module& m) {
  for (const auto& g : m.graphs())
    for (const auto& n : g->nodes())
      if (n->target.rfind("fxfuse.paged_attention", 0) == 0) return true;
  return false;
}

void pipeline(std::string_view text) {
  std::unique_ptr<ir::Module> m = importChecked(text);
  if (!m) return;
  interpretSmall(*m);
  if (!compiled(*m)) return;
  interpretSmall(*m);
  (void)ir::printFxg(*m);
  lowerAndRoundTrip(*m);
}

// The serving form (`--kv-cache`, vLLM's attention only): an FP8 cache for odd-length inputs,
// else the model dtype's (bf16 tried first, then f16: the pass takes only the model's own
// 16-bit dtype); the block size and the serving batch's query and context lengths also come
// from the input's length, so odd block sizes and prefill rows are reached; two sequences of
// short contexts keep the caches within the interpreter's cap.
std::unique_ptr<ir::Module> servingCompiled(std::string_view text) {
  static const int64_t kBlockSizes[] = {16, 1, 3, 32};
  const int64_t block_size = kBlockSizes[text.size() / 3 % 4];
  const std::vector<std::string> dtypes = text.size() % 2 ? std::vector<std::string>{"fp8"}
                                                          : std::vector<std::string>{"bf16", "f16"};
  for (const std::string& dtype : dtypes) {
    std::unique_ptr<ir::Module> m = importChecked(text);
    if (!m || !compiled(*m, dtype, block_size)) return nullptr;
    if (hasPagedAttention(*m)) return m;
  }
  return nullptr;
}

void servingForm(std::string_view text) {
  if (text.find("vllm") == std::string_view::npos) return;  // the kv-cache pass needs vLLM's attention
  std::set<std::string> user_symbols;  // the input's own symbols: the pass's kv_* are the batch's
  if (std::unique_ptr<ir::Module> m = importChecked(text))
    for (const auto& [name, info] : m->symbols.all()) user_symbols.insert(name);
  std::unique_ptr<ir::Module> m = servingCompiled(text);
  if (!m) return;
  interp::KvBatchOptions kv;
  kv.batch = 2;
  kv.query_len = 1 + static_cast<int64_t>(text.size() / 12 % 2);  // decode, or two tokens each
  kv.context = 2 + static_cast<int64_t>(text.size() / 24 % 5);      // never shorter than the queries
  interpretSmall(*m, &user_symbols, kv);
  (void)ir::printFxg(*m);
  lowerAndRoundTrip(*m);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  return fxfuse::fuzz::runStages("the pipeline", [&] {
    pipeline(text);
    servingForm(text);
  });
}
