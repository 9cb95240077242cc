#include "passes/toolkit/op_util.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace fxfuse::compiler {

const ir::OpSchema* schemaOf(const ir::Module* m, std::string_view target) {
  if (m && !m->op_schemas.empty()) {
    // Module schemas are rare; parse on demand (cache per thread by target text).
    thread_local std::map<std::string, ir::OpSchema, std::less<>> cache;
    thread_local const ir::Module* cache_owner = nullptr;
    if (cache_owner != m) {
      cache.clear();
      cache_owner = m;
    }
    if (m->op_schemas.count(std::string(target))) return ir::lookupSchema(m->op_schemas, target, &cache);
  }
  return ir::OpRegistry::builtin().find(target);
}

const ir::OpSchema* schemaOf(const ir::Node& n) {
  const ir::Module* m = n.graph() ? n.graph()->module() : nullptr;
  return schemaOf(m, n.target);
}

const ir::Attr* argOf(const ir::Node& n, std::string_view name) {
  for (const auto& a : n.args())
    if (a.name == name) return &a.value;
  const ir::OpSchema* s = schemaOf(n);
  if (!s) return nullptr;
  int pos = s->argIndex(name);
  if (pos < 0) return nullptr;
  // HOP-free ops: positional args come first, in schema order.
  const auto& args = n.args();
  if (static_cast<size_t>(pos) < args.size() && args[pos].name.empty()) return &args[pos].value;
  return nullptr;
}

ir::Value* valueArg(const ir::Node& n, std::string_view name) {
  const ir::Attr* a = argOf(n, name);
  return (a && a->isValue()) ? a->value : nullptr;
}

std::optional<double> numberArg(const ir::Node& n, std::string_view name) {
  const ir::Attr* a = argOf(n, name);
  return a ? a->asDouble() : std::nullopt;
}

std::optional<int64_t> intArg(const ir::Node& n, std::string_view name) {
  const ir::Attr* a = argOf(n, name);
  return a ? a->asInt() : std::nullopt;
}

bool hasKnownType(const ir::Value* v) { return v && v->isTensor() && v->type.dtype != ir::DType::DTYPE_UNSPECIFIED; }

bool sameShape(const ir::Module& m, const std::vector<ir::SymExpr>& a, const std::vector<ir::SymExpr>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    if (a[i].isInt() && b[i].isInt()) return false;
    if (!m.symbols.knownEqual(a[i], b[i])) return false;
  }
  return true;
}

std::optional<int64_t> constNumel(const ir::Value* v) {
  if (!v) return std::nullopt;
  int64_t n = 1;
  for (const auto& d : v->type.shape) {
    if (!d.isInt()) return std::nullopt;
    n *= d.intValue();
  }
  return n;
}

std::optional<int64_t> lastDim(const ir::Value* v) {
  if (!v || v->type.shape.empty() || !v->type.shape.back().isInt()) return std::nullopt;
  return v->type.shape.back().intValue();
}

std::optional<int64_t> normDim(int64_t dim, size_t rank) {
  int64_t r = static_cast<int64_t>(rank);
  if (dim < 0) dim += r;
  if (dim < 0 || dim >= r) return std::nullopt;
  return dim;
}

ir::Value* castInput(const ir::Node& n, ir::DType* to) {
  const std::string& t = n.target;
  ir::Value* in = nullptr;
  ir::DType d = ir::DType::DTYPE_UNSPECIFIED;
  auto dtypeAttr = [&](std::string_view name) -> bool {
    const ir::Attr* a = argOf(n, name);
    if (!a || a->kind != ir::Attr::Kind::DType) return false;
    d = a->dtype;
    return true;
  };
  auto noneOrSame = [&](std::string_view name) {
    const ir::Attr* a = argOf(n, name);
    if (!a || a->isNone()) return true;
    if (name == "device" && a->kind == ir::Attr::Kind::Device && in && a->device == in->type.device) return true;
    if (name == "layout" && a->kind == ir::Attr::Kind::Layout && a->layout == ir::Layout::Strided) return true;
    if (name == "memory_format" && a->kind == ir::Attr::Kind::MemoryFormat &&
        (a->memory_format == ir::MemoryFormat::Preserve || a->memory_format == ir::MemoryFormat::Contiguous))
      return true;
    if (name == "non_blocking" || name == "copy") return true;
    return false;
  };
  if (t == "prims.convert_element_type.default") {
    in = valueArg(n, "a");
    if (!dtypeAttr("dtype")) return nullptr;
  } else if (t == "aten._to_copy.default" || t == "aten.to.dtype_layout") {
    in = valueArg(n, "self");
    if (!dtypeAttr("dtype")) {
      // No dtype: a copy with the same dtype.
      if (!in) return nullptr;
      d = in->type.dtype;
    }
    for (const char* k : {"device", "layout", "memory_format", "pin_memory"})
      if (std::string_view(k) != "pin_memory" && !noneOrSame(k)) return nullptr;
  } else if (t == "aten.to.dtype") {
    in = valueArg(n, "self");
    if (!dtypeAttr("dtype")) return nullptr;
    if (!noneOrSame("memory_format")) return nullptr;
  } else if (t == "aten.type_as.default") {
    in = valueArg(n, "self");
    ir::Value* other = valueArg(n, "other");
    if (!other) return nullptr;
    d = other->type.dtype;
  } else {
    return nullptr;
  }
  if (!in || !in->isTensor()) return nullptr;
  if (to) *to = d;
  return in;
}

bool isCast(const ir::Node& n) { return castInput(n, nullptr) != nullptr; }

bool isExactWidening(ir::DType from, ir::DType to) {
  if (from == to) return true;
  if (to == ir::DType::F32) return ir::isHalf16(from);
  if (to == ir::DType::F64) return ir::isHalf16(from) || from == ir::DType::F32;
  return false;
}

ir::Value* stripWidening(ir::Value* v) {
  if (!v || !v->producer()) return v;
  ir::DType to;
  ir::Value* in = castInput(*v->producer(), &to);
  if (in && ir::isHalf16(in->type.dtype) && to == ir::DType::F32) return in;
  return v;
}

std::vector<ir::Node*> usersOf(const ir::Value* v) {
  std::vector<ir::Node*> out;
  for (ir::Node* u : v->users())
    if (std::find(out.begin(), out.end(), u) == out.end()) out.push_back(u);
  return out;
}

bool onlyUsedBy(const ir::Value* v, const ir::Node* user) {
  if (v->graphOutputUses() > 0) return false;
  for (ir::Node* u : v->users())
    if (u != user) return false;
  return true;
}

std::string shortTarget(const std::string& target) {
  std::string t = target;
  if (t.rfind("torch.ops.", 0) == 0) t = t.substr(10);
  const std::string suffix = ".default";
  if (t.size() > suffix.size() && t.compare(t.size() - suffix.size(), suffix.size(), suffix) == 0)
    t = t.substr(0, t.size() - suffix.size());
  return t;
}

bool approxEqual(double a, double b, double rel) {
  if (a == b) return true;
  return std::fabs(a - b) <= rel * std::max(std::fabs(a), std::fabs(b));
}

std::string fxfuseName(const std::string& target) {
  if (target.rfind("fxfuse.", 0) != 0) return {};
  std::string rest = target.substr(7);
  auto dot = rest.find('.');
  return dot == std::string::npos ? rest : rest.substr(0, dot);
}

}  // namespace fxfuse::compiler
