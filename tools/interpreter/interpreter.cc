#include "tools/interpreter/interpreter.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "ir/fxg.h"
#include "ir/status.h"

namespace fxfuse::interp {

// ===================================================================================== Call

const RValue* Call::find(const std::string& name, int pos) const {
  for (const auto& a : args)
    if (a.first == name) return &a.second;
  int idx = schema ? schema->argIndex(name) : -1;
  if (idx < 0) idx = pos;
  if (idx >= 0 && static_cast<size_t>(idx) < args.size() && args[idx].first.empty()) return &args[idx].second;
  return nullptr;
}

const RValue* Call::positional(size_t i) const {
  return i < args.size() && args[i].first.empty() ? &args[i].second : nullptr;
}

bool Call::has(const std::string& name, int pos) const {
  const RValue* v = find(name, pos);
  return v && !v->isNone();
}

const RValue& Call::get(const std::string& name, int pos) const {
  const RValue* v = find(name, pos);
  if (!v) fail("missing argument '{}'", name);
  return *v;
}

Tensor Call::tensor(const std::string& name, int pos) const {
  const RValue& v = get(name, pos);
  if (!v.isTensor()) fail("argument '{}' must be a tensor, got {}", name, v.describe());
  return v.t;
}

std::optional<Tensor> Call::optTensor(const std::string& name, int pos) const {
  const RValue* v = find(name, pos);
  if (!v || v->isNone()) return std::nullopt;
  if (!v->isTensor()) fail("argument '{}' must be a tensor, got {}", name, v->describe());
  return v->t;
}

double Call::number(const std::string& name, double def, int pos) const {
  const RValue* v = find(name, pos);
  if (!v || v->isNone()) return def;
  if (v->isNumber()) return v->number();
  if (v->isTensor() && v->t.numel() == 1) return v->t.item();
  fail("argument '{}' must be a number, got {}", name, v->describe());
}

double Call::number(const std::string& name) const {
  const RValue* v = find(name);
  if (!v || v->isNone()) fail("missing argument '{}'", name);
  return number(name, 0.0);
}

int64_t Call::integer(const std::string& name, int64_t def, int pos) const {
  const RValue* v = find(name, pos);
  if (!v || v->isNone()) return def;
  if (auto i = integerOf(*v)) return *i;
  fail("argument '{}' must be an integer, got {}", name, v->describe());
}

int64_t Call::integer(const std::string& name) const {
  const RValue* v = find(name);
  if (!v || v->isNone()) fail("missing argument '{}'", name);
  return integer(name, 0);
}

bool Call::flag(const std::string& name, bool def, int pos) const {
  const RValue* v = find(name, pos);
  if (!v || v->isNone()) return def;
  if (v->kind == RValue::Kind::Bool) return v->b;
  if (v->isNumber()) return v->number() != 0;
  fail("argument '{}' must be a bool, got {}", name, v->describe());
}

std::string Call::str(const std::string& name, const std::string& def, int pos) const {
  const RValue* v = find(name, pos);
  if (!v || v->isNone()) return def;
  if (v->kind == RValue::Kind::Str || v->kind == RValue::Kind::Op) return v->s;
  fail("argument '{}' must be a string, got {}", name, v->describe());
}

Shape Call::ints(const std::string& name, int pos) const {
  auto v = optInts(name, pos);
  if (!v) fail("missing argument '{}'", name);
  return *v;
}

std::optional<Shape> Call::optInts(const std::string& name, int pos) const {
  const RValue* v = find(name, pos);
  if (!v || v->isNone()) return std::nullopt;
  Shape out;
  if (v->kind == RValue::Kind::Int) return Shape{v->i};
  if (v->kind != RValue::Kind::List) fail("argument '{}' must be a list of ints, got {}", name, v->describe());
  for (const RValue& e : v->list) {
    if (e.kind == RValue::Kind::Int) {
      out.push_back(e.i);
    } else if (e.kind == RValue::Kind::Bool) {
      out.push_back(e.b);
    } else if (auto i = e.isTensor() ? integerOf(e) : std::nullopt) {  // a one-element tensor holding an integer
      out.push_back(*i);
    } else {
      fail("argument '{}' must be a list of ints, got {}", name, v->describe());
    }
  }
  return out;
}

std::optional<DType> Call::dtype(const std::string& name, int pos) const {
  const RValue* v = find(name, pos);
  if (!v || v->isNone()) return std::nullopt;
  if (v->kind == RValue::Kind::DType) return v->dt;
  if (v->kind == RValue::Kind::Int) {
    if (auto d = ir::dtypeFromExportScalarType(v->i)) return d;
  }
  fail("argument '{}' must be a dtype, got {}", name, v->describe());
}

std::vector<RValue> Call::list(const std::string& name, int pos) const {
  const RValue* v = find(name, pos);
  if (!v || v->isNone()) return {};
  if (v->kind != RValue::Kind::List) fail("argument '{}' must be a list, got {}", name, v->describe());
  return v->list;
}

DType Call::outDType(size_t i, DType fallback) const {
  if (i < out_values.size() && out_values[i] && out_values[i]->isTensor() &&
      out_values[i]->type.dtype != DType::DTYPE_UNSPECIFIED)
    return out_values[i]->type.dtype;
  return fallback;
}

Tensor Call::alloc(size_t i, const Shape& shape, DType dtype) const {
  constexpr double kPoison = std::numeric_limits<double>::quiet_NaN();
  if (i < out_values.size() && out_values[i] && out_values[i]->isTensor() && interp) {
    const ir::TensorType& tt = out_values[i]->type;
    if (tt.rank() == shape.size() && tt.stride.size() == shape.size() && !tt.isContiguous()) {
      Shape st;
      bool ok = true;
      for (const auto& s : tt.stride) {
        auto v = s.evaluate(interp->bindings());
        if (!v) {
          ok = false;
          break;
        }
        st.push_back(*v);
      }
      if (ok) {
        Tensor probe;
        probe.shape = shape;
        probe.strides = st;
        if (probe.isNonOverlappingAndDense()) return Tensor::emptyStrided(shape, st, dtype, kPoison);
      }
    }
  }
  return Tensor::empty(shape, dtype, kPoison);
}

void Call::out(size_t i, Tensor t) { out(i, RValue::ofTensor(std::move(t))); }

void Call::out(size_t i, RValue v) {
  if (i >= outs.size()) {
    if (v.isNone()) return;
    outs.resize(i + 1);
  }
  outs[i] = std::move(v);
}

// ===================================================================================== OpTable

OpTable& OpTable::get() {
  static OpTable* table = [] {
    auto* t = new OpTable();
    registerElementwiseOps(*t);
    registerReductionOps(*t);
    registerShapeOps(*t);
    registerSelectOps(*t);
    registerFactoryOps(*t);
    registerLinalgOps(*t);
    registerVllmOps(*t);
    registerFxfuseOps(*t);
    registerPagedAttentionOps(*t);
    registerComplexOps(*t);
    return t;
  }();
  return *table;
}

void OpTable::add(const std::string& name, OpFn fn) { ops_[name] = std::move(fn); }

void OpTable::alias(const std::string& name, const std::string& existing) {
  auto it = ops_.find(existing);
  if (it == ops_.end()) throw std::logic_error("OpTable::alias: no op " + existing);
  ops_[name] = it->second;
}

const OpFn* OpTable::find(const std::string& target) const {
  auto it = ops_.find(target);
  if (it != ops_.end()) return &it->second;
  // Strip the overload: "aten.add.Tensor" -> "aten.add".
  auto dot2 = target.rfind('.');
  auto dot1 = target.find('.');
  if (dot2 != std::string::npos && dot2 != dot1) {
    it = ops_.find(target.substr(0, dot2));
    if (it != ops_.end()) return &it->second;
  }
  return nullptr;
}

std::vector<std::string> OpTable::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : ops_) out.push_back(k);
  std::sort(out.begin(), out.end());
  return out;
}

