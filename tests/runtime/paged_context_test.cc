// Which paged-attention steps read their context ahead of the kernel before them
// (compiler/runtime/paged_context.h), without a GPU: on the plan of a served paged layer
// (attention after its rotary cache write: reads ahead), then on that plan with one fact changed
// at a time (a metadata input or a cache named by an earlier non-paged step, metadata that is
// not a plan input, the switch off): never.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "compiler/lowering/lowering.h"
#include "compiler/runtime/paged_context.h"
#include "ir/io.h"
#include "passes/pipeline/pipeline.h"

using namespace fxfuse;
using fxfuse::runtime::PagedContextSettled;
namespace pb = fxfuse::plan::v1;

namespace {

pb::Plan servedLayerPlan() {
  auto m = ir::loadModule("tests/plans/paged_attention_rotary_served.fxg");
  compiler::compileModule(*m, compiler::CompileOptions{});
  return lowering::lowerModule(*m, lowering::LowerOptions{});
}

int stepOf(const pb::Plan& plan, const std::string& kernel) {
  for (int i = 0; i < plan.steps_size(); ++i)
    if (plan.steps(i).has_kernel() && plan.steps(i).kernel().kernel() == kernel) return i;
  return -1;
}

int tensorArg(const pb::Plan& plan, int step, const std::string& name) {
  for (const auto& a : plan.steps(step).kernel().args())
    if (a.name() == name && a.v_case() == pb::KernelArg::kTensor) return a.tensor();
  return -1;
}

int firstMatmul(const pb::Plan& plan) {
  for (int i = 0; i < plan.steps_size(); ++i)
    if (plan.steps(i).has_matmul()) return i;
  return -1;
}

}  // namespace

TEST_CASE("paged context: read ahead after the layer's own cache write") {
  unsetenv("FXFUSE_PAGED_EARLY");
  const pb::Plan plan = servedLayerPlan();
  const int attention = stepOf(plan, "rt.paged_attention"), write = stepOf(plan, "rt.reshape_and_cache");
  REQUIRE(attention > 0);
  REQUIRE(write >= 0);
  REQUIRE(write < attention);  // the cache write names the caches before it: a paged step
  CHECK(PagedContextSettled(plan, attention));
  CHECK_FALSE(PagedContextSettled(plan, write));  // no batch metadata: not an attention
  CHECK_FALSE(PagedContextSettled(plan, -1));
  CHECK_FALSE(PagedContextSettled(plan, plan.steps_size()));
  setenv("FXFUSE_PAGED_EARLY", "0", 1);
  CHECK_FALSE(PagedContextSettled(plan, attention));
  unsetenv("FXFUSE_PAGED_EARLY");
}

TEST_CASE("paged context: not where an earlier step could write what is read ahead") {
  unsetenv("FXFUSE_PAGED_EARLY");
  const pb::Plan served = servedLayerPlan();
  const int attention = stepOf(served, "rt.paged_attention"), mm = firstMatmul(served);
  REQUIRE(mm >= 0);
  REQUIRE(mm < attention);
  for (const char* name : {"seq_lens", "block_table", "query_start_loc", "key_cache", "value_cache"}) {
    INFO(name << " named by the matmul before the attention");
    pb::Plan plan = served;
    plan.mutable_steps(mm)->mutable_matmul()->set_c(tensorArg(plan, attention, name));
    CHECK_FALSE(PagedContextSettled(plan, attention));
  }
  for (const char* name : {"seq_lens", "block_table", "query_start_loc"}) {
    INFO(name << " in the arena, not a plan input");
    pb::Plan plan = served;
    plan.mutable_buffers(plan.tensors(tensorArg(plan, attention, name)).buffer())->set_kind(pb::ARENA);
    CHECK_FALSE(PagedContextSettled(plan, attention));
  }
  // The same matmul naming the query instead (written before the attention, read after its wait).
  pb::Plan plan = served;
  plan.mutable_steps(mm)->mutable_matmul()->set_c(tensorArg(plan, attention, "q"));
  CHECK(PagedContextSettled(plan, attention));
}
