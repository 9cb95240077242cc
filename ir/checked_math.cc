// Checked int64 size arithmetic (checked_math.h).
#include "ir/checked_math.h"

#include <string>

#include "ir/status.h"

namespace fxfuse::ir {

namespace {

std::string listStr(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

bool anyNegative(const std::vector<int64_t>& v) {
  for (int64_t x : v)
    if (x < 0) return true;
  return false;
}

}  // namespace

std::optional<int64_t> checkedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> checkedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> checkedConvSpan(int64_t in, int64_t kernel, int64_t pad, int64_t dilation) {
  const std::optional<int64_t> twice_pad = checkedMul(2, pad);
  const std::optional<int64_t> padded = twice_pad ? checkedAdd(in, *twice_pad) : std::nullopt;
  const std::optional<int64_t> reach = checkedMul(dilation, kernel - 1);
  if (!padded || !reach || *reach == INT64_MIN) return std::nullopt;
  const std::optional<int64_t> span = checkedAdd(*padded, -*reach);
  return span ? checkedAdd(*span, -1) : std::nullopt;
}

std::optional<int64_t> checkedNumel(const std::vector<int64_t>& shape) {
  if (anyNegative(shape)) return std::nullopt;
  int64_t n = 1;
  for (int64_t s : shape)
    if (__builtin_mul_overflow(n, s, &n)) return std::nullopt;
  return n;
}

std::optional<int64_t> checkedExtent(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                                     int64_t offset) {
  if (shape.size() != strides.size() || offset < 0 || anyNegative(shape) || anyNegative(strides)) return std::nullopt;
  for (int64_t s : shape)
    if (s == 0) return 0;
  int64_t extent = 1;
  if (__builtin_add_overflow(extent, offset, &extent)) return std::nullopt;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t span;
    if (__builtin_mul_overflow(shape[i] - 1, strides[i], &span) || __builtin_add_overflow(extent, span, &extent))
      return std::nullopt;
  }
  return extent;
}

std::optional<int64_t> checkedBytes(int64_t count, int64_t element_bytes) {
  if (count < 0 || element_bytes < 0) return std::nullopt;
  return checkedMul(count, element_bytes);
}

int64_t addOrFail(int64_t a, int64_t b, std::string_view what) {
  if (auto r = checkedAdd(a, b)) return *r;
  fail("{}: {} + {} overflows int64", what, a, b);
}

int64_t mulOrFail(int64_t a, int64_t b, std::string_view what) {
  if (auto r = checkedMul(a, b)) return *r;
  fail("{}: {} * {} overflows int64", what, a, b);
}

int64_t numelOrFail(const std::vector<int64_t>& shape, std::string_view what) {
  if (anyNegative(shape)) fail("{}: negative size in {}", what, listStr(shape));
  if (auto n = checkedNumel(shape)) return *n;
  fail("{}: the element count of {} overflows int64", what, listStr(shape));
}

int64_t extentOrFail(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t offset,
                     std::string_view what) {
  if (shape.size() != strides.size())
    fail("{}: size {} and stride {} differ in rank", what, listStr(shape), listStr(strides));
  if (anyNegative(shape)) fail("{}: negative size in {}", what, listStr(shape));
  if (anyNegative(strides)) fail("{}: negative stride in {}", what, listStr(strides));
  if (offset < 0) fail("{}: negative storage offset {}", what, offset);
  if (auto e = checkedExtent(shape, strides, offset)) return *e;
  fail("{}: the storage extent of size {} stride {} overflows int64", what, listStr(shape), listStr(strides));
}

int64_t bytesOrFail(int64_t count, int64_t element_bytes, std::string_view what) {
  if (auto b = checkedBytes(count, element_bytes)) return *b;
  fail("{}: {} elements of {} bytes overflow int64", what, count, element_bytes);
}

}  // namespace fxfuse::ir
