// The float64 attention reference on hand-computed cases (softmax weights, no keys -> NaN).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tests/kernels/attention/reference_attention.h"

using fxfuse::attention::testing::AttendRow;

TEST_CASE("reference attention: two keys, softmax weights") {
  const float q[2] = {1.0f, 0.0f};
  const float k0[2] = {0.0f, 0.0f}, k1[2] = {2.0f, 0.0f};
  const float v0[2] = {1.0f, 0.0f}, v1[2] = {0.0f, 1.0f};
  double out[2];
  AttendRow(q, {k0, k1}, {v0, v1}, 2, 0.5, out);
  // scores 0 and 1: weights 1/(1+e), e/(1+e)
  const double w1 = std::exp(1.0) / (1.0 + std::exp(1.0));
  CHECK(out[0] == Approx(1.0 - w1).epsilon(1e-12));
  CHECK(out[1] == Approx(w1).epsilon(1e-12));
}

TEST_CASE("reference attention: large scores stay finite, no keys give NaN") {
  const float q[1] = {1000.0f};
  const float k0[1] = {1000.0f}, k1[1] = {999.0f};
  const float v0[1] = {3.0f}, v1[1] = {5.0f};
  double out[1];
  AttendRow(q, {k0, k1}, {v0, v1}, 1, 1.0, out);
  CHECK(std::isfinite(out[0]));
  CHECK(out[0] == Approx(3.0).margin(1e-12));  // exp(-1000) weight on v1
  AttendRow(q, {}, {}, 1, 1.0, out);
  CHECK(std::isnan(out[0]));
}
