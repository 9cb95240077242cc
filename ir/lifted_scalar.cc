// Lifted scalar inputs: recognition through casts, values, and the --const flag.
#include "ir/lifted_scalar.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "ir/status.h"

namespace fxfuse::ir {

namespace {

// Nodes that pass a scalar through unchanged up to rounding: dtype casts and device moves.
bool isScalarPassThrough(const Node& n) {
  return n.target == "prims.convert_element_type.default" || n.target == "aten._to_copy.default" ||
         n.target == "aten.to.dtype" || n.target == "aten.to.dtype_layout" || n.target == "aten.to.device" ||
         n.target == "prims.device_put.default" || n.target == "aten.clone.default" ||
         n.target == "aten.lift_fresh_copy.default";
}

}  // namespace

bool isLiftedScalarInput(const Value* v) {
  return v && v->isGraphInput() && v->isTensor() && v->type.rank() == 0 && v->type.device.type == "cpu";
}

Value* liftedScalarSource(Value* v) {
  for (int hops = 0; v && hops < 8; ++hops) {
    if (isLiftedScalarInput(v)) return v;
    const Node* p = v->producer();
    if (!p || !isScalarPassThrough(*p) || !v->isTensor() || v->type.rank() != 0) return nullptr;
    const auto& args = p->args();
    v = args.empty() || !args[0].value.isValue() ? nullptr : args[0].value.value;
  }
  return nullptr;
}

std::optional<double> liftedScalarValue(Value* v) {
  Value* in = liftedScalarSource(v);
  return in ? in->scalar_value : std::nullopt;
}

std::vector<std::string> unknownLiftedScalars(const Module& m) {
  std::vector<std::string> out;
  if (m.graphs().empty()) return out;
  for (const auto& in : m.entry().inputs())
    if (isLiftedScalarInput(in.value) && !in.value->scalar_value) out.push_back(in.value->name);
  return out;
}

std::string constFlagHint(const Value& input) {
  return fmt::format("the lifted scalar input '{}' has no recorded value (pass --const {}=VALUE, or export it "
                     "with tools/fxfuse_export, which records it)",
                     input.name, input.name);
}

void applyConstFlags(Module& m, const std::vector<std::string>& flags) {
  if (flags.empty()) return;
  if (m.graphs().empty()) fail("--const: the module has no graph");
  for (const auto& f : flags) {
    auto eq = f.find('=');
    if (eq == std::string::npos || eq == 0) fail("--const: expected NAME=VALUE, got '{}'", f);
    std::string name = f.substr(0, eq), text = f.substr(eq + 1);
    errno = 0;
    char* end = nullptr;
    double value = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || errno == ERANGE || std::isnan(value))
      fail("--const {}: '{}' is not a number", name, text);
    Value* target = nullptr;
    std::string scalars;
    for (const auto& in : m.entry().inputs()) {
      if (!isLiftedScalarInput(in.value)) continue;
      scalars += (scalars.empty() ? "" : ", ") + in.value->name;
      if (in.value->name == name) target = in.value;
    }
    if (!target)
      fail("--const {}: the graph has no lifted scalar input (0-d CPU tensor) of that name (it has: {})", name,
           scalars.empty() ? "none" : scalars);
    target->scalar_value = value;
  }
}

}  // namespace fxfuse::ir
