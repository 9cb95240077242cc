// Graphs that give an op a value of the wrong kind in an argument slot, for the "never a crash"
// sweeps of the interpreter (tests/interpreter/argument_kinds_test.cc) and of lowering
// (tests/plans/argument_kinds_lowering_test.cc): each op of the built-in schema registry with a
// number, a list of numbers or None in each tensor slot in turn (the other tensors x: f32[4]),
// or a tensor, a list or a string in each other slot, or all tensors of one dtype or one edge
// shape (0-d, empty, rank 2 and 3), and
// ops without a built-in schema (named by the caller) through a carried schema of one to
// three Tensor arguments, passed positionally, one of them a number.
#pragma once

#include <fmt/format.h>

#include <string>
#include <vector>

#include "ir/op_schema.h"

namespace fxfuse::test {

struct SweepCase {
  std::string header;  // module header lines (carried schemas)
  std::string graph;   // one `graph @main { ... }` block: input %1 "x": f32[4], the node, output
  std::string line;    // the node's line, to name the case
};

inline bool startsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A well-formed value of a non-tensor schema type (the op may still refuse it), or "" to leave
// an argument with a default out.
inline std::string plainValue(const ir::SchemaArg& a) {
  const std::string& t = a.type;
  if (a.default_value) return "";
  if (a.is_optional) return "None";
  if (startsWith(t, "int[") || startsWith(t, "SymInt[")) return "[1]";
  if (startsWith(t, "int") || startsWith(t, "SymInt")) return "0";
  if (startsWith(t, "float") || startsWith(t, "Scalar")) return "1.0";
  if (startsWith(t, "bool")) return "false";
  if (startsWith(t, "ScalarType")) return "f32";
  if (startsWith(t, "str")) return "\"none\"";
  return "None";
}

// Whether every return is one tensor (the node declares each as f32[4]).
inline bool returnsTensors(const ir::OpSchema& schema) {
  for (const auto& r : schema.returns)
    if (!r.is_tensor || r.is_list) return false;
  return true;
}

inline SweepCase makeCase(const std::string& header, const std::string& line, size_t outputs) {
  std::vector<std::string> outs;
  for (size_t r = 0; r < outputs; ++r) outs.push_back(fmt::format("%{}", r + 2));
  const std::string graph =
      fmt::format("graph @main {{\ninput %1 \"x\": f32[4]\n{}output {}\n}}\n", line, outs.empty() ? "%1" : outs[0]);
  return {header, graph, line};
}

// The built-in registry's ops that return tensors and that `include` accepts, each tensor slot
// given a number, a list of numbers and None in turn; with `other_slots`, each non-tensor slot
// given the tensor x, a list of numbers and a string instead.
template <typename Include>
std::vector<SweepCase> schemaCases(Include&& include, bool other_slots = false) {
  std::vector<SweepCase> cases;
  for (const auto& [name, schema] : ir::OpRegistry::builtin().all()) {
    if (!returnsTensors(schema) || !include(schema)) continue;
    for (size_t target = 0; target < schema.args.size(); ++target) {
      if (schema.args[target].is_tensor == other_slots) continue;
      const std::vector<const char*> kinds = other_slots ? std::vector<const char*>{"%1", "[1.0, 2.0]", "\"x\""}
                                                         : std::vector<const char*>{"2.0", "[1.0, 2.0]", "None"};
      for (const char* wrong : kinds) {
        std::vector<std::string> args, outs;
        for (size_t i = 0; i < schema.args.size(); ++i) {
          const ir::SchemaArg& a = schema.args[i];
          std::string v = i == target ? wrong : a.is_tensor ? (a.is_list ? "[%1, %1]" : "%1") : plainValue(a);
          if (!v.empty()) args.push_back(fmt::format("{}={}", a.name, v));
        }
        for (size_t r = 0; r < schema.returns.size(); ++r) outs.push_back(fmt::format("%{}: f32[4]", r + 2));
        const std::string call = fmt::format("{}({})", schema.target(), fmt::join(args, ", "));
        const std::string line = outs.empty() ? call + "\n" : fmt::format("{} = {}\n", fmt::join(outs, ", "), call);
        cases.push_back(makeCase("", line, schema.returns.size()));
      }
    }
  }
  return cases;
}

// The dtypes the dtype sweeps give every tensor of an op (fxg names).
inline const std::vector<const char*>& sweepDtypes() {
  static const std::vector<const char*> kDtypes = {"bf16", "f16", "f32", "f64", "i64", "i32", "b8", "f8e4m3fn"};
  return kDtypes;
}

// The shapes the shape sweeps give every tensor of an op: 0-d, empty, and ranks 2 and 3.
inline const std::vector<const char*>& sweepShapes() {
  static const std::vector<const char*> kShapes = {"[]", "[0]", "[2, 3]", "[1, 0, 4]"};
  return kShapes;
}

// The built-in registry's ops that return tensors and that `include` accepts, with every tensor
// slot x (lists: [x, x]) and every return of type `type` (e.g. "f32[4]"); x lives on cuda:0 so
// that lowering plans it.
template <typename Include>
std::vector<SweepCase> typedCases(Include&& include, const std::vector<std::string>& types,
                                  const std::string& header = "") {
  std::vector<SweepCase> cases;
  for (const auto& [name, schema] : ir::OpRegistry::builtin().all()) {
    if (!returnsTensors(schema) || schema.returns.empty() || !include(schema)) continue;
    for (const std::string& type : types) {
      std::vector<std::string> args, outs;
      for (const auto& a : schema.args) {
        std::string v = a.is_tensor ? (a.is_list ? "[%1, %1]" : "%1") : plainValue(a);
        if (!v.empty()) args.push_back(fmt::format("{}={}", a.name, v));
      }
      for (size_t r = 0; r < schema.returns.size(); ++r) outs.push_back(fmt::format("%{}: {}", r + 2, type));
      const std::string line =
          fmt::format("{} = {}({})\n", fmt::join(outs, ", "), schema.target(), fmt::join(args, ", "));
      cases.push_back(
          {header, fmt::format("graph @main {{\ninput %1 \"x\": {} cuda:0\n{}output %2\n}}\n", type, line), line});
    }
  }
  return cases;
}

// Every tensor of one dtype, for each of sweepDtypes() (shape [4]).
template <typename Include>
std::vector<SweepCase> dtypeCases(Include&& include) {
  std::vector<std::string> types;
  for (const char* dt : sweepDtypes()) types.push_back(fmt::format("{}[4]", dt));
  return typedCases(include, types);
}

// Every tensor of a symbolic shape ([s0], [s0, 3], [2, s0]; s0 in [1, 4096], hint 8), in each of
// `dtypes`: sizes lowering evaluates only when the plan is bound.
template <typename Include>
std::vector<SweepCase> symbolicCases(Include&& include, const std::vector<const char*>& dtypes = {"f32", "bf16"}) {
  std::vector<std::string> types;
  for (const char* dt : dtypes)
    for (const char* shape : {"[s0]", "[s0, 3]", "[2, s0]"}) types.push_back(fmt::format("{}{}", dt, shape));
  return typedCases(include, types, "symbol s0 range=[1, 4096] hint=8\n");
}

// Every tensor of one shape, for each of sweepShapes(), in each of `dtypes`.
template <typename Include>
std::vector<SweepCase> shapeCases(Include&& include, const std::vector<const char*>& dtypes = {"f32", "bf16"}) {
  std::vector<std::string> types;
  for (const char* dt : dtypes)
    for (const char* shape : sweepShapes()) types.push_back(fmt::format("{}{}", dt, shape));
  return typedCases(include, types);
}

// `op` ("aten.atan2") through a carried schema "ns::name(Tensor a0, ..) -> Tensor" of one to
// three arguments, passed positionally, one of them the number 2.0.
inline std::vector<SweepCase> carriedSchemaCases(const std::string& op) {
  std::vector<SweepCase> cases;
  const std::string ns = op.substr(0, op.find('.')), bare = op.substr(op.find('.') + 1);
  for (int arity = 1; arity <= 3; ++arity)
    for (int target = 0; target < arity; ++target) {
      std::vector<std::string> params, args(static_cast<size_t>(arity), "%1");
      for (int k = 0; k < arity; ++k) params.push_back(fmt::format("Tensor a{}", k));
      args[static_cast<size_t>(target)] = "2.0";
      const std::string header =
          fmt::format("schema \"{}.default\" \"{}::{}({}) -> Tensor\"\n", op, ns, bare, fmt::join(params, ", "));
      cases.push_back(makeCase(header, fmt::format("%2: f32[4] = {}.default({})\n", op, fmt::join(args, ", ")), 1));
    }
  return cases;
}

}  // namespace fxfuse::test