// ===================================================================================== helpers

RValue deepCopy(const RValue& v) {
  if (v.isTensor()) return RValue::ofTensor(clonePreserve(v.t));
  if (v.kind == RValue::Kind::List) {
    RValue out = v;
    for (auto& e : out.list) e = deepCopy(e);
    return out;
  }
  return v;
}

namespace {

std::string nodeDesc(const ir::Node& n) {
  return fmt::format("node '{}' ({})", n.name, n.target);
}

bool isBareSymbol(const ir::SymExpr& e) { return e.kind() == ir::SymExpr::Kind::Sym; }

}  // namespace

// ===================================================================================== Interpreter

Interpreter::Interpreter(ir::Module& module, Options options) : module_(module), options_(std::move(options)) {
  if (module_.graphs().empty()) fail("module has no graph");
  entry_ = &module_.entry();
  if (!options_.graph.empty()) {
    entry_ = nullptr;
    std::string names;
    for (const auto& g : module_.graphs()) {
      if (g->name == options_.graph) entry_ = g.get();
      names += (names.empty() ? "" : ", ") + g->name;
    }
    if (!entry_) fail("no graph @{} in the module (graphs: {})", options_.graph, names);
  }
  bindSymbols();
}

const ir::OpSchema* Interpreter::schemaFor(const std::string& target) {
  return ir::lookupSchema(module_.op_schemas, target, &schema_cache_);
}

void Interpreter::warn(const std::string& msg) {
  for (const auto& w : warnings_)
    if (w == msg) return;
  warnings_.push_back(msg);
}

std::string Interpreter::bindingSource(const std::string& sym) const {
  auto it = env_source_.find(sym);
  return it == env_source_.end() ? "" : it->second;
}

int64_t Interpreter::evalSize(const ir::SymExpr& e, const std::string& context) const {
  auto v = e.evaluate(env_);
  if (!v) fail("{}: cannot evaluate size '{}' (unbound symbol?)", context, e.str());
  return *v;
}

Shape Interpreter::evalShape(const std::vector<ir::SymExpr>& dims, const std::string& context) const {
  Shape out;
  for (const auto& d : dims) out.push_back(evalSize(d, context));
  return out;
}

namespace {

// Targets whose tensor operands broadcast against each other elementwise.
bool isBroadcastingOp(const std::string& target) {
  static const std::unordered_set<std::string> kOps = {
      "aten.add", "aten.sub", "aten.mul", "aten.div", "aten.rsub", "aten.where", "aten.pow", "aten.maximum",
      "aten.minimum", "aten.eq", "aten.ne", "aten.lt", "aten.le", "aten.gt", "aten.ge", "aten.logical_and",
      "aten.logical_or", "aten.logical_xor", "aten.bitwise_and", "aten.bitwise_or", "aten.bitwise_xor",
      "aten.masked_fill", "aten.add_", "aten.mul_", "aten.sub_", "aten.div_", "aten.copy_", "aten.copy",
      "aten.clamp", "aten.fmod", "aten.remainder", "aten.floor_divide", "aten.atan2", "aten.hypot",
  };
  auto dot2 = target.rfind('.');
  std::string base = target.substr(0, dot2);
  return kOps.count(base) > 0 || kOps.count(target) > 0;
}

}  // namespace

namespace {

// The values of `x` in [lo, hi] for which f(x) == c, as an interval, assuming f is monotone
// (sizes are: a*s + b, s // k, s - s // 2); nullopt when there is none or f is undefined.
std::optional<std::pair<int64_t, int64_t>> solveMonotone(const std::function<std::optional<int64_t>(int64_t)>& f,
                                                         int64_t lo, int64_t hi, int64_t c) {
  auto flo = f(lo), fhi = f(hi);
  if (!flo || !fhi) return std::nullopt;
  bool inc = *fhi >= *flo;
  // First x with f(x) >= c (increasing) / <= c (decreasing), and first with f(x) > c / < c.
  auto first = [&](bool strict) -> int64_t {
    int64_t a = lo, b = hi + 1;
    while (a < b) {
      int64_t mid = a + (b - a) / 2;
      auto v = f(mid);
      if (!v) return hi + 1;
      bool past = inc ? (strict ? *v > c : *v >= c) : (strict ? *v < c : *v <= c);
      if (past) b = mid;
      else a = mid + 1;
    }
    return a;
  };
  int64_t x1 = first(false), x2 = first(true) - 1;
  if (x1 > hi || x1 > x2) return std::nullopt;
  auto v1 = f(x1), v2 = f(x2);
  if (!v1 || !v2 || *v1 != c || *v2 != c) return std::nullopt;
  return std::make_pair(x1, x2);
}

}  // namespace

