// Helpers shared by the canonicalization and fusion passes: reading auto_functionalized v1
// nodes, building canonical-op argument lists.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "passes/toolkit/op_util.h"
#include "passes/toolkit/rewriter.h"
#include "ir/graph.h"

namespace fxfuse::passes {

using Out = compiler::Rewriter::Out;
using compiler::latestOf;

inline ir::Arg A(std::string name, ir::Attr v) { return ir::Arg{std::move(name), false, std::move(v)}; }
inline ir::Attr V(ir::Value* v) { return v ? ir::Attr::ofValue(v) : ir::Attr::none(); }
inline ir::Attr S(std::string s) { return ir::Attr::ofString(std::move(s)); }
inline ir::Attr F(double f) { return ir::Attr::ofFloat(f); }
inline ir::Attr I(int64_t i) { return ir::Attr::ofInt(i); }
inline ir::Attr B(bool b) { return ir::Attr::ofBool(b); }
inline ir::Attr D(ir::DType d) { return ir::Attr::ofDType(d); }

// A functionalized call: `higher_order.auto_functionalized(op, kwargs...)`.
struct AfCall {
  ir::Node* node = nullptr;
  std::string op;
  const ir::OpSchema* schema = nullptr;

  static std::optional<AfCall> of(ir::Node* n);
  const ir::Attr* kw(const std::string& name) const;
  ir::Value* value(const std::string& name) const;
  // New value of mutable argument `name` (null when unused or not mutable).
  ir::Value* mutOut(const std::string& name) const;
};

// Canonical op helpers: the attribute value of `name` on an fxfuse node (schema default
// when absent).
const ir::Attr* fxArg(const ir::Node& n, const std::string& name);
std::string fxString(const ir::Node& n, const std::string& name, const std::string& dflt = {});
bool fxBool(const ir::Node& n, const std::string& name, bool dflt = false);

}  // namespace fxfuse::passes
