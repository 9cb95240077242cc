// Text as a JSON string for the JSON fxfuse writes (bench and run reports, Chrome traces):
// quote and backslash escaped, control characters as \u00XX; other bytes pass through (names
// reaching reports are UTF-8: utf8.h).
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace fxfuse::ir {

// The contents of the JSON string, without the quotes around them.
inline std::string jsonEscaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", byte);
      out += code;
    } else {
      out += c;
    }
  }
  return out;
}

// The JSON string, quotes included.
inline std::string jsonString(std::string_view text) { return "\"" + jsonEscaped(text) + "\""; }

}  // namespace fxfuse::ir