void Interpreter::solveShapeEquations(const std::vector<ShapeEquation>& eqs,
                                      std::map<std::string, std::pair<int64_t, int64_t>>* ranges) {
  bool changed = true;
  while (changed) {
    changed = false;
    for (const auto& e : eqs) {
      for (int side = 0; side < 2; ++side) {
        const ir::SymExpr& s = side ? e.b : e.a;
        const ir::SymExpr& o = side ? e.a : e.b;
        std::set<std::string> free;
        s.collectSymbols(free);
        for (auto it = free.begin(); it != free.end();) it = env_.count(*it) ? free.erase(it) : std::next(it);
        if (free.size() != 1) continue;
        auto c = o.evaluate(env_);
        if (!c) continue;
        const std::string x = *free.begin();
        const ir::SymbolInfo* info = module_.symbols.find(x);
        auto known = ranges->find(x);
        int64_t lo = known != ranges->end() ? known->second.first : (info && info->min ? *info->min : 0);
        int64_t hi = known != ranges->end() ? known->second.second : (info && info->max ? *info->max : int64_t{1} << 40);
        std::map<std::string, int64_t> trial = env_;
        auto f = [&](int64_t v) {
          trial[x] = v;
          return s.evaluate(trial);
        };
        auto r = solveMonotone(f, lo, hi, *c);
        if (!r) continue;
        if (r->first == r->second) {
          env_[x] = r->first;
          env_source_[x] = e.node ? fmt::format("forced by {}", nodeDesc(*e.node)) : "forced by a module guard";
          ranges->erase(x);
          changed = true;
        } else if (known == ranges->end() || *r != known->second) {
          (*ranges)[x] = *r;
          changed = true;
        }
      }
    }
  }
}

void Interpreter::bindSymbols() {
  const ir::Graph& g = *entry_;
  std::set<std::string> syms;
  for (const auto& [name, info] : module_.symbols.all()) syms.insert(name);
  std::set<std::string> of_inputs;
  for (const auto& in : g.inputs()) {
    for (const auto& d : in.value->type.shape) d.collectSymbols(of_inputs);
    if (in.value->sym) in.value->sym->collectSymbols(of_inputs);
  }
  syms.insert(of_inputs.begin(), of_inputs.end());
  // Data-dependent sizes (u0 = item() of a routing count, the row count of nonzero) are bound
  // by the node that computes them (checkOutput), never beforehand.
  for (const auto& np : g.nodes())
    for (const ir::Value* o : np->outputs()) {
      if (!o) continue;
      if (o->sym && isBareSymbol(*o->sym) && !of_inputs.count(o->sym->name())) syms.erase(o->sym->name());
      if (o->isTensor())
        for (const auto& d : o->type.shape)
          if (isBareSymbol(d) && !of_inputs.count(d.name()) && d.name().rfind("u", 0) == 0) syms.erase(d.name());
    }
  for (const auto& [name, v] : options_.bind) {
    if (!syms.count(name)) {
      std::string all;
      for (const auto& s : syms) all += (all.empty() ? "" : ", ") + s;
      fail("--bind {}={}: the graph has no symbol '{}' (symbols: {})", name, v, name, all.empty() ? "none" : all);
    }
    // Not held to the symbol's range: torch's lower bound of 2 is a specialization artifact
    // and 1 is a real decode size. Huge values are refused where they size a tensor.
    if (v < 0) fail("--bind {}={}: a size cannot be negative", name, v);
    env_[name] = v;
    env_source_[name] = "--bind";
  }
  // Sizes forced by a fixed dimension elsewhere in the graph.
  std::vector<ShapeEquation> eqs;
  auto tensorShape = [](const ir::Value* v) -> const std::vector<ir::SymExpr>* {
    if (!v || !v->isTensor() || v->type.dtype == DType::DTYPE_UNSPECIFIED) return nullptr;
    return &v->type.shape;
  };
  auto isOne = [](const ir::SymExpr& e) { return e.isInt() && e.intValue() == 1; };
  for (const auto& np : g.nodes()) {
    const ir::Node& n = *np;
    std::vector<ir::Value*> ops = n.operands();
    if (isBroadcastingOp(n.target)) {
      std::vector<const std::vector<ir::SymExpr>*> shapes;
      for (ir::Value* v : ops)
        if (auto s = tensorShape(v)) shapes.push_back(s);
      for (size_t i = 0; i < shapes.size(); ++i)
        for (size_t j = i + 1; j < shapes.size(); ++j) {
          const auto& a = *shapes[i];
          const auto& b = *shapes[j];
          size_t k = std::min(a.size(), b.size());
          for (size_t t = 1; t <= k; ++t) {
            const auto& da = a[a.size() - t];
            const auto& db = b[b.size() - t];
            if (isOne(da) || isOne(db)) continue;
            eqs.push_back({da, db, &n});
          }
        }
    }
    auto matmulPair = [&](const ir::Value* x, const ir::Value* y, bool y_transposed) {
      auto sx = tensorShape(x);
      auto sy = tensorShape(y);
      if (!sx || !sy || sx->empty() || sy->empty()) return;
      const auto& kx = sx->back();
      const auto& ky = y_transposed ? sy->back() : (sy->size() >= 2 ? (*sy)[sy->size() - 2] : sy->back());
      eqs.push_back({kx, ky, &n});
    };
    const std::string& t = n.target;
    if (t == "aten.mm.default" || t == "aten.bmm.default" || t == "aten.matmul.default" ||
        t == "aten._scaled_mm.default") {
      matmulPair(n.input("self", 0), n.input("mat2", 1) ? n.input("mat2", 1) : n.input("other", 1), false);
    } else if (t == "aten.addmm.default") {
      matmulPair(n.input("mat1", 1), n.input("mat2", 2), false);
    } else if (t == "aten.linear.default") {
      matmulPair(n.input("input", 0), n.input("weight", 1), true);
    }
  }
  // Equalities the module's guards assert (a pass relied on them, e.g. "query, key and value
  // of every attention site are the batch's s0 tokens") are equations of the same kind.
  for (const ir::Guard& guard : module_.guards)
    if (guard.condition.kind() == ir::SymExpr::Kind::Eq && guard.condition.args().size() == 2)
      eqs.push_back({guard.condition.args()[0], guard.condition.args()[1], nullptr});
  // Symbols the equations determine come before hints (a hint is one traced value, the
  // equations are facts of every valid binding); then hints, then what hints determine.
  std::map<std::string, std::pair<int64_t, int64_t>> ranges;
  solveShapeEquations(eqs, &ranges);
  for (const auto& name : syms) {
    if (env_.count(name)) continue;
    const ir::SymbolInfo* info = module_.symbols.find(name);
    if (info && info->hint) {
      int64_t v = *info->hint;
      auto r = ranges.find(name);
      if (r != ranges.end() && (v < r->second.first || v > r->second.second)) continue;  // the equations exclude it
      env_[name] = v;
      env_source_[name] = "hint";
    }
  }
  solveShapeEquations(eqs, &ranges);
  for (const auto& [name, r] : ranges)
    if (!env_.count(name) && syms.count(name)) {
      env_[name] = r.first;
      env_source_[name] = fmt::format("smallest value the shape equations allow ([{}, {}])", r.first, r.second);
    }
  for (const auto& name : syms) {
    if (env_.count(name)) continue;
    int64_t v = options_.default_symbol_size;
    const ir::SymbolInfo* info = module_.symbols.find(name);
    if (info && info->min && v < *info->min) v = *info->min;
    if (info && info->max && v > *info->max) v = *info->max;
    env_[name] = v;
    env_source_[name] = "default";
  }
  planKvBatch();
  ir::checkGuards(module_.guards, env_, "symbol binding");
}

