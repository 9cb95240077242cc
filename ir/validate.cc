// Validation at the door (validate.h): symbols, tensor types, weight bounds and node
// arguments against their op schemas, each problem one FxError line.
#include "ir/validate.h"

#include <map>
#include <string_view>

#include "ir/checked_math.h"
#include "ir/op_schema.h"
#include "ir/status.h"
#include "ir/utf8.h"

namespace fxfuse::ir {

namespace {

void checkSymbols(const SymbolTable& symbols, const std::string& file) {
  for (const auto& [name, s] : symbols.all()) {
    if (s.min && s.max && *s.min > *s.max) fail("{}: symbol {}: empty range [{}, {}]", file, name, *s.min, *s.max);
    if (s.hint && s.min && *s.hint < *s.min) fail("{}: symbol {}: hint {} is below its minimum {}", file, name, *s.hint, *s.min);
    if (s.hint && s.max && *s.hint > *s.max) fail("{}: symbol {}: hint {} is above its maximum {}", file, name, *s.hint, *s.max);
  }
}

// The symbols' hints, for sizing tensors as the interpreter and the planner will.
std::map<std::string, int64_t> hintEnv(const SymbolTable& symbols) {
  std::map<std::string, int64_t> env;
  for (const auto& [name, s] : symbols.all())
    if (s.hint) env[name] = *s.hint;
  return env;
}

// Sizes and strides at the hints; false when some dimension is not known there.
bool concrete(const std::vector<SymExpr>& dims, const std::map<std::string, int64_t>& env, std::vector<int64_t>& out) {
  out.clear();
  for (const auto& d : dims) {
    auto v = d.evaluate(env);
    if (!v) return false;
    out.push_back(*v);
  }
  return true;
}

// Whether `e` contains torch's infinity (`oo`, `int_oo`): fine as a symbol range's bound,
// meaningless as a size, stride or offset. Iterative: expressions may nest deeply.
bool mentionsInfinity(const SymExpr& e) {
  std::vector<const SymExpr*> todo = {&e};
  while (!todo.empty()) {
    const SymExpr* x = todo.back();
    todo.pop_back();
    if (x->kind() == SymExpr::Kind::Opaque && (x->name() == "oo" || x->name() == "int_oo")) return true;
    for (const auto& a : x->args()) todo.push_back(&a);
  }
  return false;
}

void refuseInfinity(const std::vector<SymExpr>& dims, const char* what, const std::string& where) {
  for (size_t i = 0; i < dims.size(); ++i)
    if (mentionsInfinity(dims[i])) fail("{}: {} {} is infinite ({})", where, what, i, dims[i].str());
}

void checkTensorType(const TensorType& t, const std::map<std::string, int64_t>& env, const std::string& where) {
  refuseInfinity(t.shape, "size", where);
  refuseInfinity(t.stride, "stride", where);
  if (mentionsInfinity(t.storage_offset)) fail("{}: the storage offset is infinite ({})", where, t.storage_offset.str());
  for (const auto& d : t.shape)
    if (d.isInt() && d.intValue() < 0) fail("{}: negative size {}", where, d.intValue());
  for (const auto& d : t.stride)
    if (d.isInt() && d.intValue() < 0) fail("{}: negative stride {}", where, d.intValue());
  if (t.storage_offset.isInt() && t.storage_offset.intValue() < 0)
    fail("{}: negative storage offset {}", where, t.storage_offset.intValue());
  std::vector<int64_t> shape, stride;
  if (!concrete(t.shape, env, shape)) return;
  std::string at = env.empty() ? where : where + " (at the symbols' hints)";
  int64_t numel = numelOrFail(shape, at);
  bytesOrFail(numel, dtypeBytes(t.dtype), at);
  if (t.stride.size() == t.shape.size() && concrete(t.stride, env, stride)) {
    auto offset = t.storage_offset.evaluate(env);
    extentOrFail(shape, stride, offset.value_or(0), at);
  }
}

void checkWeight(const WeightInfo& w, const std::map<std::string, int64_t>& env, const std::string& file) {
  std::string where = file + ": weight '" + w.fqn + "'";
  checkTensorType(w.type, env, where);
  if (w.length == 0) return;  // no payload recorded
  std::vector<int64_t> shape, stride;
  if (!concrete(w.type.shape, {}, shape) || !concrete(w.type.stride, {}, stride)) return;
  int64_t offset = w.type.storage_offset.evaluate({}).value_or(0);
  int64_t extent = extentOrFail(shape, stride, offset, where);
  int64_t need = bytesOrFail(extent, dtypeBytes(w.type.dtype), where);
  if (static_cast<uint64_t>(need) > w.length)
    fail("{}: its size and strides need {} bytes of storage, its payload has {}", where, need, w.length);
}

// Whether every string in `a` (lists included) is UTF-8.
bool utf8Strings(const Attr& a) {
  if (a.kind == Attr::Kind::String) return isUtf8(a.s);
  for (const Attr& x : a.list)
    if (!utf8Strings(x)) return false;
  return true;
}

// Names and string arguments become launch-plan strings (a collective's process group and
// reduction, layer names), which must be UTF-8 (ir/utf8.h); Python's strings always are.
void checkUtf8Names(const Graph& g, const std::string& file) {
  auto check = [&](const std::string& name, const char* what) {
    if (!isUtf8(name)) fail("{}: graph {}: {} name is not UTF-8", file, isUtf8(g.name) ? g.name : "?", what);
  };
  check(g.name, "the graph's");
  for (const auto& in : g.inputs()) {
    if (in.value) check(in.value->name, "an input's");
    check(in.target, "an input's target");
  }
  for (const auto& n : g.nodes()) {
    check(n->name, "a node's");
    for (const Value* v : n->outputs())
      if (v) check(v->name, "a node result's");
    for (const Arg& a : n->args())
      if (!utf8Strings(a.value))
        fail("{}: node '{}' ({}): argument '{}' is not UTF-8", file, n->name, n->target, a.name);
  }
  for (const auto& out : g.outputs()) check(out.target, "an output's target");
}

}  // namespace

void validateModule(const Module& m, const std::string& file) {
  checkSymbols(m.symbols, file);
  const auto env = hintEnv(m.symbols);
  for (const auto& g : m.graphs()) {
    checkUtf8Names(*g, file);
    for (const auto& in : g->inputs())
      if (in.value && in.value->isTensor())
        checkTensorType(in.value->type, env, fmt::format("{}: graph {} input '{}'", file, g->name, in.value->name));
    for (const auto& n : g->nodes())
      for (size_t i = 0; i < n->numOutputs(); ++i)
        if (const Value* v = n->output(i); v && v->isTensor())
          checkTensorType(v->type, env,
                          fmt::format("{}: node '{}' ({}) result {}", file, n->name, n->target, i));
  }
  for (const auto& w : m.weights) {
    if (!isUtf8(w.fqn)) fail("{}: a weight's name is not UTF-8", file);
    checkWeight(w, env, file);
  }
}

namespace {

bool isNumberType(const std::string& type) {
  std::string base = type;
  if (!base.empty() && base.back() == '?') base.pop_back();
  return base == "int" || base == "SymInt" || base == "float" || base == "bool" || base == "Scalar" ||
         base == "SymFloat" || base == "SymBool";
}

// What may stand where a schema says Tensor: a value, or a number torch wraps into a
// 0-d tensor (`aten.add.Tensor(x, 1e-06)` is common in FX graphs).
bool fitsTensorSlot(const Attr& a) {
  switch (a.kind) {
    case Attr::Kind::Value: return a.value != nullptr;
    case Attr::Kind::Int: case Attr::Kind::Float: case Attr::Kind::Bool: case Attr::Kind::SpecialFloat:
    case Attr::Kind::Sym: case Attr::Kind::Opaque:
      return true;
    default: return false;
  }
}

const char* attrKindName(const Attr& a) {
  switch (a.kind) {
    case Attr::Kind::None: return "None";
    case Attr::Kind::Value: return a.value && !a.value->isTensor() ? "a symbolic value" : "a value";
    case Attr::Kind::Int: return "an integer";
    case Attr::Kind::Float: case Attr::Kind::SpecialFloat: return "a float";
    case Attr::Kind::Bool: return "a bool";
    case Attr::Kind::String: return "a string";
    case Attr::Kind::List: return "a list";
    case Attr::Kind::Op: return "an op reference";
    case Attr::Kind::Graph: return "a graph reference";
    default: return "a non-tensor constant";
  }
}

// What is wrong with `a` in the slot `s`, or empty. `exact`: tensor slots take tensor values
// only — every op but ATen's and prims' (numbersInTensorSlots): torch refuses a number for a
// custom op's Tensor, and the passes, interpreter and lowering read those slots as values, so a
// number would read as absent.
// FX graphs of torch's own ops hold Python numbers where a schema says Tensor (`aten.add.Tensor(x,
// 1e-06)`: torch wraps them into 0-d tensors); no other namespace's do.
bool numbersInTensorSlots(std::string_view target) {
  return target.rfind("aten.", 0) == 0 || target.rfind("prims.", 0) == 0;
}

std::string argProblem(const SchemaArg& s, const Attr& a, bool exact) {
  if (a.isNone()) return s.is_optional || s.default_value ? "" : "is None but the schema requires a value";
  const bool tensor_value = a.kind == Attr::Kind::Value && a.value && a.value->isTensor();
  if (s.is_tensor && !s.is_list && !(exact ? tensor_value : fitsTensorSlot(a)))
    return std::string("must be a tensor, got ") + attrKindName(a);
  if (s.is_tensor && s.is_list) {
    if (a.kind != Attr::Kind::List) return std::string("must be a list of tensors, got ") + attrKindName(a);
    for (const auto& x : a.list)
      if (!x.isNone() && !fitsTensorSlot(x)) return std::string("must hold tensors, has ") + attrKindName(x);
  }
  if (!s.is_list && isNumberType(s.type) &&
      (a.kind == Attr::Kind::String || a.kind == Attr::Kind::Op || a.kind == Attr::Kind::Graph ||
       a.kind == Attr::Kind::List))
    return "must be a " + s.type + ", got " + attrKindName(a);
  return "";
}

}  // namespace

namespace {

// fxfuse's own ops have exact schemas (ir/op_table.cc): the node has one output per return, as
// the passes that create them do.
void checkFxfuseNodeShape(const Node& n, const OpSchema& s, const std::string& file) {
  if (n.numOutputs() != s.returns.size())
    fail("{}: node '{}' ({}): {} outputs, its schema returns {}", file, n.name, n.target, n.numOutputs(),
         s.returns.size());
}

// Arguments the schema does not take: a positional one past its parameters, a keyword it does
// not name, or one given both by position and by keyword. torch refuses each; the passes, the
// interpreter and lowering read arguments through the schema and would drop them silently.
void checkNoExtraArgs(const Node& n, const OpSchema& s, const std::string& file) {
  size_t positional = 0;
  for (const Arg& a : n.args()) positional += a.name.empty() ? 1 : 0;
  if (positional > s.args.size())
    fail("{}: node '{}' ({}): {} positional arguments, its schema takes {}", file, n.name, n.target, positional,
         s.args.size());
  for (const Arg& a : n.args()) {
    if (a.name.empty()) continue;
    size_t index = s.args.size();
    for (size_t i = 0; i < s.args.size() && index == s.args.size(); ++i)
      if (s.args[i].name == a.name) index = i;
    if (index == s.args.size())
      fail("{}: node '{}' ({}): no argument '{}' in its schema", file, n.name, n.target, a.name);
    if (index < positional)
      fail("{}: node '{}' ({}): argument '{}' is given by position and by keyword", file, n.name, n.target, a.name);
  }
}

// A split-family node whose declared pieces do not have the rank the op gives them (every
// consumer reads a piece's shape by the input's dims).
void checkSplitPieces(const Node& n, const std::string& file) {
  const Attr* self = n.arg("self", 0);
  if (!self || self->kind != Attr::Kind::Value || !self->value || self->value->kind != ValueKind::Tensor) return;
  // A 0-D input has no dim to split (the op's dim check refuses it); an untyped value (a text
  // dump without metadata) has no rank to compare.
  const size_t input_rank = self->value->type.rank();
  if (input_rank == 0 || self->value->type.dtype == DType::DTYPE_UNSPECIFIED) return;
  const std::optional<size_t> want = splitPieceRank(n.target, input_rank);
  if (!want) return;
  for (size_t q = 0; q < n.numOutputs(); ++q) {
    const Value* o = n.output(q);
    if (o && o->kind == ValueKind::Tensor && o->type.dtype != DType::DTYPE_UNSPECIFIED && o->type.rank() != *want)
      fail("{}: node '{}' ({}): output {} is {}-D, but the pieces of a {}-D input are {}-D", file, n.name, n.target,
           q, o->type.rank(), input_rank, *want);
  }
}

}  // namespace

std::optional<size_t> splitPieceRank(std::string_view target, size_t input_rank) {
  if (target == "aten.unbind.int") return input_rank > 0 ? input_rank - 1 : 0;
  if (target == "aten.split.Tensor" || target == "aten.split_with_sizes.default" || target == "aten.chunk.default")
    return input_rank;
  return std::nullopt;
}

namespace {

// auto_functionalized(_v2) calls a mutating op with its arguments as keywords: each one the op's
// schema names is checked against its slot as a direct call's would be (v2 passes the mutable
// ones as base indices instead, so an absent argument is not an error here).
void checkFunctionalizedCall(const Node& n, const Module& m, std::map<std::string, OpSchema, std::less<>>* cache,
                             const std::string& file) {
  const Attr* op = n.arg("_mutable_op", 0);
  if (!op || op->kind != Attr::Kind::Op) return;
  const OpSchema* s = lookupSchema(m.op_schemas, op->s, cache);
  if (!s) return;
  for (const SchemaArg& sa : s->args) {
    const Attr* a = n.arg(sa.name, -1);
    if (!a) continue;
    const std::string problem = argProblem(sa, *a, !numbersInTensorSlots(op->s));
    if (!problem.empty())
      fail("{}: node '{}' ({} of {}): argument '{}' {}", file, n.name, n.target, op->s, sa.name, problem);
  }
}

}  // namespace

void validateNodesAgainstSchemas(const Module& m, const std::string& file) {
  std::map<std::string, OpSchema, std::less<>> cache;
  for (const auto& g : m.graphs()) {
    for (const auto& np : g->nodes()) {
      const Node& n = *np;
      if (n.target == "higher_order.auto_functionalized" || n.target == "higher_order.auto_functionalized_v2")
        checkFunctionalizedCall(n, m, &cache, file);
      if (n.kind != NodeKind::Op && n.kind != NodeKind::Fxfuse) continue;
      const OpSchema* s = lookupSchema(m.op_schemas, n.target, &cache);
      if (!s)
        fail("{}: node '{}': unknown op {} (no built-in schema and none carried in the file)", file, n.name, n.target);
      for (size_t i = 0; i < s->args.size(); ++i) {
        const SchemaArg& sa = s->args[i];
        const Attr* a = n.arg(sa.name, static_cast<int>(i));
        std::string problem;
        if (!a) {
          if (!sa.default_value && !sa.is_optional) problem = "is missing";
        } else {
          problem = argProblem(sa, *a, !numbersInTensorSlots(n.target));
        }
        if (!problem.empty())
          fail("{}: node '{}' ({}): argument '{}' {}", file, n.name, n.target, sa.name, problem);
      }
      checkNoExtraArgs(n, *s, file);
      checkSplitPieces(n, file);
      if (n.kind == NodeKind::Fxfuse) checkFxfuseNodeShape(n, *s, file);
    }
  }
}

}  // namespace fxfuse::ir
