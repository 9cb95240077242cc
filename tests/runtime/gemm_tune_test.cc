// Which runner-up cuBLASLt algorithms the captured step may time instead of the tuned pick
// (runtime::inStepAlternatives, docs/runtime.md "Timed in the step"), without a GPU: the rule
// works on the alone times only.
#include <catch2/catch.hpp>

#include <vector>

#include "compiler/runtime/gemm_tune.h"

namespace rt = fxfuse::runtime;

TEST_CASE("runner-ups are the fastest others within the window, fastest first", "[runtime][gemm]") {
  // pick 2 (10 us); 12.4 and 12.5 are inside 1.25x, 12.6 is not; -1 did not run.
  const std::vector<double> us = {12.5, 11.0, 10.0, -1.0, 12.6, 10.5, 12.4};
  CHECK(rt::inStepAlternatives(us, 2) == std::vector<int>{5, 1, 6});  // at most kInStepGemmAlternatives
  static_assert(rt::kInStepGemmAlternatives == 3, "the case above lists three");
}

TEST_CASE("a pick that is not the fastest gets the faster ones as runner-ups", "[runtime][gemm]") {
  // The split-K-free pick (kSplitKPreference) can be slower than a split-K candidate.
  const std::vector<double> us = {10.0, 10.2, 30.0};
  CHECK(rt::inStepAlternatives(us, 1) == std::vector<int>{0});
  CHECK(rt::inStepAlternatives(us, 0) == std::vector<int>{1});
}

TEST_CASE("no runner-ups without a timed pick or others in the window", "[runtime][gemm]") {
  CHECK(rt::inStepAlternatives({10.0}, 0).empty());
  CHECK(rt::inStepAlternatives({10.0, 12.6, -1.0}, 0).empty());
  CHECK(rt::inStepAlternatives({-1.0, 10.0}, 0).empty());  // the pick did not run
  CHECK(rt::inStepAlternatives({10.0, 10.0}, 5).empty());  // no such candidate
  CHECK(rt::inStepAlternatives({}, 0).empty());
}

TEST_CASE("equal times keep the heuristic's order", "[runtime][gemm]") {
  CHECK(rt::inStepAlternatives({10.0, 11.0, 11.0, 11.0, 11.0}, 0) == std::vector<int>{1, 2, 3});
}

TEST_CASE("cuBLASLt's first choice is always a candidate in the step", "[runtime][gemm]") {
  // Outside the window (15 > 1.25 x 10): still timed in the step, after the runner-ups.
  CHECK(rt::inStepAlternatives({15.0, 10.0, 11.0}, 1, 0) == std::vector<int>{2, 0});
  // Past kInStepGemmAlternatives: one more.
  CHECK(rt::inStepAlternatives({12.0, 10.0, 11.0, 11.0, 11.0}, 1, 0) == std::vector<int>{2, 3, 4, 0});
  // Already a runner-up, or the pick itself: not twice.
  CHECK(rt::inStepAlternatives({11.0, 10.0}, 1, 0) == std::vector<int>{0});
  CHECK(rt::inStepAlternatives({10.0, 11.0}, 0, 0) == std::vector<int>{1});
  // It did not run, or there is no such candidate: nothing added.
  CHECK(rt::inStepAlternatives({-1.0, 10.0}, 1, 0).empty());
  CHECK(rt::inStepAlternatives({20.0, 10.0}, 1, 7).empty());
}
