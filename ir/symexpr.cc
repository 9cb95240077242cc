#include "ir/symexpr.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>

#include "ir/checked_math.h"
#include "ir/decimal.h"
#include "ir/status.h"

namespace fxfuse::ir {

struct SymExpr::Rep {
  Kind kind = Kind::Int;
  int64_t i = 0;
  double r = 0;
  std::string name;
  std::vector<SymExpr> args;
  size_t hash = 0;
};

namespace {

using Kind = SymExpr::Kind;

size_t mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)); }

// Checked arithmetic for constant folding: overflow is an error, never UB.
constexpr std::string_view kFoldContext = "symbolic expression";
int64_t foldAdd(int64_t a, int64_t b) { return addOrFail(a, b, kFoldContext); }
int64_t foldMul(int64_t a, int64_t b) { return mulOrFail(a, b, kFoldContext); }

// Function kinds with a fixed number of arguments (0: any number).
size_t fixedArity(Kind k) {
  switch (k) {
    case Kind::FloorDiv: case Kind::Mod: case Kind::Pow: case Kind::CeilDiv: case Kind::TrueDiv:
    case Kind::Eq: case Kind::Ne: case Kind::Lt: case Kind::Le: case Kind::Gt: case Kind::Ge:
      return 2;
    case Kind::Not: return 1;
    case Kind::Ite: return 3;
    default: return 0;
  }
}

bool isDivision(Kind k) { return k == Kind::FloorDiv || k == Kind::Mod || k == Kind::CeilDiv || k == Kind::TrueDiv; }

