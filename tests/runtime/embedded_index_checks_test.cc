// The build-time form of the index checks (fxfuse_plan, `fxfuse embed`): each kernel the plan
// lists index sites for brings its source's `fx_index_error` in the embedded table, which
// Program::fromPlan turns into the record checkIndexErrors reads; a kernel without sites brings
// none. tests/plans/index_checks.fxg: fx_k0 (a negation) reads no index, fx_k1..fx_k4 do. Runs
// without a GPU: the table holds host addresses.
#include <catch2/catch.hpp>

#include <string>

#include "compiler/runtime/embedded.h"

extern const fxfuse::runtime::EmbeddedKernel index_checks_plan_kernels[];
extern const unsigned long index_checks_plan_num_kernels;

TEST_CASE("the embedded table carries each checking kernel's index-error record", "[runtime][embed]") {
  REQUIRE(index_checks_plan_num_kernels == 5);
  for (unsigned long i = 0; i < index_checks_plan_num_kernels; ++i) {
    const fxfuse::runtime::EmbeddedKernel& k = index_checks_plan_kernels[i];
    INFO(k.name);
    CHECK(k.function != nullptr);
    if (std::string(k.name) == "fx_k0") CHECK(k.index_error == nullptr);
    else CHECK(k.index_error != nullptr);
  }
  CHECK(index_checks_plan_kernels[index_checks_plan_num_kernels].name == nullptr);  // the end marker
}
