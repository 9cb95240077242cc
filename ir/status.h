// Error type used across fxfuse. Every user-facing failure (bad input file, unknown op in a
// strict context, shape contradiction) is an FxError whose message is one line naming the
// file, the member or node, and what is wrong. The CLI prints it and exits with code 2.
#pragma once

#include <stdexcept>
#include <string>

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

}  // namespace fxfuse
