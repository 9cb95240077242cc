#include "passes/toolkit/match.h"

#include <cmath>

#include <fmt/format.h>

#include "passes/toolkit/op_util.h"
#include "ir/fxg.h"
#include "ir/lifted_scalar.h"

namespace fxfuse::compiler::m {

// ------------------------------------------------------------------------- MatchState

void MatchState::fail(const std::string& msg) {
  if (depth > failure_depth_) {
    failure_depth_ = depth;
    failure_ = msg;
  }
}

void MatchState::rollback(size_t mark) {
  while (trail_.size() > mark) {
    *trail_.back().slot = trail_.back().old;
    trail_.pop_back();
  }
}

void MatchState::bindValue(ir::Value** slot, ir::Value* v) {
  trail_.push_back({reinterpret_cast<void**>(slot), *slot});
  *slot = v;
}
void MatchState::bindNode(ir::Node** slot, ir::Node* n) {
  trail_.push_back({reinterpret_cast<void**>(slot), *slot});
  *slot = n;
}
void MatchState::bindAttr(const ir::Attr** slot, const ir::Attr* a) {
  trail_.push_back({reinterpret_cast<void**>(const_cast<ir::Attr**>(slot)), const_cast<ir::Attr*>(*slot)});
  *slot = a;
}

namespace {

std::string describe(const ir::Value* v) {
  if (!v) return "nothing";
  if (v->isGraphInput()) return fmt::format("graph input '{}'", v->name);
  const ir::Node* p = v->producer();
  return fmt::format("{} (node {})", shortTarget(p->target), p->name);
}

std::string describeAttr(const ir::Attr& a) {
  if (a.isValue()) return describe(a.value);
  if (auto d = a.asDouble()) return fmt::format("the number {}", ir::formatFloat(*d));
  if (a.isNone()) return "None";
  return "a non-tensor argument";
}

// A lifted scalar input read as a number, possibly negated (`neg(convert(fp8_max))` is how a
// `-fp8_max` clamp bound arrives): its value, or the input when the value is unknown.
struct LiftedRead {
  const ir::Value* input = nullptr;  // null: not a lifted scalar
  std::optional<double> value;
};
LiftedRead readLifted(ir::Value* v) {
  double sign = 1.0;
  if (v && v->producer() && v->producer()->target == "aten.neg.default" && v->type.rank() == 0) {
    sign = -1.0;
    v = valueArg(*v->producer(), "self");
  }
  LiftedRead r;
  r.input = ir::liftedScalarSource(v);
  if (r.input && r.input->scalar_value) r.value = sign * *r.input->scalar_value;
  return r;
}

// A bound argument: a number, or a lifted scalar with a known value. `why` says what it
// is otherwise (naming the input and --const for an unknown lifted scalar).
std::optional<double> boundArg(const ir::Node& n, const char* name, std::string* why) {
  const ir::Attr* a = argOf(n, name);
  if (!a) return std::nullopt;
  if (auto d = a->asDouble()) return d;
  if (a->isValue()) {
    LiftedRead r = readLifted(a->value);
    if (r.value) return r.value;
    if (r.input) *why = ir::constFlagHint(*r.input);
  }
  return std::nullopt;
}

struct DepthGuard {
  explicit DepthGuard(MatchState& s) : st(s) { ++st.depth; }
  ~DepthGuard() { --st.depth; }
  MatchState& st;
};

}  // namespace

namespace detail {
bool Impl::matchAttr(const ir::Attr& a, MatchState& st) const {
  if (!a.isValue()) {
    st.fail(fmt::format("expected {}, got {}", str(), describeAttr(a)));
    return false;
  }
  return matchValue(a.value, st);
}
}  // namespace detail

namespace {

using detail::Impl;

struct AnyImpl : Impl {
  ir::Value** slot;
  explicit AnyImpl(ir::Value** s) : slot(s) {}
  bool matchValue(ir::Value* v, MatchState& st) const override {
    if (slot) st.bindValue(slot, v);
    return true;
  }
  std::string str() const override { return "any value"; }
};

struct SameImpl : Impl {
  ir::Value* const* bound;
  explicit SameImpl(ir::Value* const* b) : bound(b) {}
  bool matchValue(ir::Value* v, MatchState& st) const override {
    if (*bound == v) return true;
    st.fail(fmt::format("expected the same value as before ({}), got {}", describe(*bound), describe(v)));
    return false;
  }
  std::string str() const override { return "the value bound earlier"; }
};

struct ConstImpl : Impl {
  double c, tol;
  ConstImpl(double c_, double t) : c(c_), tol(t) {}
  bool check(std::optional<double> d, MatchState& st, const std::string& got) const {
    if (d && approxEqual(*d, c, tol)) return true;
    st.fail(fmt::format("expected the constant {}, got {}", ir::formatFloat(c), got));
    return false;
  }
  bool matchAttr(const ir::Attr& a, MatchState& st) const override {
    if (a.isValue()) return matchValue(a.value, st);
    return check(a.asDouble(), st, describeAttr(a));
  }
  bool matchValue(ir::Value* v, MatchState& st) const override {
    // A lifted scalar graph input (seen through casts): its recorded or --const value.
    LiftedRead lifted = readLifted(v);
    if (lifted.value) return check(lifted.value, st, describe(v) + " = " + ir::formatFloat(*lifted.value));
    if (lifted.input) {
      st.fail(fmt::format("expected the constant {}, got {}: {}", ir::formatFloat(c), describe(v),
                          ir::constFlagHint(*lifted.input)));
      return false;
    }
    // A scalar value with a known constant expression.
    if (v && v->sym) {
      if (v->sym->isInt()) return check(static_cast<double>(v->sym->intValue()), st, describe(v));
      if (v->sym->kind() == ir::SymExpr::Kind::Real) return check(v->sym->realValue(), st, describe(v));
    }
    // A constant tensor made by full/scalar_tensor.
    if (v && v->producer()) {
      const ir::Node& n = *v->producer();
      if (n.target == "aten.scalar_tensor.default") return check(numberArg(n, "s"), st, describe(v));
      if (n.target == "aten.full.default") return check(numberArg(n, "fill_value"), st, describe(v));
    }
    st.fail(fmt::format("expected the constant {}, got {}", ir::formatFloat(c), describe(v)));
    return false;
  }
  std::string str() const override { return "constant " + ir::formatFloat(c); }
};

struct ScalarImpl : Impl {
  const ir::Attr** slot;
  explicit ScalarImpl(const ir::Attr** s) : slot(s) {}
  bool matchAttr(const ir::Attr& a, MatchState& st) const override {
    if (a.isValue()) {
      if (!matchValue(a.value, st)) return false;
      st.bindAttr(slot, &a);
      return true;
    }
    if (!a.asDouble()) {
      st.fail(fmt::format("expected a number, got {}", describeAttr(a)));
      return false;
    }
    st.bindAttr(slot, &a);
    return true;
  }
  bool matchValue(ir::Value* v, MatchState& st) const override {
    if (v->kind == ir::ValueKind::SymFloat || v->kind == ir::ValueKind::SymInt) return true;
    if (v->isTensor()) {
      auto n = constNumel(v);
      if (n && *n == 1) return true;
    }
    st.fail(fmt::format("expected a scalar, got {}", describe(v)));
    return false;
  }
  std::string str() const override { return "a scalar"; }
};

struct OpImpl : Impl {
  std::vector<std::string> targets;
  ArgPatterns args;
  bool commutative = false;

