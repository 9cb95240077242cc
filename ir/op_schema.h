// Operator schemas: argument names, types, defaults and mutability, parsed from torch's
// schema strings ("_C::rms_norm(Tensor(a!) result, Tensor input, ...) -> ()").
//
// The registry starts with the ATen/prims ops that appear in LLM graphs, vLLM's `_C` /
// `vllm` custom ops and fxfuse's own canonical ops; schemas carried in an input file are
// added on load. Unknown ops are not an error: their nodes stay opaque with whatever
// argument names the file provides.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fxfuse::ir {

struct SchemaArg {
  std::string name;
  std::string type;           // as written, without alias annotation: "Tensor?", "SymInt[]"
  std::optional<std::string> default_value;
  bool kwarg_only = false;
  bool is_mutable = false;    // Tensor(a!) / Tensor!
  bool is_tensor = false;     // Tensor, Tensor?, Tensor[] ...
  bool is_optional = false;
  bool is_list = false;
};

struct OpSchema {
  std::string ns, name, overload;  // overload "default" when absent
  std::vector<SchemaArg> args;
  std::vector<SchemaArg> returns;
  std::string text;

  std::string target() const { return ns + "." + name + "." + overload; }
  int argIndex(std::string_view arg_name) const;
  std::vector<int> mutableArgs() const;  // indices of mutable args, schema order
};

// Parses one schema string. Throws FxError on malformed text.
OpSchema parseOpSchema(std::string_view text);

class OpRegistry {
 public:
  // The built-in registry (ATen/prims, vLLM, fxfuse ops).
  static const OpRegistry& builtin();
  const OpSchema* find(std::string_view target) const;
  void add(const OpSchema& s);
  const std::map<std::string, OpSchema, std::less<>>& all() const { return ops_; }

 private:
  std::map<std::string, OpSchema, std::less<>> ops_;
};

// Looks up a schema: the module's own schema strings first, then the built-in registry.
const OpSchema* lookupSchema(const std::map<std::string, std::string>& module_schemas, std::string_view target,
                             std::map<std::string, OpSchema, std::less<>>* cache);

}  // namespace fxfuse::ir
