// Reading a decimal floating-point token of the text formats (.fxg, symbolic expressions) the
// way the printers write them: the printers write every finite double, subnormals included,
// in the shortest form that reads back (fxg.cc), so the readers must take what underflows
// into the subnormal range. std::stod refuses those (ERANGE), which broke print → parse.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

namespace fxfuse::ir {

// The value of `tok` when all of it is a decimal number that does not overflow (a result that
// underflows to a subnormal or to zero is the nearest double, as strtod gives it), else nullopt.
inline std::optional<double> parseDecimal(const std::string& tok) {
  if (tok.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(tok.c_str(), &end);
  if (end != tok.c_str() + tok.size()) return std::nullopt;
  if (errno == ERANGE && std::isinf(v)) return std::nullopt;  // overflow; underflow is fine
  return v;
}

}  // namespace fxfuse::ir
