// Where a session prefetches matmul weights into L2 (compiler/runtime/weight_prefetch.h), and
// which plan memory no step writes (lowering::readOnlyInPlan) or only the next step reads
// (lowering::onlyNextStepReads),
// without a GPU: on a hand-made plan (the rules one by one) and on the plan of a real FP8
// decoder layer (every weight GEMM gets its prefetch, forked right after the previous GEMM).
#include <catch2/catch.hpp>

#include <cstdlib>

#include "compiler/lowering/lowering.h"
#include "compiler/runtime/weight_prefetch.h"
#include "ir/io.h"
#include "passes/pipeline/pipeline.h"

using namespace fxfuse;
using fxfuse::runtime::PlanWeightPrefetches;
using fxfuse::runtime::PrefetchBytes;
using fxfuse::runtime::PrefetchCapBytes;
namespace pb = fxfuse::plan::v1;

namespace {

// A plan with one input per role in `roles`, each in its own buffer and tensor (ids = index).
pb::Plan planWithInputs(const std::vector<pb::IoRole>& roles) {
  pb::Plan p;
  for (size_t i = 0; i < roles.size(); ++i) {
    auto* in = p.add_inputs();
    in->set_role(roles[i]);
    auto* b = p.add_buffers();
    b->set_id(static_cast<int>(i));
    b->set_kind(pb::INPUT);
    b->set_input(static_cast<int>(i));
    auto* t = p.add_tensors();
    t->set_id(static_cast<int>(i));
    t->set_buffer(static_cast<int>(i));
  }
  return p;
}

// The plan of a test graph after the default passes (with a KV cache of `kv_cache` when set).
pb::Plan planOf(const std::string& path, const std::string& kv_cache) {
  auto m = ir::loadModule(path);
  compiler::CompileOptions options;
  options.kv_cache_dtype = kv_cache;
  compiler::compileModule(*m, options);
  return lowering::lowerModule(*m, lowering::LowerOptions{});
}

void addKernel(pb::Plan& p) { p.add_steps()->mutable_kernel()->set_kernel("lib.rms_norm"); }

void addMatmul(pb::Plan& p, int a, int b) {
  auto* mm = p.add_steps()->mutable_matmul();
  mm->set_a(a);
  mm->set_b(b);
}

}  // namespace

TEST_CASE("weight prefetch: forked after the previous matmul, weights only") {
  // tensors: 0 activation (user input), 1 and 2 weights (parameter, constant), 3 a buffer
  pb::Plan p = planWithInputs({pb::USER_INPUT, pb::PARAMETER, pb::CONSTANT, pb::BUFFER});
  addKernel(p);        // 0
  addMatmul(p, 0, 1);  // 1: forked at 0
  addKernel(p);        // 2
  addKernel(p);        // 3
  addMatmul(p, 0, 2);  // 4: forked at 2 (the first step after matmul 1)
  addMatmul(p, 0, 1);  // 5: right after a matmul: none
  addKernel(p);        // 6
  addMatmul(p, 0, 3);  // 7: a mutable buffer, not a weight: none
  addKernel(p);        // 8
  addMatmul(p, 2, 0);  // 9: the weight as operand a: forked at 8
  const auto w = PlanWeightPrefetches(p);
  REQUIRE(w.size() == 3);
  CHECK((w[0].fork_step == 0 && w[0].matmul_step == 1 && w[0].tensor == 1));
  CHECK((w[1].fork_step == 2 && w[1].matmul_step == 4 && w[1].tensor == 2));
  CHECK((w[2].fork_step == 8 && w[2].matmul_step == 9 && w[2].tensor == 2));
}

TEST_CASE("weight prefetch: forked with the previous matmul") {
  pb::Plan p = planWithInputs({pb::USER_INPUT, pb::PARAMETER});
  addKernel(p);        // 0
  addMatmul(p, 0, 1);  // 1: forked at 0
  addMatmul(p, 0, 1);  // 2: forked at 1, the previous matmul, even back to back
  addKernel(p);        // 3
  addMatmul(p, 0, 1);  // 4: forked at 2
  const auto w = PlanWeightPrefetches(p, fxfuse::runtime::PrefetchFork::kWithPreviousMatmul);
  REQUIRE(w.size() == 3);
  CHECK((w[0].fork_step == 0 && w[0].matmul_step == 1));
  CHECK((w[1].fork_step == 1 && w[1].matmul_step == 2));
  CHECK((w[2].fork_step == 2 && w[2].matmul_step == 4));
}

