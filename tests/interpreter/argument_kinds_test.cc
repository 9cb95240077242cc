// Every op the interpreter implements, run with each tensor argument in turn replaced by a value
// of another kind (a number, a list of numbers, None): the run must end in a result or an
// FxError (one line naming the node in the CLI), never a crash. Ops with a built-in schema get
// their arguments by name; the others (named only by the files that use them) positionally.
// The pipeline fuzzer found ops that took the tensor of a non-tensor argument (clamp's `self`,
// stack's items) and read a tensor without storage; this test covers the whole op table at once.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <set>
#include <string>
#include <vector>

#include "ir/op_schema.h"
#include "ir/status.h"
#include "tests/interpreter/test_util.h"

using namespace fxfuse::interp;
using namespace fxfuse::interp::test;
using fxfuse::FxError;

namespace {

bool startsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// A well-formed value of a non-tensor schema type (the op may still refuse it), or "" to leave
// an argument with a default out.
std::string plainValue(const fxfuse::ir::SchemaArg& a) {
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

// The node line of `schema` with tensor argument `target` given `wrong`, the other tensors x
// (a list of two x for Tensor[]).
std::string nodeLine(const fxfuse::ir::OpSchema& schema, size_t target, const std::string& wrong) {
  std::vector<std::string> args;
  for (size_t i = 0; i < schema.args.size(); ++i) {
    const fxfuse::ir::SchemaArg& a = schema.args[i];
    std::string v = i == target ? wrong : a.is_tensor ? (a.is_list ? "[%1, %1]" : "%1") : plainValue(a);
    if (!v.empty()) args.push_back(fmt::format("{}={}", a.name, v));
  }
  std::vector<std::string> outs;
  for (size_t i = 0; i < schema.returns.size(); ++i) outs.push_back(fmt::format("%{}: f32[4]", i + 2));
  const std::string call = fmt::format("{}({})", schema.target(), fmt::join(args, ", "));
  return outs.empty() ? call + "\n" : fmt::format("{} = {}\n", fmt::join(outs, ", "), call);
}

// Whether every return is one tensor (the node line declares each as f32[4]).
bool returnsTensors(const fxfuse::ir::OpSchema& schema) {
  for (const auto& r : schema.returns)
    if (!r.is_tensor || r.is_list) return false;
  return true;
}

}  // namespace

TEST_CASE("every interpreter op refuses a non-tensor where a tensor is expected, without crashing",
          "[ops][robustness]") {
  const auto& registry = fxfuse::ir::OpRegistry::builtin();
  const Tensor x = T({4}, fxfuse::DType::F32, {1, 2, 3, 4});
  int runs = 0, refused = 0;
  for (const auto& [name, schema] : registry.all()) {
    if (!OpTable::get().find(schema.target()) || !returnsTensors(schema)) continue;
    for (size_t i = 0; i < schema.args.size(); ++i) {
      if (!schema.args[i].is_tensor) continue;
      for (const char* wrong : {"2.0", "[1.0, 2.0]", "None"}) {
        const std::string line = nodeLine(schema, i, wrong);
        INFO(line);
        std::vector<std::string> outs;
        for (size_t r = 0; r < schema.returns.size(); ++r) outs.push_back(fmt::format("%{}", r + 2));
        const std::string graph = fmt::format("graph @main {{\ninput %1 \"x\": f32[4]\n{}output {}\n}}\n", line,
                                              outs.empty() ? "%1" : outs[0]);
        ++runs;
        try {
          run(graph, {x});
        } catch (const FxError&) {
          ++refused;
        }
      }
    }
  }
  INFO(fmt::format("{} runs, {} refused", runs, refused));
  CHECK(runs > 300);  // the registry's ops with tensor arguments, three kinds each
  CHECK(refused > runs / 2);
}

// Ops without a built-in schema load only from files that carry one, and such a file may say
// Tensor for any argument: aten and prims slots then take numbers (torch wraps them), so each
// op here gets a carried schema of one to three Tensor arguments, passed positionally, with one
// of them a number (a list or None in a Tensor slot is refused when the file loads).
TEST_CASE("interpreter ops without a built-in schema refuse numbers in tensor slots, without crashing",
          "[ops][robustness]") {
  const auto& registry = fxfuse::ir::OpRegistry::builtin();
  std::set<std::string> with_schema;
  for (const auto& [name, schema] : registry.all()) {
    const std::string t = schema.target();
    with_schema.insert(t), with_schema.insert(t.substr(0, t.rfind('.')));
  }
  const Tensor x = T({4}, fxfuse::DType::F32, {1, 2, 3, 4});
  int ops = 0, runs = 0, reached = 0;
  for (const std::string& op : OpTable::get().names()) {
    if (with_schema.count(op) || !(startsWith(op, "aten.") || startsWith(op, "prims."))) continue;
    ++ops;
    const std::string ns = op.substr(0, op.find('.')), bare = op.substr(op.find('.') + 1);
    for (int arity = 1; arity <= 3; ++arity)
      for (int target = 0; target < arity; ++target) {
        std::vector<std::string> params, args(static_cast<size_t>(arity), "%1");
        for (int k = 0; k < arity; ++k) params.push_back(fmt::format("Tensor a{}", k));
        args[static_cast<size_t>(target)] = "2.0";
        const std::string header = fmt::format("schema \"{}.default\" \"{}::{}({}) -> Tensor\"\n", op, ns, bare,
                                               fmt::join(params, ", "));
        const std::string line = fmt::format("%2: f32[4] = {}.default({})\n", op, fmt::join(args, ", "));
        INFO(header << line);
        ++runs;
        try {
          run(fmt::format("graph @main {{\ninput %1 \"x\": f32[4]\n{}output %2\n}}\n", line), {x}, {}, header);
          ++reached;
        } catch (const FxError& e) {
          reached += std::string(e.what()).find("unknown op") == std::string::npos;
        }
      }
  }
  INFO(fmt::format("{} ops, {} runs, {} reached the interpreter", ops, runs, reached));
  CHECK(ops > 30);
  CHECK(reached == runs);  // the carried schemas load: every run is the op's own
}
