// Pattern-matching combinators over the dataflow graph (XLA/TVM style).
//
//   Value *x = nullptr, *w = nullptr;  const ir::Attr* eps = nullptr;
//   auto var  = m::Op("aten.mean.dim", {{"self", m::Op("aten.pow.Tensor_Scalar",
//                    {{"self", m::Any(&x)}, {"exponent", m::Const(2)}})}});
//   auto norm = m::Op("aten.mul.Tensor", {{"self", m::Same(&x)},
//                    {"other", m::Op("aten.rsqrt.default", {{"self", ...}})}}).commutative();
//   m::MatchState st;
//   if (norm.match(root, st)) { ... x, w, eps bound ... } else { st.failure() }
//
// * Op(target), Ops({targets}), {{arg name, pattern}...}): arguments are looked up by schema name
//   (positional arguments through the schema). `.commutative()` also tries the two
//   operands swapped.
// * Any(&v) binds any value; Same(&v) requires the value bound earlier; Const(c, tol)
//   matches a number argument (or a one-element constant) within a relative tolerance;
//   Scalar(&attr) binds a number or a scalar value (SymFloat input, 0-d tensor).
// * Cast(p, dtype) matches any pure dtype cast spelling; Clamp(p, lo, hi) matches
//   clamp(lo, hi), clamp_min+clamp_max in either order.
// * Predicates: .dtype(d), .oneUse(), .output(i), .where(pred, "desc"), .bind(&v), .node(&n).
//
// Bindings are trailed: a failed alternative (commutative swap, OneOf) undoes its
// bindings. The state records the deepest failing condition for explain mode.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace fxfuse::compiler::m {

class MatchState {
 public:
  // Failure recording: keeps the message of the deepest failure.
  void fail(const std::string& msg);
  const std::string& failure() const { return failure_; }
  int depth = 0;

  // Binding trail.
  size_t mark() const { return trail_.size(); }
  void rollback(size_t mark);
  void bindValue(ir::Value** slot, ir::Value* v);
  void bindNode(ir::Node** slot, ir::Node* n);
  void bindAttr(const ir::Attr** slot, const ir::Attr* a);

 private:
  struct Entry {
    void** slot;
    void* old;
  };
  std::vector<Entry> trail_;
  std::string failure_;
  int failure_depth_ = -1;
};

class Pattern;
using Pred = std::function<bool(ir::Value*, std::string* why)>;

namespace detail {
struct Impl {
  virtual ~Impl() = default;
  // Structural match of an argument (a value or a non-value Attr).
  virtual bool matchAttr(const ir::Attr& a, MatchState& st) const;
  virtual bool matchValue(ir::Value* v, MatchState& st) const = 0;
  virtual std::string str() const = 0;
};
}  // namespace detail

class Pattern {
 public:
  explicit Pattern(std::shared_ptr<detail::Impl> impl) : impl_(std::move(impl)) {}

  bool match(ir::Value* v, MatchState& st) const;
  bool matchAttr(const ir::Attr& a, MatchState& st) const;
  std::string str() const;

  Pattern dtype(ir::DType d) const;
  Pattern oneUse() const;               // no other users, not a graph output
  Pattern output(int index) const;      // produced as output `index` of its node
  Pattern where(Pred pred, std::string desc) const;
  Pattern bind(ir::Value** slot) const;
  Pattern node(ir::Node** slot) const;  // binds the producing node
  Pattern commutative() const;          // for Op patterns with two value arguments

  const std::shared_ptr<detail::Impl>& impl() const { return impl_; }

 private:
  std::shared_ptr<detail::Impl> impl_;
};

using ArgPatterns = std::vector<std::pair<std::string, Pattern>>;

Pattern Any(ir::Value** slot = nullptr);
Pattern Same(ir::Value* const* bound);
Pattern Const(double c, double rel_tol = 1e-6);
Pattern Scalar(const ir::Attr** slot);
Pattern Op(std::string target, ArgPatterns args = {});
Pattern Ops(std::vector<std::string> targets, ArgPatterns args = {});
Pattern Cast(Pattern input, std::optional<ir::DType> to = std::nullopt, ir::DType* to_out = nullptr);
Pattern Clamp(Pattern input, double lo, double hi);
Pattern OneOf(std::vector<Pattern> alternatives);
// Matches `p`, or — when the value is a pure dtype cast — `p` on the cast's input.
Pattern OptionalCast(Pattern p);

}  // namespace fxfuse::compiler::m
