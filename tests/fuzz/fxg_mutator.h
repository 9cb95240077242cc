// Structure-aware mutation of `.fxg` text for the pipeline fuzz target: instead of flipping
// bytes (which mostly produces text the parser rejects), each mutation edits one piece of
// the graph's structure and keeps the rest parseable:
//   * a node's op target, replaced by another op from the built-in op schema table;
//   * one dimension of a tensor type (small constants, symbols, symbolic expressions, edges);
//   * a dtype; an operand (%a -> %b); a symbol's range or hint;
//   * an attribute value wrapped in a few levels of list nesting;
//   * a node line deleted or duplicated;
// and, one time in four, libFuzzer's own byte-level mutation.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "ir/op_schema.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace fxfuse::fuzz {

namespace fxg_mutation {

inline const std::vector<std::string>& opTargets() {
  static const std::vector<std::string> targets = [] {
    std::vector<std::string> t;
    for (const auto& [name, schema] : ir::OpRegistry::builtin().all()) t.push_back(name);
    return t;
  }();
  return targets;
}

template <typename T>
const T& pick(std::mt19937& rng, const std::vector<T>& v) {
  return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
}

inline std::vector<std::string> splitLines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start <= s.size()) {
    size_t nl = s.find('\n', start);
    if (nl == std::string::npos) nl = s.size();
    lines.push_back(s.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

inline std::string joinLines(const std::vector<std::string>& lines) {
  std::string s;
  for (size_t i = 0; i < lines.size(); ++i) s += (i ? "\n" : "") + lines[i];
  return s;
}

// Indices of lines that define nodes ("%3: f32[...] = target(...)").
inline std::vector<size_t> nodeLines(const std::vector<std::string>& lines) {
  std::vector<size_t> out;
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].find(" = ") != std::string::npos && lines[i].find('(') != std::string::npos) out.push_back(i);
  return out;
}

// Replaces a random match of `re` in `line` (group 1 when present) with `with`.
inline bool replaceMatch(std::mt19937& rng, std::string& line, const std::regex& re, const std::string& with) {
  std::vector<std::pair<size_t, size_t>> spans;
  for (auto it = std::sregex_iterator(line.begin(), line.end(), re); it != std::sregex_iterator(); ++it) {
    int g = it->size() > 1 ? 1 : 0;
    spans.push_back({static_cast<size_t>(it->position(g)), static_cast<size_t>(it->length(g))});
  }
  if (spans.empty()) return false;
  auto [pos, len] = pick(rng, spans);
  line.replace(pos, len, with);
  return true;
}

inline bool mutateLines(std::mt19937& rng, std::vector<std::string>& lines) {
  static const std::vector<std::string> dims = {"0", "1", "2", "3", "4", "7", "s0", "s1", "s0*2", "s0//2", "s0 + 1",
                                                "Max(s0, 1)", "Min(s0, 3)", "(s0 + 1)//2", "-1", "9223372036854775807"};
  static const std::vector<std::string> dtypes = {"f32", "bf16", "f16", "f64", "f8e4m3fn", "i64", "i32", "i8", "u8", "bool"};
  static const std::vector<std::string> ranges = {"[1, 8]", "[2, 2]", "[0, 4]", "[1, 9223372036854775807]", "[4, 1]"};
  static const std::regex target_re(R"(= ([A-Za-z_][\w.]*)\()");
  static const std::regex dims_re(R"(\[([^\[\]=]*)\])");
  static const std::regex dtype_re(R"(: (f32|bf16|f16|f64|f8e4m3fn|i64|i32|i8|u8|bool)\[)");
  static const std::regex operand_re(R"(=(%\w+))");
  static const std::regex attr_re(R"(\w=([^%,()\s][^,()]*))");
  std::vector<size_t> nodes = nodeLines(lines);
  if (nodes.empty()) return false;
  std::string& line = lines[pick(rng, nodes)];
  switch (std::uniform_int_distribution<int>(0, 8)(rng)) {
    case 0:
      return replaceMatch(rng, line, target_re, pick(rng, opTargets()));
    case 1: {
      // one dimension inside the first bracket list of the line
      std::smatch m;
      if (!std::regex_search(line, m, dims_re)) return false;
      std::string inner = m[1].str();
      std::vector<std::string> parts;
      size_t s = 0;
      while (true) {
        size_t c = inner.find(',', s);
        parts.push_back(inner.substr(s, c == std::string::npos ? std::string::npos : c - s));
        if (c == std::string::npos) break;
        s = c + 1;
      }
      parts[std::uniform_int_distribution<size_t>(0, parts.size() - 1)(rng)] = pick(rng, dims);
      std::string joined;
      for (size_t i = 0; i < parts.size(); ++i) joined += (i ? ", " : "") + parts[i];
      line.replace(static_cast<size_t>(m.position(1)), static_cast<size_t>(m.length(1)), joined);
      return true;
    }
    case 2:
      return replaceMatch(rng, line, dtype_re, pick(rng, dtypes));
    case 3: {
      std::vector<std::string> names;
      for (const auto& l : lines)
        for (auto it = std::sregex_iterator(l.begin(), l.end(), operand_re); it != std::sregex_iterator(); ++it)
          names.push_back((*it)[1].str());
      return !names.empty() && replaceMatch(rng, line, operand_re, pick(rng, names));
    }
    case 4: {
      int depth = std::uniform_int_distribution<int>(1, 40)(rng);
      std::smatch m;
      if (!std::regex_search(line, m, attr_re)) return false;
      line.replace(static_cast<size_t>(m.position(1)), static_cast<size_t>(m.length(1)),
                   std::string(depth, '[') + m[1].str() + std::string(depth, ']'));
      return true;
    }
    case 5:
      line.clear();
      return true;
    case 6: {
      std::string copy = line;
      lines.insert(lines.begin() + static_cast<long>(nodes.back()) + 1, copy);
      return true;
    }
    case 7: {
      for (auto& l : lines)
        if (l.find("symbol ") != std::string::npos) {
          static const std::regex range_re(R"(range=(\[[^\]]*\]))"), hint_re(R"(hint=(\d+))");
          if (rng() % 2) return replaceMatch(rng, l, range_re, pick(rng, ranges));
          return replaceMatch(rng, l, hint_re, pick(rng, dims));
        }
      return false;
    }
    default:
      return replaceMatch(rng, line, attr_re, pick(rng, dims));
  }
}

}  // namespace fxg_mutation

inline size_t mutateFxg(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  std::mt19937 rng(seed);
  if (size == 0 || rng() % 4 == 0) return LLVMFuzzerMutate(data, size, max_size);
  std::vector<std::string> lines = fxg_mutation::splitLines(std::string(reinterpret_cast<char*>(data), size));
  int edits = std::uniform_int_distribution<int>(1, 3)(rng);
  bool changed = false;
  for (int i = 0; i < edits; ++i) changed = fxg_mutation::mutateLines(rng, lines) || changed;
  std::string out = fxg_mutation::joinLines(lines);
  if (!changed || out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

}  // namespace fxfuse::fuzz
