// Checked int64 arithmetic for tensor sizes, strides, element counts and byte counts.
//
// Every product or sum that sizes an allocation, an index range or a byte count read from
// an input file goes through these helpers, so a huge or negative size is an error naming
// what was being sized, never a wrapped number that later under-allocates.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace fxfuse::ir {

std::optional<int64_t> checkedAdd(int64_t a, int64_t b);
std::optional<int64_t> checkedMul(int64_t a, int64_t b);

// Product of the sizes; nullopt when a size is negative or the product overflows int64.
std::optional<int64_t> checkedNumel(const std::vector<int64_t>& shape);
// Storage elements a strided view needs: offset + 1 + sum((size - 1) * stride), or 0 when
// any size is 0. nullopt when a size, stride or the offset is negative, the ranks differ,
// or the sum overflows.
std::optional<int64_t> checkedExtent(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                                     int64_t offset = 0);
// count * element_bytes; nullopt when negative or overflowing.
std::optional<int64_t> checkedBytes(int64_t count, int64_t element_bytes);
// The span a convolution's windows can start in along one dim, `in + 2 * pad - dilation *
// (kernel - 1) - 1` (the output length is span / stride + 1 when span >= 0); nullopt when a
// term overflows int64. One home for the formula the interpreter and the lowering both use.
std::optional<int64_t> checkedConvSpan(int64_t in, int64_t kernel, int64_t pad, int64_t dilation);

// Throwing forms: an FxError "WHAT: ... overflows int64" / "... negative size".
int64_t addOrFail(int64_t a, int64_t b, std::string_view what);
int64_t mulOrFail(int64_t a, int64_t b, std::string_view what);
int64_t numelOrFail(const std::vector<int64_t>& shape, std::string_view what);
int64_t extentOrFail(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t offset,
                     std::string_view what);
int64_t bytesOrFail(int64_t count, int64_t element_bytes, std::string_view what);

}  // namespace fxfuse::ir
