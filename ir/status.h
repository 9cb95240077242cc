// Error type used across fxfuse. Every user-facing failure (bad input file, unknown op in a
// strict context, shape contradiction) is an FxError whose message is one line naming the
// file, the member or node, and what is wrong. The CLI prints it and exits with code 2.
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace fxfuse {

class FxError : public std::runtime_error {
 public:
  explicit FxError(const std::string& msg) : std::runtime_error(msg) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw FxError(fmt::format(f, std::forward<Args>(args)...));
}

// `text` made safe for one terminal line: control characters (CR, LF, ESC, ...) and DEL
// escaped as \n, \r, \t or \xHH, and at most `max_chars` bytes kept. Every error the CLI
// prints goes through this, since messages quote names and bytes from input files.
inline std::string printableMessage(std::string_view text, size_t max_chars = 2000) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.remove_suffix(1);
  std::string out;
  size_t i = 0;
  for (; i < text.size() && out.size() < max_chars; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size() - i) + " more bytes)";
  return out;
}

}  // namespace fxfuse