int64_t floorDivInt(int64_t a, int64_t b) {
  if (b == -1) return foldMul(a, -1);  // INT64_MIN / -1 overflows
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t pyMod(int64_t a, int64_t b) {
  if (b == -1) return 0;  // INT64_MIN % -1 traps
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

const char* fnName(Kind k) {
  switch (k) {
    case Kind::FloorDiv: return "FloorDiv";
    case Kind::Mod: return "Mod";
    case Kind::Pow: return "Pow";
    case Kind::Min: return "Min";
    case Kind::Max: return "Max";
    case Kind::CeilDiv: return "CeilDiv";
    case Kind::TrueDiv: return "TrueDiv";
    case Kind::Eq: return "Eq";
    case Kind::Ne: return "Ne";
    case Kind::Lt: return "Lt";
    case Kind::Le: return "Le";
    case Kind::Gt: return "Gt";
    case Kind::Ge: return "Ge";
    case Kind::And: return "And";
    case Kind::Or: return "Or";
    case Kind::Not: return "Not";
    case Kind::Ite: return "ITE";
    default: return "?";
  }
}

}  // namespace

SymExpr::SymExpr() : SymExpr(integer(0)) {}

SymExpr SymExpr::integer(int64_t v) {
  // Sizes and strides are mostly small constants: share their nodes.
  constexpr int64_t kLo = -64, kHi = 8192;
  if (v >= kLo && v <= kHi) {
    static const std::vector<SymExpr>* cache = [] {
      auto* c = new std::vector<SymExpr>();
      c->reserve(static_cast<size_t>(kHi - kLo + 1));
      for (int64_t i = kLo; i <= kHi; ++i) {
        auto rep = std::make_shared<Rep>();
        rep->kind = Kind::Int;
        rep->i = i;
        rep->hash = mix(1, std::hash<int64_t>()(i));
        c->push_back(SymExpr(rep));
      }
      return c;
    }();
    return (*cache)[static_cast<size_t>(v - kLo)];
  }
  auto rep = std::make_shared<Rep>();
  rep->kind = Kind::Int;
  rep->i = v;
  rep->hash = mix(1, std::hash<int64_t>()(v));
  return SymExpr(rep);
}

SymExpr SymExpr::real(double v) {
  auto rep = std::make_shared<Rep>();
  rep->kind = Kind::Real;
  rep->r = v;
  rep->hash = mix(2, std::hash<double>()(v));
  return SymExpr(rep);
}

SymExpr SymExpr::boolean(bool v) {
  auto rep = std::make_shared<Rep>();
  rep->kind = Kind::Bool;
  rep->i = v ? 1 : 0;
  rep->hash = mix(3, v);
  return SymExpr(rep);
}

SymExpr SymExpr::symbol(std::string name) {
  auto rep = std::make_shared<Rep>();
  rep->kind = Kind::Sym;
  rep->hash = mix(4, std::hash<std::string>()(name));
  rep->name = std::move(name);
  return SymExpr(rep);
}

namespace {

SymExpr raw(Kind k, std::vector<SymExpr> args, std::string name = {}) {
  return SymExpr::apply(k, std::move(args), std::move(name));
}

// Splits a canonical term into (coefficient, monomial). The monomial of a constant is
// empty (nullopt).
std::pair<int64_t, std::optional<SymExpr>> splitTerm(const SymExpr& t) {
  if (t.isInt()) return {t.intValue(), std::nullopt};
  if (t.kind() == Kind::Mul && t.args().front().isInt()) {
    std::vector<SymExpr> rest(t.args().begin() + 1, t.args().end());
    if (rest.size() == 1) return {t.args().front().intValue(), rest.front()};
    return {t.args().front().intValue(), SymExpr::apply(Kind::Mul, rest)};
  }
  return {1, t};
}

bool allInts(const std::vector<SymExpr>& args) {
  return std::all_of(args.begin(), args.end(), [](const SymExpr& a) { return a.isInt(); });
}

}  // namespace

SymExpr SymExpr::apply(Kind kind, std::vector<SymExpr> args, std::string opaque_name) {
  auto make = [&](Kind k, std::vector<SymExpr> a, std::string nm = {}) {
    auto rep = std::make_shared<Rep>();
    rep->kind = k;
    rep->name = std::move(nm);
    size_t h = mix(5, static_cast<size_t>(k));
    h = mix(h, std::hash<std::string>()(rep->name));
    for (const auto& x : a) h = mix(h, x.hash());
    rep->hash = h;
    rep->args = std::move(a);
    return SymExpr(rep);
  };
  // Every node built here is well formed, so evaluate()/range() may index args freely.
  if (size_t n = fixedArity(kind); n != 0 && args.size() != n)
    fail("{} takes {} argument{}, got {}", fnName(kind), n, n == 1 ? "" : "s", args.size());
  if ((kind == Kind::Min || kind == Kind::Max) && args.empty()) fail("{}() needs at least one argument", fnName(kind));
  if (isDivision(kind) && args[1].isInt() && args[1].intValue() == 0)
    fail("division by zero in symbolic expression {}({}, 0)", fnName(kind), args[0].str());

  switch (kind) {
    case Kind::Add: {
      // Flatten, fold constants, combine like terms.
      int64_t constant = 0;
      std::map<SymExpr, int64_t> terms;
      std::vector<SymExpr> order;
      std::function<void(const SymExpr&)> add = [&](const SymExpr& e) {
        if (e.kind() == Kind::Add) {
          for (const auto& a : e.args()) add(a);
          return;
        }
        auto [c, mono] = splitTerm(e);
        if (!mono) {
          constant = foldAdd(constant, c);
          return;
        }
        int64_t& t = terms[*mono];
        t = foldAdd(t, c);
      };
      for (const auto& a : args) add(a);
      std::vector<SymExpr> out;
      for (const auto& [mono, c] : terms) {
        if (c == 0) continue;
        out.push_back(c == 1 ? mono : raw(Kind::Mul, {integer(c), mono}));
      }
      if (constant != 0 || out.empty()) out.insert(out.begin(), integer(constant));
      if (out.size() == 1) return out.front();
      std::sort(out.begin(), out.end());
      return make(Kind::Add, std::move(out));
    }
    case Kind::Mul: {
      int64_t coef = 1;
      std::vector<SymExpr> factors;
      std::vector<SymExpr> sums;
      std::function<void(const SymExpr&)> mul = [&](const SymExpr& e) {
        if (e.kind() == Kind::Mul) {
          for (const auto& a : e.args()) mul(a);
        } else if (e.isInt()) {
          coef = foldMul(coef, e.intValue());
        } else {
          factors.push_back(e);
        }
      };
      for (const auto& a : args) mul(a);
      if (coef == 0) return integer(0);
      if (factors.empty()) return integer(coef);
      // Distribute a constant over a single sum: 2*(s0 + 1) -> 2*s0 + 2, so linear
      // expressions have one canonical spelling.
      if (factors.size() == 1 && factors.front().kind() == Kind::Add && coef != 1) {
        std::vector<SymExpr> terms;
        for (const auto& t : factors.front().args()) terms.push_back(raw(Kind::Mul, {integer(coef), t}));
        return raw(Kind::Add, std::move(terms));
      }
      std::sort(factors.begin(), factors.end());
      if (coef == 1 && factors.size() == 1) return factors.front();
      if (coef != 1) factors.insert(factors.begin(), integer(coef));
      return make(Kind::Mul, std::move(factors));
    }
    case Kind::FloorDiv: {
      if (args.size() != 2) fail("FloorDiv takes 2 arguments, got {}", args.size());
      const auto& a = args[0];
      const auto& b = args[1];
      if (a.isInt() && b.isInt()) return integer(floorDivInt(a.intValue(), b.intValue()));
      if (b.isInt() && b.intValue() == 1) return a;
      if (b.isInt()) {
        // (c*x + d*y + k) // n with every coefficient divisible by n.
        int64_t n = b.intValue();
        std::vector<SymExpr> terms = a.kind() == Kind::Add ? a.args() : std::vector<SymExpr>{a};
        bool divisible = true;
        std::vector<SymExpr> divided;
        for (const auto& t : terms) {
          auto [c, mono] = splitTerm(t);
          if (n == -1 || c % n != 0) {
            divisible = false;
            break;
          }
          divided.push_back(mono ? raw(Kind::Mul, {integer(c / n), *mono}) : integer(c / n));
        }
        if (divisible) return raw(Kind::Add, std::move(divided));
      }
      if (a == b) return integer(1);
      return make(kind, std::move(args));
    }
    case Kind::CeilDiv: {
      if (args.size() != 2) fail("CeilDiv takes 2 arguments, got {}", args.size());
      if (allInts(args) && args[1].intValue() != 0)
        return integer(foldMul(floorDivInt(foldMul(args[0].intValue(), -1), args[1].intValue()), -1));
      return make(kind, std::move(args));
    }
    case Kind::Mod: {
      if (args.size() != 2) fail("Mod takes 2 arguments, got {}", args.size());
      if (allInts(args) && args[1].intValue() != 0) return integer(pyMod(args[0].intValue(), args[1].intValue()));
      if (args[1].isInt() && args[1].intValue() == 1) return integer(0);
      if (args[1].isInt() && args[1].intValue() != 0 && args[1].intValue() != -1) {
        auto [c, mono] = splitTerm(args[0]);
        if (mono && c % args[1].intValue() == 0) return integer(0);
      }
      return make(kind, std::move(args));
    }
    case Kind::Pow: {
      if (args.size() != 2) fail("Pow takes 2 arguments, got {}", args.size());
      if (args[1].isInt()) {
        int64_t e = args[1].intValue();
        if (e == 0) return integer(1);
        if (e == 1) return args[0];
        if (args[0].isInt() && e > 0 && e < 63) {
          int64_t r = 1;
          for (int64_t k = 0; k < e; ++k) r = foldMul(r, args[0].intValue());
          return integer(r);
        }
        if (e > 1 && e <= 8) {
          std::vector<SymExpr> f(static_cast<size_t>(e), args[0]);
          return raw(Kind::Mul, std::move(f));
        }
      }
      return make(kind, std::move(args));
    }
    case Kind::Min:
    case Kind::Max: {
      std::vector<SymExpr> flat;
      std::function<void(const SymExpr&)> add = [&](const SymExpr& e) {
        if (e.kind() == kind) {
          for (const auto& a : e.args()) add(a);
        } else {
          flat.push_back(e);
        }
      };
      for (const auto& a : args) add(a);
      std::optional<int64_t> c;
      std::vector<SymExpr> rest;
      for (const auto& e : flat) {
        if (e.isInt()) {
          c = !c ? e.intValue() : (kind == Kind::Min ? std::min(*c, e.intValue()) : std::max(*c, e.intValue()));
        } else if (std::find(rest.begin(), rest.end(), e) == rest.end()) {
          rest.push_back(e);
        }
      }
      if (c) rest.push_back(integer(*c));
      if (rest.size() == 1) return rest.front();
      std::sort(rest.begin(), rest.end());
      return make(kind, std::move(rest));
    }
    case Kind::Eq: case Kind::Ne: case Kind::Lt: case Kind::Le: case Kind::Gt: case Kind::Ge: {
      if (args.size() != 2) fail("{} takes 2 arguments, got {}", fnName(kind), args.size());
      if (allInts(args)) {
        int64_t a = args[0].intValue(), b = args[1].intValue();
        bool v = kind == Kind::Eq ? a == b : kind == Kind::Ne ? a != b : kind == Kind::Lt ? a < b
               : kind == Kind::Le ? a <= b : kind == Kind::Gt ? a > b : a >= b;
        return boolean(v);
      }
      if ((kind == Kind::Eq || kind == Kind::Ne) && args[0] == args[1]) return boolean(kind == Kind::Eq);
      return make(kind, std::move(args));
    }
    case Kind::Not:
      if (args.size() == 1 && args[0].kind() == Kind::Bool) return boolean(!args[0].boolValue());
      return make(kind, std::move(args));
    case Kind::And:
    case Kind::Or: {
      std::vector<SymExpr> rest;
      for (const auto& a : args) {
        if (a.kind() == Kind::Bool) {
          if (kind == Kind::And && !a.boolValue()) return boolean(false);
          if (kind == Kind::Or && a.boolValue()) return boolean(true);
          continue;
        }
        rest.push_back(a);
      }
      if (rest.empty()) return boolean(kind == Kind::And);
      if (rest.size() == 1) return rest.front();
      return make(kind, std::move(rest));
    }
    case Kind::Ite:
      if (args.size() == 3 && args[0].kind() == Kind::Bool) return args[0].boolValue() ? args[1] : args[2];
      return make(kind, std::move(args));
    case Kind::TrueDiv:
      return make(kind, std::move(args));
    case Kind::Opaque:
      return make(kind, std::move(args), std::move(opaque_name));
    default:
      fail("SymExpr::apply: not a function kind");
  }
}

SymExpr::Kind SymExpr::kind() const { return rep_->kind; }
int64_t SymExpr::intValue() const { return rep_->i; }
double SymExpr::realValue() const { return rep_->r; }
bool SymExpr::boolValue() const { return rep_->i != 0; }
const std::string& SymExpr::name() const { return rep_->name; }
const std::vector<SymExpr>& SymExpr::args() const { return rep_->args; }
size_t SymExpr::hash() const { return rep_->hash; }

bool SymExpr::operator==(const SymExpr& o) const {
  if (rep_ == o.rep_) return true;
  if (rep_->hash != o.rep_->hash || rep_->kind != o.rep_->kind) return false;
  switch (rep_->kind) {
    case Kind::Int:
    case Kind::Bool:
      return rep_->i == o.rep_->i;
    case Kind::Real:
      return rep_->r == o.rep_->r;
    case Kind::Sym:
      return rep_->name == o.rep_->name;
    default:
      return rep_->name == o.rep_->name && rep_->args == o.rep_->args;
  }
}

bool SymExpr::operator<(const SymExpr& o) const {
  // Constants first, then symbols by name, then compound expressions by their text.
  auto rank = [](Kind k) { return k == Kind::Int ? 0 : k == Kind::Real ? 1 : k == Kind::Bool ? 2 : k == Kind::Sym ? 3 : 4; };
  int ra = rank(kind()), rb = rank(o.kind());
  if (ra != rb) return ra < rb;
  switch (kind()) {
    case Kind::Int:
    case Kind::Bool:
      return intValue() < o.intValue();
    case Kind::Real:
      return realValue() < o.realValue();
    case Kind::Sym:
      return name() < o.name();
    default:
      return str() < o.str();
  }
}

namespace {

std::string fmtReal(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

// Precedence: 0 = sum, 1 = product, 2 = atom.
std::string strPrec(const SymExpr& e, int* prec) {
  switch (e.kind()) {
    case Kind::Int:
      *prec = e.intValue() < 0 ? 0 : 2;
      return std::to_string(e.intValue());
    case Kind::Real:
      *prec = 2;
      return fmtReal(e.realValue());
    case Kind::Bool:
      *prec = 2;
      return e.boolValue() ? "True" : "False";
    case Kind::Sym:
      *prec = 2;
      return e.name();
    case Kind::Add: {
      std::string out;
      // Non-constant terms first, constant last (as sympy prints).
      std::vector<SymExpr> terms = e.args();
      if (terms.front().isInt()) std::rotate(terms.begin(), terms.begin() + 1, terms.end());
      bool first = true;
      for (const auto& t : terms) {
        auto [c, mono] = splitTerm(t);
        bool negative = c < 0;
        SymExpr shown = negative ? (mono ? (c == -1 ? *mono : SymExpr::apply(Kind::Mul, {SymExpr::integer(-c), *mono}))
                                         : SymExpr::integer(-c))
                                 : t;
        int p;
        std::string s = strPrec(shown, &p);
        if (p < 1) s = "(" + s + ")";
        if (first) {
          out += negative ? "-" + s : s;
        } else {
          out += negative ? " - " + s : " + " + s;
        }
        first = false;
      }
      *prec = 0;
      return out;
    }
    case Kind::Mul: {
      std::string out;
      bool first = true;
      for (const auto& f : e.args()) {
        if (first && f.isInt() && f.intValue() == -1) {
          out += "-";
          continue;
        }
        int p;
        std::string s = strPrec(f, &p);
        if (p < 2) s = "(" + s + ")";
        if (!first && !out.empty() && out.back() != '-') out += "*";
        out += s;
        first = false;
      }
      *prec = 1;
      return out;
    }
    case Kind::FloorDiv: {
      int pa, pb;
      std::string a = strPrec(e.args()[0], &pa), b = strPrec(e.args()[1], &pb);
      if (pa < 2) a = "(" + a + ")";
      if (pb < 2) b = "(" + b + ")";
      *prec = 1;
      return a + "//" + b;
    }
    case Kind::Opaque: {
      // sympy's infinities are names, not calls: printed as the parser reads them.
      if (e.args().empty() && (e.name() == "oo" || e.name() == "int_oo")) {
        *prec = 2;
        return e.name();
      }
      std::string out = e.name() + "(";
      for (size_t i = 0; i < e.args().size(); ++i) out += (i ? ", " : "") + e.args()[i].str();
      *prec = 2;
      return out + ")";
    }
    default: {
      std::string out = std::string(fnName(e.kind())) + "(";
      for (size_t i = 0; i < e.args().size(); ++i) out += (i ? ", " : "") + e.args()[i].str();
      *prec = 2;
      return out + ")";
    }
  }
}

}  // namespace

std::string SymExpr::str() const {
  int p;
  return strPrec(*this, &p);
}

std::optional<int64_t> SymExpr::evaluate(const std::map<std::string, int64_t>& env) const {
  switch (kind()) {
    case Kind::Int:
    case Kind::Bool:
      return intValue();
    case Kind::Real:
      return std::nullopt;
    case Kind::Sym: {
      auto it = env.find(name());
      if (it == env.end()) return std::nullopt;
      return it->second;
    }
    default:
      break;
  }
  std::vector<int64_t> v;
  for (const auto& a : args()) {
    auto x = a.evaluate(env);
    if (!x) return std::nullopt;
    v.push_back(*x);
  }
  switch (kind()) {
    // Overflow (and INT64_MIN / -1) evaluates to "unknown".
    case Kind::Add: { int64_t s = 0; for (auto x : v) if (__builtin_add_overflow(s, x, &s)) return std::nullopt; return s; }
    case Kind::Mul: { int64_t s = 1; for (auto x : v) if (__builtin_mul_overflow(s, x, &s)) return std::nullopt; return s; }
    case Kind::FloorDiv:
      if (v[1] == 0 || (v[1] == -1 && v[0] == std::numeric_limits<int64_t>::min())) return std::nullopt;
      return floorDivInt(v[0], v[1]);
    case Kind::CeilDiv:
      if (v[1] == 0 || v[0] == std::numeric_limits<int64_t>::min() || (v[1] == -1 && -v[0] == std::numeric_limits<int64_t>::min())) return std::nullopt;
      { int64_t q = floorDivInt(-v[0], v[1]); if (q == std::numeric_limits<int64_t>::min()) return std::nullopt; return -q; }
    case Kind::Mod: if (v[1] == 0) return std::nullopt; return pyMod(v[0], v[1]);
    case Kind::Pow: {
      if (v[1] < 0) return std::nullopt;
      if (v[0] == 0 || v[0] == 1) return v[1] == 0 ? 1 : v[0];
      if (v[0] == -1) return v[1] % 2 ? -1 : 1;
      int64_t r = 1;  // |base| >= 2: overflows within 63 steps
      for (int64_t k = 0; k < v[1]; ++k)
        if (__builtin_mul_overflow(r, v[0], &r)) return std::nullopt;
      return r;
    }
    case Kind::Min: return *std::min_element(v.begin(), v.end());
    case Kind::Max: return *std::max_element(v.begin(), v.end());
    case Kind::TrueDiv:
      if (v[1] == 0 || (v[1] == -1 && v[0] == std::numeric_limits<int64_t>::min())) return std::nullopt;
      if (v[1] == -1) return -v[0];
      if (v[0] % v[1] != 0) return std::nullopt;
      return v[0] / v[1];
    case Kind::Eq: return v[0] == v[1];
    case Kind::Ne: return v[0] != v[1];
    case Kind::Lt: return v[0] < v[1];
    case Kind::Le: return v[0] <= v[1];
    case Kind::Gt: return v[0] > v[1];
    case Kind::Ge: return v[0] >= v[1];
    case Kind::And: { for (auto x : v) if (!x) return 0; return 1; }
    case Kind::Or: { for (auto x : v) if (x) return 1; return 0; }
    case Kind::Not: return !v[0];
    case Kind::Ite: return v[0] ? v[1] : v[2];
    default: return std::nullopt;
  }
}

SymExpr SymExpr::substitute(const std::map<std::string, SymExpr>& env) const {
  switch (kind()) {
    case Kind::Int: case Kind::Bool: case Kind::Real:
      return *this;
    case Kind::Sym: {
      auto it = env.find(name());
      return it == env.end() ? *this : it->second;
    }
    default: {
      std::vector<SymExpr> a;
      for (const auto& x : args()) a.push_back(x.substitute(env));
      return apply(kind(), std::move(a), name());
    }
  }
}

void SymExpr::collectSymbols(std::set<std::string>& out) const {
  if (kind() == Kind::Sym) out.insert(name());
  for (const auto& a : args()) a.collectSymbols(out);
}

SymExpr operator+(const SymExpr& a, const SymExpr& b) { return SymExpr::apply(SymExpr::Kind::Add, {a, b}); }
SymExpr operator*(const SymExpr& a, const SymExpr& b) { return SymExpr::apply(SymExpr::Kind::Mul, {a, b}); }
SymExpr operator-(const SymExpr& a) { return SymExpr::apply(SymExpr::Kind::Mul, {SymExpr::integer(-1), a}); }
SymExpr operator-(const SymExpr& a, const SymExpr& b) { return a + (-b); }
SymExpr floorDiv(const SymExpr& a, const SymExpr& b) { return SymExpr::apply(SymExpr::Kind::FloorDiv, {a, b}); }

// ---------------------------------------------------------------------------------------
// Parser: one recursive-descent grammar covering sympy's str() and srepr() spellings.
//   expr   := or
//   cmp    := sum (("=="|"!="|"<"|"<="|">"|">=") sum)?
//   sum    := prod (("+"|"-") prod)*
//   prod   := unary (("*"|"//"|"/"|"%") unary)*
//   unary  := "-" unary | power
//   power  := atom ("**" unary)?
//   atom   := INT | FLOAT | NAME | NAME "(" args ")" | "(" expr ")"
namespace {

class ExprParser {
 public:
  ExprParser(std::string_view s, std::string_view ctx) : s_(s), ctx_(ctx) {}

  SymExpr parseAll() {
    try {
      SymExpr e = parseOr();
      skipWs();
      if (pos_ != s_.size()) error("unexpected '" + std::string(s_.substr(pos_, 12)) + "'");
      return e;
    } catch (const SyntaxError&) {
      throw;
    } catch (const FxError& e) {  // a well-formed call that is not a valid expression (Max(), s0//0)
      error(e.what());
    }
  }

 private:
  struct SyntaxError : FxError {
    using FxError::FxError;
  };
  [[noreturn]] void error(const std::string& what) {
    throw SyntaxError(fmt::format("{}malformed symbolic expression '{}': {} at offset {}", ctx_.empty() ? "" : std::string(ctx_) + ": ",
         std::string(s_.substr(0, 200)), what, pos_));
  }

  void skipWs() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(std::string_view tok) {
    skipWs();
    if (s_.substr(pos_, tok.size()) == tok) {
      pos_ += tok.size();
      return true;
    }
    return false;
  }
  bool peek(std::string_view tok) {
    skipWs();
    return s_.substr(pos_, tok.size()) == tok;
  }

  SymExpr parseOr() {
    SymExpr e = parseAnd();
    while (peek("|")) {
      eat("|");
      e = SymExpr::apply(Kind::Or, {e, parseAnd()});
    }
    return e;
  }
  SymExpr parseAnd() {
    SymExpr e = parseCmp();
    while (peek("&")) {
      eat("&");
      e = SymExpr::apply(Kind::And, {e, parseCmp()});
    }
    return e;
  }
  SymExpr parseCmp() {
    SymExpr a = parseSum();
    static const std::pair<std::string_view, Kind> ops[] = {
        {"==", Kind::Eq}, {"!=", Kind::Ne}, {"<=", Kind::Le}, {">=", Kind::Ge}, {"<", Kind::Lt}, {">", Kind::Gt}};
    for (const auto& [tok, k] : ops) {
      if (eat(tok)) return SymExpr::apply(k, {a, parseSum()});
    }
    return a;
  }
  SymExpr parseSum() {
    SymExpr e = parseProd();
    while (true) {
      if (eat("+")) {
        e = e + parseProd();
      } else if (peek("-")) {
        eat("-");
        e = e - parseProd();
      } else {
        return e;
      }
    }
  }
  SymExpr parseProd() {
    SymExpr e = parseUnary();
    while (true) {
      if (peek("**")) return e;
      if (eat("//")) {
        e = floorDiv(e, parseUnary());
      } else if (eat("*")) {
        e = e * parseUnary();
      } else if (eat("/")) {
        e = SymExpr::apply(Kind::TrueDiv, {e, parseUnary()});
      } else if (eat("%")) {
        e = SymExpr::apply(Kind::Mod, {e, parseUnary()});
      } else {
        return e;
      }
    }
  }
  SymExpr parseUnary() {
    // Every recursive path of this grammar passes here: bound the depth.
    struct Depth {
      explicit Depth(ExprParser& p) : p(p) {
        if (++p.depth_ > 200) p.error("nested too deeply");
      }
      ~Depth() { --p.depth_; }
      ExprParser& p;
    } depth(*this);
    if (eat("-")) return -parseUnary();
    if (eat("+")) return parseUnary();
    if (eat("~")) return SymExpr::apply(Kind::Not, {parseUnary()});
    return parsePower();
  }
  SymExpr parsePower() {
    SymExpr base = parseAtom();
    if (eat("**")) return SymExpr::apply(Kind::Pow, {base, parseUnary()});
    return base;
  }

  std::string parseName() {
    skipWs();
    size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' || s_[pos_] == '.'))
      ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }

  std::string parseQuoted() {
    skipWs();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) error("expected a quoted name");
    char q = s_[pos_++];
    size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != q) ++pos_;
    if (pos_ >= s_.size()) error("unterminated string");
    std::string out(s_.substr(start, pos_ - start));
    ++pos_;
    return out;
  }

  // Skips `key=value` keyword arguments (sympy assumptions like positive=True).
  bool skipKeyword() {
    skipWs();
    size_t save = pos_;
    std::string n = parseName();
    if (!n.empty() && eat("=") && !peek("=")) {
      parseOr();
      return true;
    }
    pos_ = save;
    return false;
  }

  std::vector<SymExpr> parseArgs() {
    std::vector<SymExpr> args;
    if (eat(")")) return args;
    while (true) {
      if (!skipKeyword()) args.push_back(parseOr());
      if (eat(")")) return args;
      if (!eat(",")) error("expected ',' or ')'");
    }
  }

  SymExpr parseAtom() {
    skipWs();
    if (pos_ >= s_.size()) error("unexpected end");
    char c = s_[pos_];
    if (c == '(') {
      ++pos_;
      SymExpr e = parseOr();
      if (!eat(")")) error("expected ')'");
      return e;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t start = pos_;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
      bool is_float = false;
      if (pos_ < s_.size() && (s_[pos_] == '.' || s_[pos_] == 'e' || s_[pos_] == 'E')) {
        is_float = true;
        ++pos_;
        while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '-' || s_[pos_] == '+' ||
                                    s_[pos_] == 'e' || s_[pos_] == 'E'))
          ++pos_;
      }
      std::string tok(s_.substr(start, pos_ - start));
      try {
        if (is_float) {
          if (std::optional<double> v = parseDecimal(tok)) return SymExpr::real(*v);
          error("bad number '" + tok + "'");
        }
        return SymExpr::integer(std::stoll(tok));
      } catch (const std::exception&) {
        error("bad number '" + tok + "'");
      }
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::string name = parseName();
      if (name == "True" || name == "true" || name == "BooleanTrue" || name == "sympy.true") return SymExpr::boolean(true);
      if (name == "False" || name == "false" || name == "BooleanFalse" || name == "sympy.false") return SymExpr::boolean(false);
      if (name == "oo" || name == "int_oo") return SymExpr::apply(Kind::Opaque, {}, name);
      if (!eat("(")) return SymExpr::symbol(name);
      return parseCall(name);
    }
    error(std::string("unexpected character '") + c + "'");
  }

  SymExpr parseCall(const std::string& fn) {
    if (fn == "Symbol") {
      std::string name = parseQuoted();
      bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
      for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
      if (!ok) error("symbol name '" + name + "' is not an identifier");
      while (eat(",")) skipKeyword();
      if (!eat(")")) error("expected ')' after Symbol");
      return SymExpr::symbol(name);
    }
    if (fn == "Integer") {
      std::vector<SymExpr> a = parseArgs();
      if (a.size() != 1 || !a[0].isInt()) {
        if (a.size() == 1 && a[0].kind() == Kind::Mul) return a[0];  // Integer(-3) parses as -1*3 folded
        error("Integer() takes one integer");
      }
      return a[0];
    }
    if (fn == "Float") {
      skipWs();
      double v = 0;
      if (peek("'") || peek("\"")) {
        std::string t = parseQuoted();
        if (std::optional<double> d = parseDecimal(t)) v = *d;
        else error("bad Float");
        while (eat(",")) skipKeyword();
        if (!eat(")")) error("expected ')'");
      } else {
        auto a = parseArgs();
        if (a.size() != 1) error("Float() takes one value");
        v = a[0].isInt() ? static_cast<double>(a[0].intValue()) : a[0].realValue();
      }
      return SymExpr::real(v);
    }
    std::vector<SymExpr> a = parseArgs();
    auto need = [&](size_t n) {
      if (a.size() != n) error(fn + " takes " + std::to_string(n) + " arguments");
    };
    if (fn == "Add") return SymExpr::apply(Kind::Add, a);
    if (fn == "Mul") return SymExpr::apply(Kind::Mul, a);
    if (fn == "Pow") { need(2); return SymExpr::apply(Kind::Pow, a); }
    if (fn == "FloorDiv" || fn == "floordiv") { need(2); return SymExpr::apply(Kind::FloorDiv, a); }
    if (fn == "CeilDiv" || fn == "ceildiv") { need(2); return SymExpr::apply(Kind::CeilDiv, a); }
    if (fn == "Mod" || fn == "PythonMod" || fn == "mod") { need(2); return SymExpr::apply(Kind::Mod, a); }
    if (fn == "Max" || fn == "max") return SymExpr::apply(Kind::Max, a);
    if (fn == "Min" || fn == "min") return SymExpr::apply(Kind::Min, a);
    if (fn == "Rational") { need(2); return SymExpr::apply(Kind::TrueDiv, a); }
    if (fn == "IntTrueDiv" || fn == "TrueDiv") { need(2); return SymExpr::apply(Kind::TrueDiv, a); }
    if (fn == "Eq") { need(2); return SymExpr::apply(Kind::Eq, a); }
    if (fn == "Ne" || fn == "Unequality") { need(2); return SymExpr::apply(Kind::Ne, a); }
    if (fn == "StrictLessThan" || fn == "Lt") { need(2); return SymExpr::apply(Kind::Lt, a); }
    if (fn == "LessThan" || fn == "Le") { need(2); return SymExpr::apply(Kind::Le, a); }
    if (fn == "StrictGreaterThan" || fn == "Gt") { need(2); return SymExpr::apply(Kind::Gt, a); }
    if (fn == "GreaterThan" || fn == "Ge") { need(2); return SymExpr::apply(Kind::Ge, a); }
    if (fn == "And") return SymExpr::apply(Kind::And, a);
    if (fn == "Or") return SymExpr::apply(Kind::Or, a);
    if (fn == "Not") { need(1); return SymExpr::apply(Kind::Not, a); }
    if (fn == "ITE" || fn == "Piecewise2") { need(3); return SymExpr::apply(Kind::Ite, a); }
    return SymExpr::apply(Kind::Opaque, std::move(a), fn);
  }

  std::string_view s_;
  std::string_view ctx_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