  bool targetOk(const std::string& t) const {
    for (const auto& x : targets)
      if (x == t) return true;
    return false;
  }
  bool matchArgs(const ir::Node& n, const ArgPatterns& as, MatchState& st) const {
    for (const auto& [name, pat] : as) {
      const ir::Attr* a = argOf(n, name);
      if (!a) {
        st.fail(fmt::format("{} (node {}): missing argument '{}'", shortTarget(n.target), n.name, name));
        return false;
      }
      if (!pat.matchAttr(*a, st)) return false;
    }
    return true;
  }
  bool matchValue(ir::Value* v, MatchState& st) const override {
    const ir::Node* n = v ? v->producer() : nullptr;
    if (!n || !targetOk(n->target)) {
      st.fail(fmt::format("expected {}, got {}", str(), describe(v)));
      return false;
    }
    DepthGuard g(st);
    size_t mk = st.mark();
    if (matchArgs(*n, args, st)) return true;
    st.rollback(mk);
    if (commutative && args.size() >= 2) {
      ArgPatterns swapped = args;
      std::swap(swapped[0].second, swapped[1].second);
      if (matchArgs(*n, swapped, st)) return true;
      st.rollback(mk);
    }
    return false;
  }
  std::string str() const override {
    std::string s;
    for (size_t i = 0; i < targets.size(); ++i) s += (i ? "|" : "") + shortTarget(targets[i]);
    return s;
  }
};

struct CastImpl : Impl {
  Pattern input;
  std::optional<ir::DType> to;
  ir::DType* to_out;
  CastImpl(Pattern p, std::optional<ir::DType> t, ir::DType* o) : input(std::move(p)), to(t), to_out(o) {}
  bool matchValue(ir::Value* v, MatchState& st) const override {
    const ir::Node* n = v ? v->producer() : nullptr;
    ir::DType d = ir::DType::DTYPE_UNSPECIFIED;
    ir::Value* in = n ? castInput(*n, &d) : nullptr;
    if (!in) {
      st.fail(fmt::format("expected {}, got {}", str(), describe(v)));
      return false;
    }
    if (to && d != *to) {
      st.fail(fmt::format("expected a cast to {}, got a cast to {} (node {})", ir::dtypeName(*to), ir::dtypeName(d),
                          n->name));
      return false;
    }
    DepthGuard g(st);
    if (!input.match(in, st)) return false;
    if (to_out) *to_out = d;
    return true;
  }
  std::string str() const override {
    return to ? fmt::format("a cast to {}", ir::dtypeName(*to)) : std::string("a dtype cast");
  }
};

struct ClampImpl : Impl {
  Pattern input;
  double lo, hi;
  ClampImpl(Pattern p, double l, double h) : input(std::move(p)), lo(l), hi(h) {}
  // The bound `name` of `n` equals `want`; else fails with what it is.
  bool bound(const ir::Node& n, const char* name, double want, MatchState& st) const {
    std::string why;
    auto d = boundArg(n, name, &why);
    if (d && approxEqual(*d, want, 1e-6)) return true;
    st.fail(fmt::format("{} (node {}) bound '{}' is not {}{}", shortTarget(n.target), n.name, name,
                        ir::formatFloat(want), why.empty() ? "" : ": " + why));
    return false;
  }
  static bool is(const ir::Node& n, const char* op) {
    std::string base = std::string("aten.") + op;
    return n.target == base + ".default" || n.target == base + ".Tensor";
  }
  bool matchValue(ir::Value* v, MatchState& st) const override {
    const ir::Node* n = v ? v->producer() : nullptr;
    if (!n) {
      st.fail(fmt::format("expected {}, got {}", str(), describe(v)));
      return false;
    }
    DepthGuard g(st);
    if (is(*n, "clamp")) {
      if (!bound(*n, "min", lo, st) || !bound(*n, "max", hi, st)) return false;
      return input.match(valueArg(*n, "self"), st);
    }
    auto inner = [&](const char* inner_op, const char* inner_arg, double inner_bound) -> bool {
      ir::Value* x = valueArg(*n, "self");
      const ir::Node* p = x ? x->producer() : nullptr;
      if (!p || !is(*p, inner_op)) {
        st.fail(fmt::format("expected {} before {} (node {})", inner_op, shortTarget(n->target), n->name));
        return false;
      }
      if (!bound(*p, inner_arg, inner_bound, st)) return false;
      return input.match(valueArg(*p, "self"), st);
    };
    if (is(*n, "clamp_max")) {
      if (!bound(*n, "max", hi, st)) return false;
      return inner("clamp_min", "min", lo);
    }
    if (is(*n, "clamp_min")) {
      if (!bound(*n, "min", lo, st)) return false;
      return inner("clamp_max", "max", hi);
    }
    st.fail(fmt::format("expected {}, got {}", str(), describe(v)));
    return false;
  }
  std::string str() const override { return fmt::format("clamp({}, {})", ir::formatFloat(lo), ir::formatFloat(hi)); }
};

struct OneOfImpl : Impl {
  std::vector<Pattern> alts;
  bool matchAttr(const ir::Attr& a, MatchState& st) const override {
    for (const auto& p : alts) {
      size_t mk = st.mark();
      if (p.matchAttr(a, st)) return true;
      st.rollback(mk);
    }
    return false;
  }
  bool matchValue(ir::Value* v, MatchState& st) const override {
    for (const auto& p : alts) {
      size_t mk = st.mark();
      if (p.match(v, st)) return true;
      st.rollback(mk);
    }
    return false;
  }
  std::string str() const override {
    std::string s = "one of {";
    for (size_t i = 0; i < alts.size(); ++i) s += (i ? ", " : "") + alts[i].str();
    return s + "}";
  }
};

// A pattern with an extra check after the structural match.
struct CheckedImpl : Impl {
  std::shared_ptr<Impl> inner;
  std::function<bool(ir::Value*, MatchState&)> check;
  bool before = false;  // check before the structural match
  bool matchAttr(const ir::Attr& a, MatchState& st) const override {
    if (!a.isValue()) return inner->matchAttr(a, st);
    return matchValue(a.value, st);
  }
  bool matchValue(ir::Value* v, MatchState& st) const override {
    if (before && !check(v, st)) return false;
    if (!inner->matchValue(v, st)) return false;
    if (!before && !check(v, st)) return false;
    return true;
  }
  std::string str() const override { return inner->str(); }
};

Pattern checked(const Pattern& p, std::function<bool(ir::Value*, MatchState&)> check, bool before = false) {
  auto c = std::make_shared<CheckedImpl>();
  c->inner = p.impl();
  c->check = std::move(check);
  c->before = before;
  return Pattern(c);
}

}  // namespace

// ------------------------------------------------------------------------- Pattern

bool Pattern::match(ir::Value* v, MatchState& st) const {
  if (!v) {
    st.fail("expected " + impl_->str() + ", got nothing");
    return false;
  }
  return impl_->matchValue(v, st);
}
bool Pattern::matchAttr(const ir::Attr& a, MatchState& st) const { return impl_->matchAttr(a, st); }
std::string Pattern::str() const { return impl_->str(); }

Pattern Pattern::dtype(ir::DType d) const {
  return checked(*this, [d](ir::Value* v, MatchState& st) {
    if (v->type.dtype == d) return true;
    st.fail(fmt::format("{} has dtype {}, expected {}", describe(v), ir::dtypeName(v->type.dtype), ir::dtypeName(d)));
    return false;
  });
}

Pattern Pattern::oneUse() const {
  return checked(*this, [](ir::Value* v, MatchState& st) {
    if (v->numUses() == 1) return true;
    st.fail(fmt::format("{} has {} uses, expected 1", describe(v), v->numUses()));
    return false;
  }, /*before=*/true);
}

Pattern Pattern::output(int index) const {
  return checked(*this, [index](ir::Value* v, MatchState& st) {
    if (v->resultIndex() == index) return true;
    st.fail(fmt::format("{} is output {} of its node, expected output {}", describe(v), v->resultIndex(), index));
    return false;
  }, /*before=*/true);
}

Pattern Pattern::where(Pred pred, std::string desc) const {
  return checked(*this, [pred = std::move(pred), desc = std::move(desc)](ir::Value* v, MatchState& st) {
    std::string why;
    if (pred(v, &why)) return true;
    st.fail(fmt::format("{}: {}{}", describe(v), desc, why.empty() ? "" : " (" + why + ")"));
    return false;
  });
}

Pattern Pattern::bind(ir::Value** slot) const {
  return checked(*this, [slot](ir::Value* v, MatchState& st) {
    st.bindValue(slot, v);
    return true;
  });
}

Pattern Pattern::node(ir::Node** slot) const {
  return checked(*this, [slot](ir::Value* v, MatchState& st) {
    st.bindNode(slot, v->producer());
    return true;
  });
}

Pattern Pattern::commutative() const {
  auto op = std::dynamic_pointer_cast<OpImpl>(impl_);
  if (!op) throw std::logic_error("commutative() applies to Op patterns only");
  auto copy = std::make_shared<OpImpl>(*op);
  copy->commutative = true;
  return Pattern(copy);
}

Pattern Any(ir::Value** slot) { return Pattern(std::make_shared<AnyImpl>(slot)); }
Pattern Same(ir::Value* const* bound) { return Pattern(std::make_shared<SameImpl>(bound)); }
Pattern Const(double c, double tol) { return Pattern(std::make_shared<ConstImpl>(c, tol)); }
Pattern Scalar(const ir::Attr** slot) { return Pattern(std::make_shared<ScalarImpl>(slot)); }

Pattern Op(std::string target, ArgPatterns args) { return Ops(std::vector<std::string>{std::move(target)}, std::move(args)); }

Pattern Ops(std::vector<std::string> targets, ArgPatterns args) {
  auto op = std::make_shared<OpImpl>();
  op->targets = std::move(targets);
  op->args = std::move(args);
  return Pattern(op);
}

Pattern Cast(Pattern input, std::optional<ir::DType> to, ir::DType* to_out) {
  return Pattern(std::make_shared<CastImpl>(std::move(input), to, to_out));
}

Pattern Clamp(Pattern input, double lo, double hi) { return Pattern(std::make_shared<ClampImpl>(std::move(input), lo, hi)); }

Pattern OneOf(std::vector<Pattern> alternatives) {
  auto o = std::make_shared<OneOfImpl>();
  o->alts = std::move(alternatives);
  return Pattern(o);
}

Pattern OptionalCast(Pattern p) { return OneOf({p, Cast(p)}); }

}  // namespace fxfuse::compiler::m
