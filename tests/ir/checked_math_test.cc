// Checked int64 size arithmetic: overflow and negative sizes/strides are caught, never wrapped.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "ir/checked_math.h"
#include "ir/status.h"

using fxfuse::FxError;
namespace ir = fxfuse::ir;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST_CASE("checked add and multiply", "[checked_math]") {
  CHECK(ir::checkedAdd(2, 3) == 5);
  CHECK(!ir::checkedAdd(kMax, 1));
  CHECK(ir::checkedMul(-4, 5) == -20);
  CHECK(!ir::checkedMul(int64_t{1} << 62, 2));
  CHECK(!ir::checkedMul(std::numeric_limits<int64_t>::min(), -1));
  CHECK_THROWS_WITH(ir::mulOrFail(kMax, 2, "x.fxg: input 'x'"), Catch::Contains("x.fxg: input 'x'") && Catch::Contains("overflows"));
  CHECK(ir::addOrFail(1, 2, "ctx") == 3);
}

TEST_CASE("numel: products of sizes", "[checked_math]") {
  CHECK(ir::checkedNumel({}) == 1);
  CHECK(ir::checkedNumel({2, 3, 4}) == 24);
  CHECK(ir::checkedNumel({5, 0, kMax}) == 0);
  CHECK(!ir::checkedNumel({-1, 4}));
  // 2305843009213693953 * 64 wraps to 64 in two's complement: the case that under-allocated.
  CHECK(!ir::checkedNumel({2305843009213693953, 64}));
  CHECK(!ir::checkedNumel({kMax, 2}));
  CHECK(ir::checkedNumel({kMax}) == kMax);
  CHECK_THROWS_WITH(ir::numelOrFail({4, -2}, "ctx"), Catch::Contains("negative size"));
  CHECK_THROWS_WITH(ir::numelOrFail({int64_t{1} << 62, 4}, "ctx"), Catch::Contains("overflows int64"));
}

TEST_CASE("extent: storage a strided view spans", "[checked_math]") {
  CHECK(ir::checkedExtent({2, 3}, {3, 1}) == 6);
  CHECK(ir::checkedExtent({2, 3}, {1, 2}) == 6);       // transposed
  CHECK(ir::checkedExtent({2, 3}, {3, 1}, 10) == 16);  // with an offset
  CHECK(ir::checkedExtent({0, 3}, {3, 1}) == 0);
  CHECK(ir::checkedExtent({}, {}) == 1);
  CHECK(!ir::checkedExtent({2, 3}, {-3, 1}));  // negative strides read before the storage
  CHECK(!ir::checkedExtent({2, 3}, {3, 1}, -1));
  CHECK(!ir::checkedExtent({2}, {1, 1}));      // rank mismatch
  CHECK(!ir::checkedExtent({kMax, 2}, {2, 1}));
  CHECK_THROWS_WITH(ir::extentOrFail({2, 3}, {-3, 1}, 0, "w"), Catch::Contains("negative stride"));
}

TEST_CASE("bytes: element count times element size", "[checked_math]") {
  CHECK(ir::checkedBytes(10, 2) == 20);
  CHECK(!ir::checkedBytes(kMax / 2 + 1, 2));
  CHECK(!ir::checkedBytes(-1, 4));
  CHECK_THROWS_AS(ir::bytesOrFail(kMax, 8, "t"), FxError);
}

TEST_CASE("convolution span: in + 2 * pad - dilation * (kernel - 1) - 1", "[checked_math]") {
  CHECK(ir::checkedConvSpan(16, 4, 1, 1) == 14);   // stride 2: 14 / 2 + 1 = 8 outputs
  CHECK(ir::checkedConvSpan(16, 4, 3, 1) == 18);   // the causal depthwise conv1d (pad = kernel - 1)
  CHECK(ir::checkedConvSpan(16, 3, 0, 4) == 7);    // dilation 4
  CHECK(ir::checkedConvSpan(2, 4, 0, 1) == -2);    // kernel past the input: the caller refuses
  CHECK(!ir::checkedConvSpan(16, 4, kMax, 1));     // 2 * pad overflows
  CHECK(!ir::checkedConvSpan(16, 3, 0, kMax));     // dilation * (kernel - 1) overflows
  CHECK(!ir::checkedConvSpan(kMax, 1, 1, 1));      // in + 2 * pad overflows
}
