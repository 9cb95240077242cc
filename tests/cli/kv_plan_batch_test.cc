// `fxfuse bench` sets up a kv-cache plan's serving batch from the plan alone
// (planKvBatchOfPlan); `verify` and `run` take it from the interpreter
// (Interpreter::planKvBatch). Both must choose the same batch and bind the same symbols for
// the same flags, or a benchmark would time another batch than the one parity checked.
#include <catch2/catch.hpp>

#include <string>

#include "compiler/lowering/lowering.h"
#include "ir/io.h"
#include "ir/status.h"
#include "passes/pipeline/pipeline.h"
#include "tools/cli/kv_options.h"
#include "tools/interpreter/interpreter.h"

namespace {

using namespace fxfuse;

constexpr const char* kGraph = "tests/passes/serve/kv_cache_bf16.fxg";

struct Lowered {
  std::unique_ptr<ir::Module> module;
  plan::v1::Plan plan;
};

Lowered lowerWithCache(int64_t block_size) {
  Lowered l;
  l.module = ir::loadModule(kGraph);
  compiler::CompileOptions co;
  co.kv_cache_dtype = "bf16";
  co.kv_block_size = block_size;
  compiler::compileModule(*l.module, co);
  lowering::LowerOptions lo;
  lo.source = kGraph;
  l.plan = lowering::lowerModule(*l.module, lo);
  return l;
}

void expectSameBatch(const interp::KvBatchOptions& o, std::map<std::string, int64_t> binds) {
  Lowered l = lowerWithCache(16);
  interp::Options io;
  io.bind = binds;
  io.kv = o;
  io.seed = 1234u;
  interp::Interpreter in(*l.module, io);
  REQUIRE(in.kvPlan() != nullptr);
  auto bench = cli::planKvBatchOfPlan(l.plan, binds, o, 1234u);
  REQUIRE(bench.has_value());
  const interp::KvBatchPlan& want = *in.kvPlan();
  CHECK(bench->describe() == want.describe());
  CHECK(bench->query_lens == want.query_lens);
  CHECK(bench->context_lens == want.context_lens);
  CHECK(bench->block_table == want.block_table);
  CHECK(bench->slots == want.slots);
  for (const char* sym : {"kv_num_seqs", "kv_max_blocks", "kv_num_blocks"}) {
    INFO(sym);
    REQUIRE(binds.count(sym));
    CHECK(binds.at(sym) == in.bindings().at(sym));
  }
}

}  // namespace

TEST_CASE("bench's batch is the interpreter's: the default decode rows and one prefill") {
  expectSameBatch({}, {});
}

TEST_CASE("bench's batch is the interpreter's: a decode-only batch of 8 over 1000 tokens") {
  interp::KvBatchOptions o;
  o.batch = 8;
  o.query_len = 1;
  o.context = 1000;
  expectSameBatch(o, {});
}

TEST_CASE("bench's batch is the interpreter's: --bind of the token count with a fixed context") {
  interp::KvBatchOptions o;
  o.batch = 3;
  o.context = 40;
  expectSameBatch(o, {{"s0", 12}});
}

TEST_CASE("a kv-cache plan whose batch does not fit is refused in one line") {
  Lowered l = lowerWithCache(16);
  interp::KvBatchOptions o;
  o.batch = 5;
  o.query_len = 4;
  std::map<std::string, int64_t> binds = {{"s0", 8}};  // 5 x 4 query tokens > 8
  CHECK_THROWS_AS(cli::planKvBatchOfPlan(l.plan, binds, o, 1), FxError);
}

TEST_CASE("plans without paged steps have no serving batch") {
  auto m = ir::loadModule(kGraph);
  compiler::CompileOptions co;
  compiler::compileModule(*m, co);
  lowering::LowerOptions lo;
  const plan::v1::Plan plan = lowering::lowerModule(*m, lo);
  std::map<std::string, int64_t> binds;
  CHECK_FALSE(cli::planKvBatchOfPlan(plan, binds, {}, 1).has_value());
  CHECK(binds.empty());
  CHECK(cli::pagedPlanInputs(plan).empty());
}
