// Symbolic integer (and boolean) expressions for tensor sizes, strides and SymInt values.
//
// Expressions are immutable trees kept in a canonical form, so two spellings of the same
// polynomial compare equal structurally: sums are flattened with like terms combined and
// constants folded, products are flattened with one integer coefficient first, and
// operands are sorted. Non-polynomial functions (FloorDiv, Mod, Min, Max, ...) fold when
// their arguments are constant and otherwise stay as function nodes.
//
// Whether two sizes are "statically known equal" is decided on the difference `a - b`:
// constant zero, or an interval of exactly [0, 0] given the symbols' ranges. Anything
// else is "not known": passes must not treat it as equal (vLLM #24880).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace fxfuse::ir {

class SymExpr {
 public:
  enum class Kind : uint8_t {
    Int, Real, Bool, Sym,
    Add, Mul, FloorDiv, Mod, Pow, Min, Max, CeilDiv, TrueDiv,
    Eq, Ne, Lt, Le, Gt, Ge, And, Or, Not, Ite,
    Opaque,  // unknown function: name kept, arguments kept
  };

  SymExpr();  // the integer 0
  static SymExpr integer(int64_t v);
  static SymExpr real(double v);
  static SymExpr boolean(bool v);
  static SymExpr symbol(std::string name);
  // Builds `kind(args...)` and canonicalizes it. `opaque_name` only for Kind::Opaque.
  static SymExpr apply(Kind kind, std::vector<SymExpr> args, std::string opaque_name = {});

  Kind kind() const;
  bool isInt() const { return kind() == Kind::Int; }
  bool isSym() const { return kind() == Kind::Sym; }
  int64_t intValue() const;           // requires isInt()
  double realValue() const;           // requires Real
  bool boolValue() const;             // requires Bool
  const std::string& name() const;    // symbol name or opaque function name
  const std::vector<SymExpr>& args() const;

  // Canonical text, sympy-str-like: "256*s27 + 1", "s0//2", "Max(2, s0)", "Eq(s0, 4)".
  std::string str() const;

  bool operator==(const SymExpr& o) const;
  bool operator!=(const SymExpr& o) const { return !(*this == o); }
  bool operator<(const SymExpr& o) const;  // total order used for canonical sorting
  size_t hash() const;

  // Evaluates with every symbol bound; nullopt when a symbol is unbound or the
  // expression is not integral (division by zero, opaque function).
  std::optional<int64_t> evaluate(const std::map<std::string, int64_t>& env) const;
  SymExpr substitute(const std::map<std::string, SymExpr>& env) const;
  void collectSymbols(std::set<std::string>& out) const;

 private:
  struct Rep;
  explicit SymExpr(std::shared_ptr<const Rep> rep) : rep_(std::move(rep)) {}
  std::shared_ptr<const Rep> rep_;
};

SymExpr operator+(const SymExpr& a, const SymExpr& b);
SymExpr operator-(const SymExpr& a, const SymExpr& b);
SymExpr operator*(const SymExpr& a, const SymExpr& b);
SymExpr operator-(const SymExpr& a);
SymExpr floorDiv(const SymExpr& a, const SymExpr& b);

// Parses both spellings torch writes: str() form ("256*s27 + 1", "((s0 + 1)//2)",
// "Max(s0, 2)") and sympy srepr ("Mul(Integer(256), Symbol('s27', positive=True,
// integer=True))"). Unknown function names become Opaque nodes. Throws FxError with
// `context` in the message on malformed input.
SymExpr parseSymExpr(std::string_view text, std::string_view context = {});

// A symbol's known range and example value.
struct SymbolInfo {
  std::string name;
  std::optional<int64_t> min, max, hint;
  std::string source;
};

// A value for a symbol where one size must be picked without a binding (hints of written
// archives, sample inputs): its hint, else 16 (verify's default size) clamped to its range.
int64_t exampleSize(const SymbolInfo* info);

class SymbolTable {
 public:
  SymbolInfo& getOrAdd(const std::string& name);
  const SymbolInfo* find(const std::string& name) const;
  const std::map<std::string, SymbolInfo>& all() const { return symbols_; }
  std::map<std::string, SymbolInfo>& all() { return symbols_; }

  // Interval of `e` under the symbols' ranges (symbols default to [0, +inf) since sizes
  // are non-negative). Empty optional bounds mean unbounded.
  struct Interval { std::optional<int64_t> lo, hi; };
  Interval range(const SymExpr& e) const;

  bool knownEqual(const SymExpr& a, const SymExpr& b) const;
  bool knownNotEqual(const SymExpr& a, const SymExpr& b) const;

 private:
  std::map<std::string, SymbolInfo> symbols_;
};

}  // namespace fxfuse::ir