TEST_CASE("weight prefetch: a plan starting with a matmul, and malformed references") {
  pb::Plan p = planWithInputs({pb::USER_INPUT, pb::PARAMETER});
  addMatmul(p, 0, 1);   // step 0: nothing runs before it, no window to prefetch in
  addKernel(p);
  addMatmul(p, 0, 7);   // tensor out of range: skipped
  addKernel(p);
  addMatmul(p, 0, -1);  // negative: skipped
  p.mutable_tensors(1)->set_buffer(9);  // and now tensor 1's buffer is out of range too
  addKernel(p);
  addMatmul(p, 0, 1);
  CHECK(PlanWeightPrefetches(p).empty());
}

TEST_CASE("weight prefetch: bytes capped, the cap from FXFUSE_PREFETCH_MB (off without it)") {
  CHECK(PrefetchBytes(100, 40) == 40);
  CHECK(PrefetchBytes(30, 40) == 30);
  CHECK(PrefetchBytes(30, 0) == 0);
  CHECK(PrefetchBytes(0, 40) == 0);
  unsetenv("FXFUSE_PREFETCH_MB");
  CHECK(PrefetchCapBytes(50 << 20) == 0);  // off by default
  setenv("FXFUSE_PREFETCH_MB", "l2", 1);
  CHECK(PrefetchCapBytes(50 << 20) == 25 << 20);
  setenv("FXFUSE_PREFETCH_MB", "8", 1);
  CHECK(PrefetchCapBytes(50 << 20) == 8 << 20);
  setenv("FXFUSE_PREFETCH_MB", "0", 1);
  CHECK(PrefetchCapBytes(50 << 20) == 0);
  setenv("FXFUSE_PREFETCH_MB", "lots", 1);  // not a number: off
  CHECK(PrefetchCapBytes(50 << 20) == 0);
  unsetenv("FXFUSE_PREFETCH_MB");
}

TEST_CASE("weight prefetch: every weight GEMM of an FP8 decoder layer plan") {
  auto m = ir::loadModule("tests/plans/decoder_fp8.fxg");
  compiler::compileModule(*m, compiler::CompileOptions{});
  const pb::Plan plan = lowering::lowerModule(*m, lowering::LowerOptions{});
  std::vector<int> matmuls;
  for (int i = 0; i < plan.steps_size(); ++i)
    if (plan.steps(i).has_matmul()) matmuls.push_back(i);
  REQUIRE(matmuls.size() >= 4);  // qkv, o, gate/up, down
  const auto w = PlanWeightPrefetches(plan);
  CHECK(w.size() >= 3);
  INFO("matmul steps: " << matmuls.size() << ", prefetches: " << w.size());
  size_t next = 0;
  for (size_t j = 0; j < matmuls.size(); ++j) {
    const int prev_end = j == 0 ? 0 : matmuls[j - 1] + 1;
    if (prev_end == matmuls[j]) continue;  // back to back: none
    REQUIRE(next < w.size());
    CHECK(w[next].matmul_step == matmuls[j]);
    CHECK(w[next].fork_step == prev_end);
    const int weight = plan.steps(matmuls[j]).matmul().b();
    CHECK(w[next].tensor == weight);
    const auto& buffer = plan.buffers(plan.tensors(weight).buffer());
    CHECK(buffer.kind() == pb::INPUT);
    CHECK(plan.inputs(buffer.input()).role() == pb::PARAMETER);
    ++next;
  }
  CHECK(next == w.size());
}

// lowering::readOnlyInPlan: what a kernel may read before it waits for the kernels still running
// (the weight prefetch above, and the small-M GEMM's weight ring under programmatic launch).
TEST_CASE("read-only memory: inputs that no step writes") {
  pb::Plan p = planWithInputs({pb::USER_INPUT, pb::PARAMETER, pb::CONSTANT, pb::BUFFER, pb::PARAMETER});
  auto* arena = p.add_buffers();  // buffer 5: the arena, tensor 5
  arena->set_id(5);
  arena->set_kind(pb::ARENA);
  p.add_tensors()->set_buffer(5);
  auto* view = p.add_tensors();  // tensor 6: another view of the parameter in buffer 1
  view->set_buffer(1);
  auto* mutation = p.add_outputs();  // the parameter of buffer 4 updated in place
  mutation->set_role(pb::MUTATION);
  mutation->set_tensor(4);
  auto* user_output = p.add_outputs();  // an output that is an input (returned as it is): not a write
  user_output->set_role(pb::USER_OUTPUT);
  user_output->set_tensor(3);
  CHECK(lowering::readOnlyInPlan(p, 0));  // a user input: the weights of a vLLM dump are ones
  CHECK(lowering::readOnlyInPlan(p, 1));
  CHECK(lowering::readOnlyInPlan(p, 2));
  CHECK(lowering::readOnlyInPlan(p, 3));
  CHECK_FALSE(lowering::readOnlyInPlan(p, 4));  // written by the plan through its mutation output
  CHECK_FALSE(lowering::readOnlyInPlan(p, 5));  // the arena: every step's outputs
  CHECK(lowering::readOnlyInPlan(p, 6));
  CHECK_FALSE(lowering::readOnlyInPlan(p, 7));  // malformed references
  CHECK_FALSE(lowering::readOnlyInPlan(p, -1));
  p.mutable_tensors(1)->set_buffer(42);
  CHECK_FALSE(lowering::readOnlyInPlan(p, 1));
}

