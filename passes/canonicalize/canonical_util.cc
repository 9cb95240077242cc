#include "passes/canonicalize/canonical_util.h"

namespace fxfuse::passes {

std::optional<AfCall> AfCall::of(ir::Node* n) {
  if (!n || n->target != "higher_order.auto_functionalized" || n->args().empty()) return std::nullopt;
  const ir::Attr& op = n->args()[0].value;
  if (op.kind != ir::Attr::Kind::Op) return std::nullopt;
  AfCall c;
  c.node = n;
  c.op = op.s;
  c.schema = compiler::schemaOf(n->graph() ? n->graph()->module() : nullptr, op.s);
  if (!c.schema) return std::nullopt;
  return c;
}

const ir::Attr* AfCall::kw(const std::string& name) const {
  for (const auto& a : node->args())
    if (a.name == name) return &a.value;
  return nullptr;
}

ir::Value* AfCall::value(const std::string& name) const {
  const ir::Attr* a = kw(name);
  return (a && a->isValue()) ? a->value : nullptr;
}

ir::Value* AfCall::mutOut(const std::string& name) const {
  std::vector<int> muts = schema->mutableArgs();
  size_t nret = schema->returns.empty() ? 1 : schema->returns.size();
  for (size_t k = 0; k < muts.size(); ++k)
    if (schema->args[muts[k]].name == name) return node->output(nret + k);
  return nullptr;
}

const ir::Attr* fxArg(const ir::Node& n, const std::string& name) {
  for (const auto& a : n.args())
    if (a.name == name) return &a.value;
  return nullptr;
}

std::string fxString(const ir::Node& n, const std::string& name, const std::string& dflt) {
  const ir::Attr* a = fxArg(n, name);
  return (a && a->kind == ir::Attr::Kind::String) ? a->s : dflt;
}

bool fxBool(const ir::Node& n, const std::string& name, bool dflt) {
  const ir::Attr* a = fxArg(n, name);
  return (a && a->kind == ir::Attr::Kind::Bool) ? a->b : dflt;
}

}  // namespace fxfuse::passes
