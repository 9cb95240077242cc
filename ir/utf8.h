// Whether bytes are UTF-8 as protobuf requires of a string field (no overlong forms,
// surrogates or code points past U+10FFFF): names that reach launch plans must be, or the
// plan's binary form does not load back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace fxfuse::ir {

inline bool isUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
    if (n < 0 || (n > 0 && i + static_cast<size_t>(n) >= s.size())) return false;
    uint32_t cp = n == 0 ? c : c & (0x3fu >> n);
    for (int k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((b & 0xc0) != 0x80) return false;
      cp = cp << 6 | (b & 0x3fu);
    }
    static constexpr uint32_t kLeast[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kLeast[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += static_cast<size_t>(n) + 1;
  }
  return true;
}

}  // namespace fxfuse::ir
