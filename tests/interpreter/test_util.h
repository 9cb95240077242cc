// Helpers for the interpreter tests: run a small .fxg graph on given inputs.
#pragma once

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tools/interpreter/interpreter.h"
#include "ir/fxg.h"

namespace fxfuse::interp::test {

inline std::unique_ptr<ir::Module> parse(const std::string& body, const std::string& header = "") {
  return ir::parseFxg("fxfuse.module {\n" + header + body + "\n}\n", "<test>");
}

inline std::vector<RValue> runModule(ir::Module& m, const std::vector<RValue>& inputs, Options o = {},
                                     const std::string& graph = "") {
  o.graph = graph;
  Interpreter in(m, o);
  return in.run(inputs);
}

// Graph body text (one `graph @g { ... }` block) run on tensor inputs.
inline std::vector<RValue> run(const std::string& graph, const std::vector<Tensor>& inputs, Options o = {},
                               const std::string& header = "") {
  auto m = parse(graph, header);
  std::vector<RValue> in;
  for (const auto& t : inputs) in.push_back(RValue::ofTensor(t));
  return runModule(*m, in, o);
}

inline Tensor T(const Shape& shape, DType dt, const std::vector<double>& v) { return Tensor::fromValues(shape, dt, v); }

// Independent bf16 rounding (torch's c10::BFloat16 round_to_nearest_even on f32 bits).
inline double bf16(double v) {
  float f = static_cast<float>(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&f, &u, 4);
  return f;
}
inline double f32(double v) { return static_cast<double>(static_cast<float>(v)); }

}  // namespace fxfuse::interp::test