void Interpreter::bindFromInputs(const ir::Graph& g, const std::vector<RValue>& inputs) {
  if (inputs.size() != g.inputs().size())
    fail("graph @{} takes {} inputs, {} given", g.name, g.inputs().size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Value* v = g.inputs()[i].value;
    const RValue& r = inputs[i];
    std::string ctx = fmt::format("input '{}'", v->name);
    if (v->isTensor()) {
      if (!r.isTensor()) fail("{}: expected a tensor, got {}", ctx, r.describe());
      if (v->type.rank() != r.t.shape.size())
        fail("{}: rank {} given for type of rank {}", ctx, r.t.shape.size(), v->type.rank());
      for (size_t d = 0; d < r.t.shape.size(); ++d) {
        const auto& e = v->type.shape[d];
        if (isBareSymbol(e) && !env_.count(e.name())) {
          env_[e.name()] = r.t.shape[d];
          env_source_[e.name()] = "from inputs";
        }
      }
    } else if (v->kind == ir::ValueKind::SymInt && v->sym && isBareSymbol(*v->sym) && !env_.count(v->sym->name()) &&
               r.kind == RValue::Kind::Int) {
      env_[v->sym->name()] = r.i;
      env_source_[v->sym->name()] = "from inputs";
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Value* v = g.inputs()[i].value;
    if (!v->isTensor()) continue;
    Shape want = evalShape(v->type.shape, fmt::format("input '{}'", v->name));
    if (want != inputs[i].t.shape)
      fail("input '{}': shape {} given, the graph declares {}", v->name, shapeStr(inputs[i].t.shape), shapeStr(want));
    if (v->type.dtype != inputs[i].t.dtype)
      fail("input '{}': dtype {} given, the graph declares {}", v->name, ir::dtypeName(inputs[i].t.dtype),
           ir::dtypeName(v->type.dtype));
  }
}

RValue Interpreter::evalAttr(const ir::Attr& a, const std::vector<RValue>& env) const {
  (void)env;
  using K = ir::Attr::Kind;
  switch (a.kind) {
    case K::None: return RValue::none();
    case K::Value: fail("internal: value attrs are resolved by the caller");
    case K::Int: return RValue::ofInt(a.i);
    case K::Float: return RValue::ofFloat(a.f);
    case K::Bool: return RValue::ofBool(a.b);
    case K::String: return RValue::ofStr(a.s);
    case K::SpecialFloat: return RValue::ofFloat(*a.asDouble());
    case K::DType: {
      RValue v;
      v.kind = RValue::Kind::DType;
      v.dt = a.dtype;
      return v;
    }
    case K::Sym: {
      const ir::SymExpr& e = *a.sym;
      if (e.kind() == ir::SymExpr::Kind::Real) return RValue::ofFloat(e.realValue());
      if (e.kind() == ir::SymExpr::Kind::Bool) return RValue::ofBool(e.boolValue());
      return RValue::ofInt(evalSize(e, "argument"));
    }
    case K::Op: {
      RValue v;
      v.kind = RValue::Kind::Op;
      v.s = a.s;
      return v;
    }
    default: {
      RValue v;
      v.kind = RValue::Kind::Other;
      v.attr = &a;
      return v;
    }
  }
}

namespace {

using Env = std::unordered_map<const ir::Value*, RValue>;

RValue resolve(const Interpreter& in, const ir::Attr& a, const Env& env) {
  if (a.kind == ir::Attr::Kind::Value) {
    auto it = env.find(a.value);
    if (it == env.end()) fail("value '{}' is used before it is computed", a.value ? a.value->name : "?");
    return it->second;
  }
  if (a.kind == ir::Attr::Kind::List) {
    std::vector<RValue> items;
    for (const auto& e : a.list) items.push_back(resolve(in, e, env));
    return RValue::ofList(std::move(items));
  }
  return in.evalAttr(a, {});
}

}  // namespace

void Interpreter::dispatch(Call& c) {
  c.interp = this;
  if (!c.schema) c.schema = schemaFor(c.target);
  if (!acceptsComplex(c.target))
    for (const auto& [name, v] : c.args)
      if (v.kind == RValue::Kind::Tensor && ir::isComplex(v.t.dtype))
        fail("complex tensors are supported by the ops of complex rotary embeddings only (polar, "
             "view_as_complex/real, mul, views, copies): {} got {}",
             c.target, v.t.describe());
  const OpFn* fn = OpTable::get().find(c.target);
  if (fn) {
    (*fn)(c);
    return;
  }
  // In-place variant (aten.add_.Tensor): run the functional op, then write into self.
  auto dot1 = c.target.find('.');
  auto dot2 = c.target.find('.', dot1 + 1);
  std::string name = c.target.substr(dot1 + 1, dot2 == std::string::npos ? std::string::npos : dot2 - dot1 - 1);
  if (name.size() > 1 && name.back() == '_' && name[name.size() - 2] != '_') {
    std::string functional = c.target.substr(0, dot1 + 1) + name.substr(0, name.size() - 1) +
                             (dot2 == std::string::npos ? "" : c.target.substr(dot2));
    const OpFn* f2 = OpTable::get().find(functional);
    if (f2) {
      Call inner = c;
      inner.target = functional;
      inner.schema = schemaFor(functional);
      inner.out_values.clear();
      inner.outs.assign(1, RValue{});
      (*f2)(inner);
      Tensor self = c.tensor("self", 0);
      if (inner.outs.empty() || !inner.outs[0].isTensor()) fail("in-place op produced no tensor");
      copyInto(self, inner.outs[0].t);
      c.out(0, self);
      return;
    }
  }
  fail("op '{}' is not supported by the interpreter", c.target);
}

void Interpreter::checkOutput(const ir::Node& n, size_t i, const RValue& v) {
  const ir::Value* rec = n.output(i);
  if (!rec) return;
  if (rec->isTensor()) {
    if (rec->type.dtype == DType::DTYPE_UNSPECIFIED) return;
    if (!v.isTensor()) {
      if (v.isNone()) fail("output {} was not produced", i);
      fail("output {} should be a tensor, got {}", i, v.describe());
    }
    const auto& dims = rec->type.shape;
    if (dims.size() != v.t.shape.size())
      fail("computed {} for output {} but the graph records rank {} ({})", v.t.describe(), i, dims.size(),
           ir::typeStr(*rec));
    for (size_t d = 0; d < dims.size(); ++d) {
      auto want = dims[d].evaluate(env_);
      if (!want && isBareSymbol(dims[d])) {
        env_[dims[d].name()] = v.t.shape[d];
        env_source_[dims[d].name()] = fmt::format("computed by {}", nodeDesc(n));
        continue;
      }
      if (!want) continue;
      if (*want != v.t.shape[d]) {
        Shape rs;
        for (const auto& e : dims) rs.push_back(e.evaluate(env_).value_or(-1));
        fail("shape contradiction: computed {} for output {} but the graph records {} = {} (bindings: {})",
             shapeStr(v.t.shape), i, ir::typeStr(*rec), shapeStr(rs), [&] {
               std::string b;
               for (const auto& [k, x] : env_) b += (b.empty() ? "" : ", ") + k + "=" + std::to_string(x);
               return b;
             }());
      }
    }
    if (rec->type.dtype != v.t.dtype)
      fail("computed dtype {} for output {} but the graph records {}", ir::dtypeName(v.t.dtype), i,
           ir::dtypeName(rec->type.dtype));
  } else if (rec->kind == ir::ValueKind::SymInt && rec->sym) {
    if (v.kind != RValue::Kind::Int) return;
    auto want = rec->sym->evaluate(env_);
    if (!want && isBareSymbol(*rec->sym)) {
      env_[rec->sym->name()] = v.i;
      env_source_[rec->sym->name()] = fmt::format("computed by {}", nodeDesc(n));
    } else if (want && *want != v.i) {
      fail("shape contradiction: computed {} for output {} but the graph records {} = {}", v.i, i, rec->sym->str(), *want);
    }
  }
}

namespace {

bool isViewOp(const std::string& target) {
  static const std::unordered_set<std::string> k = {
      "aten.view", "aten.reshape", "aten._unsafe_view", "aten._reshape_alias", "aten.permute", "aten.transpose",
      "aten.t", "aten.numpy_T", "aten.expand", "aten.expand_as", "aten.slice", "aten.select", "aten.unsqueeze",
      "aten.squeeze", "aten.as_strided", "aten.alias", "aten.detach", "aten.lift_fresh", "aten.split",
      "aten.split_with_sizes", "aten.chunk", "aten.unbind", "aten.narrow", "aten.flatten", "aten.unflatten",
      "aten.to", "aten.contiguous", "aten.copy_", "_c10d_functional.wait_tensor",
  };
  auto dot2 = target.rfind('.');
  return k.count(target.substr(0, dot2)) > 0;
}

}  // namespace

std::vector<bool> Interpreter::mutatedInputs(const ir::Graph& g) {
  std::vector<bool> out(g.inputs().size(), false);
  std::unordered_map<const ir::Value*, size_t> input_index;
  for (size_t i = 0; i < g.inputs().size(); ++i) input_index[g.inputs()[i].value] = i;
  auto root = [&](const ir::Value* v) {
    for (int guard = 0; v && guard < 10000; ++guard) {
      auto it = input_index.find(v);
      if (it != input_index.end()) return static_cast<int64_t>(it->second);
      const ir::Node* p = v->producer();
      if (!p || !isViewOp(p->target)) return int64_t{-1};
      std::vector<ir::Value*> ops = p->operands();
      if (ops.empty()) return int64_t{-1};
      v = ops[0];
    }
    return int64_t{-1};
  };
  for (const auto& np : g.nodes()) {
    const ir::Node& n = *np;
    if (n.kind == ir::NodeKind::Hop) {
      if (n.target == "higher_order.auto_functionalized" || n.target == "higher_order.auto_functionalized_v2") continue;
      std::fill(out.begin(), out.end(), true);  // subgraphs: be conservative
      return out;
    }
    if (n.kind == ir::NodeKind::SymPy) continue;
    std::vector<const ir::Value*> written;
    const ir::OpSchema* s = schemaFor(n.target);
    auto dot1 = n.target.find('.');
    auto dot2 = n.target.find('.', dot1 + 1);
    std::string name = n.target.substr(dot1 + 1, dot2 == std::string::npos ? std::string::npos : dot2 - dot1 - 1);
    bool inplace_name = name.size() > 1 && name.back() == '_';
    for (size_t k = 0; k < n.args().size(); ++k) {
      const ir::Arg& a = n.args()[k];
      std::vector<ir::Value*> vs;
      a.value.collectValues(vs);
      if (vs.empty()) continue;
      bool mut = inplace_name && k == 0;
      if (s) {
        int idx = a.name.empty() ? static_cast<int>(k) : s->argIndex(a.name);
        if (idx >= 0 && static_cast<size_t>(idx) < s->args.size() && s->args[idx].is_mutable) mut = true;
      } else if (n.target.rfind("aten.", 0) != 0 && n.target.rfind("prims.", 0) != 0) {
        mut = true;  // unknown custom op: assume it may write its arguments
      }
      if (mut)
        for (auto* v : vs) written.push_back(v);
    }
    for (const ir::Value* v : written)
      if (int64_t r = root(v); r >= 0) out[r] = true;
  }
  return out;
}

std::vector<RValue> Interpreter::run(const std::vector<RValue>& inputs, const ir::Graph* graph) {
  const ir::Graph& g = graph ? *graph : *entry_;
  // Inputs the graph writes in place (directly or through a view) are copied so runs never
  // share memory; the others are passed as they are.
  std::vector<bool> mutated = inputs.size() == g.inputs().size() ? mutatedInputs(g) : std::vector<bool>(inputs.size(), true);
  std::vector<RValue> copies;
  copies.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) copies.push_back(mutated[i] ? deepCopy(inputs[i]) : inputs[i]);
  auto t0 = std::chrono::steady_clock::now();
  stats_.nodes = 0;
  stats_.by_target.clear();
  auto out = runGraph(g, std::move(copies));
  stats_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

namespace {

double symNumber(const RValue& v) {
  if (v.isNumber()) return v.number();
  if (v.isTensor() && v.t.numel() == 1) return v.t.item();
  fail("expected a number, got {}", v.describe());
}

bool isIntLike(const RValue& v) { return v.kind == RValue::Kind::Int || v.kind == RValue::Kind::Bool; }

RValue symOp(const std::string& op, const std::vector<RValue>& a) {
  auto need = [&](size_t n) {
    if (a.size() < n) fail("{} needs {} arguments", op, n);
  };
  auto num = [&](size_t i) { return symNumber(a[i]); };
  auto bothInt = [&] { return isIntLike(a[0]) && isIntLike(a[1]); };
  // An integer result must fit int64 (a graph's symbolic arithmetic can overflow it: refused,
  // never converted out of range).
  auto toInt = [&](double v) {
    if (auto i = truncatedInt64(v)) return *i;
    fail("symbolic {}: the integer result {} does not fit int64", op, v);
  };
  auto intOr = [&](double v, bool as_int) { return as_int ? RValue::ofInt(toInt(v)) : RValue::ofFloat(v); };
  // Integer add/sub/mul exactly (doubles lose integers above 2^53).
  auto exact = [&](bool (*f)(int64_t, int64_t, int64_t*)) {
    int64_t r;
    auto intOf = [](const RValue& x) { return x.kind == RValue::Kind::Int ? x.i : x.b ? 1 : 0; };
    if (f(intOf(a[0]), intOf(a[1]), &r))
      fail("symbolic {}: the integer result overflows int64", op);
    return RValue::ofInt(r);
  };
  auto add = [](int64_t x, int64_t y, int64_t* r) { return __builtin_add_overflow(x, y, r); };
  auto sub = [](int64_t x, int64_t y, int64_t* r) { return __builtin_sub_overflow(x, y, r); };
  auto mul = [](int64_t x, int64_t y, int64_t* r) { return __builtin_mul_overflow(x, y, r); };
  if (op == "add") { need(2); return bothInt() ? exact(add) : intOr(num(0) + num(1), false); }
  if (op == "sub") { need(2); return bothInt() ? exact(sub) : intOr(num(0) - num(1), false); }
  if (op == "mul") { need(2); return bothInt() ? exact(mul) : intOr(num(0) * num(1), false); }
  if (op == "floordiv") {
    need(2);
    if (num(1) == 0) fail("floordiv by zero");
    return intOr(std::floor(num(0) / num(1)), bothInt());
  }
  if (op == "mod") {
    need(2);
    if (num(1) == 0) fail("mod by zero");
    double r = std::fmod(num(0), num(1));
    if (r != 0 && ((r < 0) != (num(1) < 0))) r += num(1);
    return intOr(r, bothInt());
  }
  if (op == "truediv") { need(2); return RValue::ofFloat(num(0) / num(1)); }
  if (op == "pow") { need(2); return intOr(std::pow(num(0), num(1)), bothInt() && num(1) >= 0); }
  if (op == "neg") { need(1); return intOr(-num(0), isIntLike(a[0])); }
  if (op == "abs") { need(1); return intOr(std::fabs(num(0)), isIntLike(a[0])); }
  if (op == "eq") { need(2); return RValue::ofBool(num(0) == num(1)); }
  if (op == "ne") { need(2); return RValue::ofBool(num(0) != num(1)); }
  if (op == "lt") { need(2); return RValue::ofBool(num(0) < num(1)); }
  if (op == "le") { need(2); return RValue::ofBool(num(0) <= num(1)); }
  if (op == "gt") { need(2); return RValue::ofBool(num(0) > num(1)); }
  if (op == "ge") { need(2); return RValue::ofBool(num(0) >= num(1)); }
  if (op == "and_") { need(2); return RValue::ofBool(num(0) != 0 && num(1) != 0); }
  if (op == "or_") { need(2); return RValue::ofBool(num(0) != 0 || num(1) != 0); }
  if (op == "not_" || op == "sym_not") { need(1); return RValue::ofBool(num(0) == 0); }
  if (op == "trunc" || op == "sym_int") { need(1); return RValue::ofInt(toInt(std::trunc(num(0)))); }
  if (op == "floor") { need(1); return RValue::ofInt(toInt(std::floor(num(0)))); }
  if (op == "ceil") { need(1); return RValue::ofInt(toInt(std::ceil(num(0)))); }
  if (op == "sqrt" || op == "sym_sqrt") { need(1); return RValue::ofFloat(std::sqrt(num(0))); }
  if (op == "sym_float") { need(1); return RValue::ofFloat(num(0)); }
  if (op == "sym_max") { need(2); return intOr(std::max(num(0), num(1)), bothInt()); }
  if (op == "sym_min") { need(2); return intOr(std::min(num(0), num(1)), bothInt()); }
  if (op == "sym_ite") { need(3); return num(0) != 0 ? a[1] : a[2]; }
  if (op == "sym_sum") {  // torch.sym_sum([a, b, ...]): one list argument (or the values themselves)
    const std::vector<RValue>& xs = a.size() == 1 && a[0].kind == RValue::Kind::List ? a[0].list : a;
    double total = 0;
    bool all_int = true;
    for (const RValue& x : xs) {
      total += symNumber(x);
      all_int = all_int && isIntLike(x);
    }
    return intOr(total, all_int);
  }
  fail("symbolic op '{}' is not supported", op);
}

// auto_functionalized_v2: mutable argument `an` rebuilt as the view of its base that the node
// records (`_<an>_base_index` with `_alias`, `_slice_*` or `_size`/`_stride`/`_storage_offset`),
// or a clone of the argument itself when it has no base; none when neither is given.
RValue viewOfBase(const std::map<std::string, RValue>& kw, const std::string& an, const std::vector<RValue>& bases) {
  auto idx = kw.find("_" + an + "_base_index");
  if (idx == kw.end() || idx->second.isNone()) {
    auto direct = kw.find(an);
    return direct != kw.end() && direct->second.isTensor() ? RValue::ofTensor(clonePreserve(direct->second.t)) : RValue{};
  }
  int64_t b = idx->second.i;
  if (b < 0 || static_cast<size_t>(b) >= bases.size()) fail("_{}_base_index {} out of range", an, b);
  if (!bases[b].isTensor()) fail("_{}_base_index {} names {}, not a tensor", an, b, bases[b].describe());
  Tensor base = bases[b].t;
  auto opt = [&](const std::string& suffix) -> const RValue* {
    auto f = kw.find("_" + an + "_" + suffix);
    return f == kw.end() || f->second.isNone() ? nullptr : &f->second;
  };
  if (const RValue* al = opt("alias"); al && al->number() != 0) return RValue::ofTensor(base);
  // The view's numbers exactly (sys.maxsize, torch's "to the end", is not a double).
  auto integer = [&](const RValue& v, const std::string& suffix) {
    if (auto i = integerOf(v)) return *i;
    fail("_{}_{} must be an integer, got {}", an, suffix, v.describe());
  };
  if (const RValue* sd = opt("slice_dim")) {
    const RValue* ss = opt("slice_start");
    const RValue* se = opt("slice_end");
    return RValue::ofTensor(slice(base, integer(*sd, "slice_dim"), ss ? integer(*ss, "slice_start") : 0,
                                  se ? integer(*se, "slice_end") : std::numeric_limits<int64_t>::max(), 1));
  }
  if (const RValue* sz = opt("size")) {
    Shape size, stride;
    for (const auto& e : sz->list) size.push_back(integer(e, "size"));
    if (const RValue* st = opt("stride")) {
      for (const auto& e : st->list) stride.push_back(integer(e, "stride"));
    } else {
      stride = contiguousStrides(size);
    }
    const RValue* so = opt("storage_offset");
    return RValue::ofTensor(asStrided(base, size, stride, so ? integer(*so, "storage_offset") : base.offset));
  }
  return RValue::ofTensor(base);
}

// One auto_functionalized(_v2) node: the op runs on clones of its mutable arguments (v1), or on
// views of clones of the bases (v2); the node's outputs are the op's own results, then the
// mutated arguments (v1) or the new bases (v2).
std::vector<RValue> runAutoFunctionalized(Interpreter& in, const ir::Node& n, const Env& env) {
  const bool v2 = n.target == "higher_order.auto_functionalized_v2";
  if (n.args().empty() || n.args()[0].value.kind != ir::Attr::Kind::Op) fail("the first argument must be the op");
  Call c;
  c.interp = &in;
  c.node = nullptr;
  c.target = n.args()[0].value.s;
  c.schema = in.schemaFor(c.target);
  if (!c.schema) fail("no schema for '{}': cannot tell which arguments it mutates", c.target);
  std::map<std::string, RValue> kw;
  for (size_t k = 1; k < n.args().size(); ++k) {
    const auto& arg = n.args()[k];
    if (arg.name.empty()) fail("auto_functionalized arguments must be named");
    kw[arg.name] = resolve(in, arg.value, env);
  }
  std::vector<int> mut = c.schema->mutableArgs();
  std::vector<RValue> bases, mut_vals(mut.size());
  if (!v2) {
    for (size_t k = 0; k < mut.size(); ++k) {
      const std::string& an = c.schema->args[mut[k]].name;
      auto it = kw.find(an);
      if (it == kw.end() || it->second.isNone()) continue;
      if (!it->second.isTensor()) fail("mutable argument '{}' is not a tensor", an);
      it->second = RValue::ofTensor(clonePreserve(it->second.t));
      mut_vals[k] = it->second;
    }
  } else {
    if (auto bi = kw.find("_all_bases"); bi != kw.end()) bases = bi->second.list;
    for (auto& b : bases)
      if (b.isTensor()) b = RValue::ofTensor(clonePreserve(b.t));
    for (size_t k = 0; k < mut.size(); ++k) {
      const std::string& an = c.schema->args[mut[k]].name;
      mut_vals[k] = kw[an] = viewOfBase(kw, an, bases);
    }
    // Drop the v2 bookkeeping kwargs before calling the op.
    for (auto it = kw.begin(); it != kw.end();)
      it = !it->first.empty() && it->first[0] == '_' && c.schema->argIndex(it->first) < 0 ? kw.erase(it) : std::next(it);
  }
  for (auto& [k, v] : kw) c.args.emplace_back(k, v);
  const size_t extra = v2 ? bases.size() : mut.size();
  if (n.numOutputs() < extra) fail("{} outputs, expected at least {}", n.numOutputs(), extra);
  const size_t nret = n.numOutputs() - extra;
  c.outs.assign(nret, RValue{});
  for (size_t k = 0; k < nret; ++k) c.out_values.push_back(n.output(k));
  in.dispatch(c);
  std::vector<RValue> outs = c.outs;
  outs.resize(nret);
  for (auto& m : v2 ? bases : mut_vals) outs.push_back(m);
  return outs;
}

}  // namespace

std::vector<RValue> Interpreter::runGraph(const ir::Graph& g, std::vector<RValue> inputs) {
  if (inputs.size() != g.inputs().size())
    fail("graph @{} takes {} inputs, {} given", g.name, g.inputs().size(), inputs.size());
  Env env;
  env.reserve(g.numNodes() * 2 + inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) env[g.inputs()[i].value] = std::move(inputs[i]);
  // Last use of each value, to free memory early.
  std::unordered_map<const ir::Node*, std::vector<const ir::Value*>> frees;
  {
    std::unordered_set<const ir::Value*> kept;
    for (const auto& o : g.outputs())
      if (o.value) kept.insert(o.value);
    std::unordered_map<const ir::Value*, const ir::Node*> last;
    for (const auto& np : g.nodes())
      for (ir::Value* v : np->operands()) last[v] = np.get();
    for (const auto& [v, nd] : last)
      if (!kept.count(v)) frees[nd].push_back(v);
  }
  for (const auto& np : g.nodes()) {
    const ir::Node& n = *np;
    ++stats_.nodes;
    auto node_t0 = std::chrono::steady_clock::now();
    try {
      std::vector<RValue> outs;
      if (n.kind == ir::NodeKind::SymPy) {
        std::vector<RValue> a;
        for (const auto& arg : n.args()) a.push_back(resolve(*this, arg.value, env));
        std::string op = n.target.substr(n.target.rfind('.') + 1);
        outs.push_back(symOp(op, a));
      } else if (n.target == "higher_order.auto_functionalized" || n.target == "higher_order.auto_functionalized_v2") {
        outs = runAutoFunctionalized(*this, n, env);
      } else if (n.target == "higher_order.cond") {
        if (n.args().size() < 4) fail("cond takes (pred, true_graph, false_graph, operands)");
        RValue pred = resolve(*this, n.args()[0].value, env);
        bool p = symNumber(pred) != 0;
        const ir::Attr& ga = n.args()[p ? 1 : 2].value;
        if (ga.kind != ir::Attr::Kind::Graph || ga.graph < 0 ||
            static_cast<size_t>(ga.graph) >= module_.graphs().size())
          fail("cond branch is not a subgraph");
        RValue ops = resolve(*this, n.args()[3].value, env);
        outs = runGraph(*module_.graphs()[ga.graph], ops.list);
      } else if (n.target == "higher_order.wrap_with_set_grad_enabled" ||
                 n.target == "higher_order.wrap_with_autocast") {
        size_t gi = 0;
        while (gi < n.args().size() && n.args()[gi].value.kind != ir::Attr::Kind::Graph) ++gi;
        if (gi == n.args().size()) fail("no subgraph argument");
        std::vector<RValue> ops;
        for (size_t k = gi + 1; k < n.args().size(); ++k) ops.push_back(resolve(*this, n.args()[k].value, env));
        outs = runGraph(*module_.graphs()[n.args()[gi].value.graph], ops);
      } else {
        Call c;
        c.interp = this;
        c.node = &n;
        c.target = n.target;
        c.schema = schemaFor(n.target);
        for (const auto& arg : n.args()) c.args.emplace_back(arg.name, resolve(*this, arg.value, env));
        c.outs.assign(n.numOutputs(), RValue{});
        for (size_t k = 0; k < n.numOutputs(); ++k) c.out_values.push_back(n.output(k));
        dispatch(c);
        outs = std::move(c.outs);
      }
      for (size_t k = 0; k < n.numOutputs(); ++k) {
        if (!n.output(k)) continue;
        if (k >= outs.size()) fail("output {} was not produced", k);
        checkOutput(n, k, outs[k]);
        if (options_.after_output) options_.after_output(n, k, outs[k]);
        env[n.output(k)] = outs[k];
      }
    } catch (const FxError& e) {
      std::string msg = e.what();
      if (msg.rfind("graph @", 0) == 0) throw;
      fail("graph @{}: {}: {}", g.name, nodeDesc(n), msg);
    }
    auto& bt = stats_.by_target[n.target];
    ++bt.first;
    bt.second += std::chrono::duration<double>(std::chrono::steady_clock::now() - node_t0).count();
    auto fr = frees.find(&n);
    if (fr != frees.end())
      for (const ir::Value* v : fr->second) env.erase(v);
  }
  std::vector<RValue> result;
  for (const auto& o : g.outputs()) {
    if (o.value) {
      auto it = env.find(o.value);
      if (it == env.end()) fail("graph @{}: output value '{}' was never computed", g.name, o.value->name);
      result.push_back(it->second);
    } else {
      result.push_back(resolve(*this, o.constant, env));
    }
  }
  return result;
}

}  // namespace fxfuse::interp
