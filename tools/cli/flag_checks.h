// Validators for numeric command-line flags, shared by every subcommand.
//
// CLI11's CLI::Range compares with < and >, so "nan" passes it (and then disables whatever
// the flag bounds); FiniteRange also refuses NaN, infinities and trailing junk. A failed
// check is a CLI11 parse error: one line, exit code 2.
#pragma once

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "ir/world_size.h"

namespace fxfuse::cli {

inline CLI::Validator FiniteRange(double lo, double hi) {
  std::string range = fmt::format("[{}, {}]", lo, hi);
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end == s.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v < lo || v > hi)
          return "expected a number in " + range + ", got '" + s + "'";
        return std::string();
      },
      "FLOAT in " + range);
}

// --world-size on every subcommand: 1..kMaxWorldSize.
inline CLI::Validator WorldSizeRange() { return CLI::Range(1, kMaxWorldSize); }

// --kv-cache=DTYPE and --kv-block-size=N (the kv-cache pass; compile, explain, verify).
inline void addKvCacheFlags(CLI::App* cmd, std::string& dtype, int64_t& block_size) {
  cmd->add_option("--kv-cache", dtype,
                  "serve vLLM attention from a paged KV cache of this dtype: bf16/f16 (the model dtype) or fp8 "
                  "(the kv-cache pass; off by default)")
      ->check(CLI::IsMember({"bf16", "f16", "fp8"}));
  cmd->add_option("--kv-block-size", block_size, "tokens per KV-cache block (default 16)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
}

}  // namespace fxfuse::cli