SymExpr parseSymExpr(std::string_view text, std::string_view context) {
  return ExprParser(text, context).parseAll();
}

// ---------------------------------------------------------------------------------------

SymbolInfo& SymbolTable::getOrAdd(const std::string& name) {
  auto& s = symbols_[name];
  if (s.name.empty()) s.name = name;
  return s;
}

const SymbolInfo* SymbolTable::find(const std::string& name) const {
  auto it = symbols_.find(name);
  return it == symbols_.end() ? nullptr : &it->second;
}

namespace {

using Bound = std::optional<int64_t>;
constexpr int64_t kBig = int64_t{1} << 62;

Bound addB(Bound a, Bound b) {
  if (!a || !b) return std::nullopt;
  if (std::abs(*a) > kBig || std::abs(*b) > kBig) return std::nullopt;
  return *a + *b;
}

}  // namespace

SymbolTable::Interval SymbolTable::range(const SymExpr& e) const {
  switch (e.kind()) {
    case Kind::Int:
      return {e.intValue(), e.intValue()};
    case Kind::Sym: {
      const SymbolInfo* s = find(e.name());
      Interval r{0, std::nullopt};
      if (s) {
        if (s->min) r.lo = std::max<int64_t>(*s->min, 0);
        if (s->max) r.hi = *s->max;
      }
      return r;
    }
    case Kind::Add: {
      Interval r{0, 0};
      for (const auto& a : e.args()) {
        Interval x = range(a);
        r.lo = addB(r.lo, x.lo);
        r.hi = addB(r.hi, x.hi);
      }
      return r;
    }
    case Kind::Mul: {
      // Products of intervals; unbounded ends handled for the common non-negative case.
      Interval r{1, 1};
      for (const auto& a : e.args()) {
        Interval x = range(a);
        if (r.lo && r.hi && x.lo && x.hi) {
          if (std::abs(*r.lo) > (1 << 30) || std::abs(*r.hi) > (1 << 30) || std::abs(*x.lo) > (1 << 30) ||
              std::abs(*x.hi) > (1 << 30))
            return {};
          int64_t c[4] = {*r.lo * *x.lo, *r.lo * *x.hi, *r.hi * *x.lo, *r.hi * *x.hi};
          r = {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
        } else if (r.lo && x.lo && *r.lo >= 0 && *x.lo >= 0) {
          r = {*r.lo * *x.lo, std::nullopt};
        } else if (r.hi && x.lo && r.lo && *r.hi <= 0 && *r.lo < 0 && *x.lo >= 0) {
          r = {std::nullopt, *r.hi * *x.lo};
        } else {
          return {};
        }
      }
      return r;
    }
    case Kind::Max: case Kind::Min: {
      Interval r = range(e.args()[0]);
      for (size_t i = 1; i < e.args().size(); ++i) {
        Interval x = range(e.args()[i]);
        if (e.kind() == Kind::Max) {
          r.lo = (r.lo && x.lo) ? std::max(*r.lo, *x.lo) : (r.lo ? r.lo : x.lo);
          r.hi = (r.hi && x.hi) ? Bound(std::max(*r.hi, *x.hi)) : std::nullopt;
        } else {
          r.lo = (r.lo && x.lo) ? Bound(std::min(*r.lo, *x.lo)) : std::nullopt;
          r.hi = (r.hi && x.hi) ? std::min(*r.hi, *x.hi) : (r.hi ? r.hi : x.hi);
        }
      }
      return r;
    }
    case Kind::FloorDiv: {
      Interval a = range(e.args()[0]);
      if (e.args()[1].isInt() && e.args()[1].intValue() > 0 && a.lo && *a.lo >= 0) {
        int64_t d = e.args()[1].intValue();
        return {*a.lo / d, a.hi ? Bound(*a.hi / d) : std::nullopt};
      }
      return {};
    }
    case Kind::Mod: {
      if (e.args()[1].isInt() && e.args()[1].intValue() > 0) return {0, e.args()[1].intValue() - 1};
      return {};
    }
    default:
      return {};
  }
}

bool SymbolTable::knownEqual(const SymExpr& a, const SymExpr& b) const {
  if (a == b) return true;
  SymExpr d = a - b;
  if (d.isInt()) return d.intValue() == 0;
  Interval r = range(d);
  return r.lo && r.hi && *r.lo == 0 && *r.hi == 0;
}

bool SymbolTable::knownNotEqual(const SymExpr& a, const SymExpr& b) const {
  SymExpr d = a - b;
  if (d.isInt()) return d.intValue() != 0;
  Interval r = range(d);
  return (r.lo && *r.lo > 0) || (r.hi && *r.hi < 0);
}

int64_t exampleSize(const SymbolInfo* info) {
  if (info && info->hint) return *info->hint;
  int64_t v = 16;
  if (info && info->min && v < *info->min) v = *info->min;
  if (info && info->max && v > *info->max) v = *info->max;
  return v;
}

}  // namespace fxfuse::ir