TEST_CASE("read-only memory: FP8 weights of a layer, and a weight quantized in the graph") {
  auto weightOfEachMatmul = [](const std::string& path) {
    const pb::Plan plan = planOf(path, "");
    std::vector<bool> read_only;
    for (const pb::Step& s : plan.steps())
      if (s.has_matmul()) read_only.push_back(lowering::readOnlyInPlan(plan, s.matmul().b()));
    return read_only;
  };
  CHECK(weightOfEachMatmul("tests/plans/decoder_fp8.fxg") == std::vector<bool>{true, true, true, true});
  // The weight is the output of the quant step before the matmul (an arena buffer).
  CHECK(weightOfEachMatmul("tests/plans/fp8_weight_quantized_in_graph.fxg") == std::vector<bool>{false});
}

TEST_CASE("read-only memory: the KV caches a paged plan updates in place") {
  const pb::Plan plan = planOf("tests/plans/paged_attention.fxg", "bf16");
  int caches = 0, queries = 0;
  for (const pb::Step& s : plan.steps())
    for (const pb::KernelArg& a : s.kernel().args()) {
      if (a.name() == "key_cache" || a.name() == "value_cache") {
        CHECK_FALSE(lowering::readOnlyInPlan(plan, a.tensor()));
        ++caches;
      }
      if (s.kernel().kernel() == "rt.paged_attention" && a.name() == "block_table") {
        CHECK(lowering::readOnlyInPlan(plan, a.tensor()));  // metadata: the caller's, never written
        ++queries;
      }
    }
  CHECK(caches >= 4);  // the cache write's and the attention's
  CHECK(queries >= 1);
}

// lowering::onlyNextStepReads: which intermediates a runtime fusion of two steps need not write
// (the gated-SiLU epilogue, the attention's rotary prologue), on the FP8 decoder layer's plan.
TEST_CASE("only the next step reads: the layer's rotated rows and gate/up rows") {
  const pb::Plan plan = planOf("tests/plans/decoder_fp8.fxg", "");
  auto argOf = [&](int step, const std::string& name) {
    for (const auto& a : plan.steps(step).kernel().args())
      if (a.name() == name) return a.tensor();
    FAIL("step " << step << " has no argument " << name);
    return -1;
  };
  REQUIRE(plan.steps(2).kernel().kernel() == "rt.reshape_and_cache");
  REQUIRE(plan.steps(3).kernel().kernel() == "rt.attention");
  REQUIRE(plan.steps(7).kernel().kernel() == "lib.silu_and_mul");
  const int rotated = argOf(2, "query_out"), attention_out = argOf(3, "out");
  CHECK(lowering::onlyNextStepReads(plan, 2, rotated, attention_out));
  CHECK(lowering::onlyNextStepReads(plan, 6, plan.steps(6).matmul().d(), argOf(7, "output")));
  CHECK_FALSE(lowering::onlyNextStepReads(plan, 1, rotated, attention_out));  // another writer
  CHECK_FALSE(lowering::onlyNextStepReads(plan, 1, plan.steps(1).matmul().d(), argOf(2, "query_out")));  // qkv rows: V is read at step 3 too
  CHECK_FALSE(lowering::onlyNextStepReads(plan, 2, rotated, rotated));  // the reader writes there
  CHECK_FALSE(lowering::onlyNextStepReads(plan, 0, plan.inputs(0).tensor(), attention_out));  // not the arena
  CHECK_FALSE(lowering::onlyNextStepReads(plan, 2, -1, attention_out));
}
