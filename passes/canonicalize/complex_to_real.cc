// complex-to-real: rewrites complex arithmetic (c64/c128) as arithmetic on real pairs, so that
// the fusions, the lowering and the kernels only see real tensors. A complex value z of shape
// S becomes the real value p(z) of shape S + [2] (re, im), the layout `view_as_real` gives:
//
//   view_as_complex(x)            -> x                       (x is already [..., 2])
//   view_as_real(z)               -> p(z)
//   polar(r, θ)                   -> stack([r * cos(θ), r * sin(θ)], -1)
//   mul(a, b), both complex       -> stack([ar*br - ai*bi, ar*bi + ai*br], -1)
//                                    with ar = select(p(a), -1, 0), ai = select(p(a), -1, 1)
//   mul(z, number)                -> mul(p(z), number)
//   mul(z, x), x real             -> mul(p(z), unsqueeze(x, -1))
//   add/sub(a, b), both complex   -> add/sub(p(a), p(b))
//   slice/select/unsqueeze(z, d)  -> the same on p(z), a negative d shifted by one
//   view/reshape(z, shape)        -> reshape(p(z), shape + [2])
//   clone/contiguous/alias(z), to/_to_copy(z, same dtype) -> p(z)
//
// Rotary embeddings written with complex numbers (Llama-4: `polar` frequencies times
// `view_as_complex` of the query) use only these. A graph with any other op on a complex
// value, or a complex graph input or output, is left as it is and the pass says why.
#include <fmt/format.h>

#include "passes/canonicalize/canonical_util.h"
#include "passes/passes.h"

namespace fxfuse::passes {
namespace {

using compiler::PassContext;
using compiler::valueArg;

bool isComplexValue(const ir::Value* v) {
  return v && v->kind == ir::ValueKind::Tensor && ir::isComplex(v->type.dtype);
}

bool isPartDType(ir::DType d) { return d == ir::DType::F32 || d == ir::DType::F64; }
bool isTwo(const ir::SymExpr& e) { return e.isInt() && e.intValue() == 2; }

ir::DType partOf(ir::DType complex) { return complex == ir::DType::C128 ? ir::DType::F64 : ir::DType::F32; }

bool isCopyLike(const std::string& t) {
  return t == "aten.clone.default" || t == "aten.contiguous.default" || t == "aten.alias.default" ||
         t == "aten.to.dtype_layout" || t == "aten.to.dtype" || t == "aten._to_copy.default" ||
         t == "prims.convert_element_type.default";
}
bool isReshape(const std::string& t) {
  return t == "aten.view.default" || t == "aten.reshape.default" || t == "aten._unsafe_view.default";
}

// Right-aligned broadcast of two shapes (equal dims, or a 1 against anything).
std::vector<ir::SymExpr> broadcastShape(std::vector<ir::SymExpr> a, std::vector<ir::SymExpr> b) {
  if (a.size() < b.size()) std::swap(a, b);
  size_t off = a.size() - b.size();
  for (size_t k = 0; k < b.size(); ++k) {
    const ir::SymExpr& d = b[k];
    if (!(d.isInt() && d.intValue() == 1)) a[off + k] = d;
  }
  return a;
}

class ComplexToRealPass : public Pass {
 public:
  std::string_view name() const override { return "complex-to-real"; }
  std::string_view summary() const override {
    return "complex tensors (polar, view_as_complex/real, complex mul) -> real (re, im) pairs";
  }

  bool run(ir::Graph& g, PassContext& ctx) override {
    std::vector<ir::Node*> sites;
    for (ir::Node* n : g.nodeList())
      if (touchesComplex(*n)) sites.push_back(n);
    if (sites.empty()) return false;
    for (const auto& in : g.inputs())
      if (isComplexValue(in.value)) return reject(ctx, in.value->name, "a complex graph input");
    for (ir::Node* n : sites)
      if (std::string why = unsupported(*n); !why.empty()) return reject(ctx, n->name, why);
    for (const auto& o : g.outputs())
      if (isComplexValue(o.value)) return reject(ctx, o.value->name, "a complex graph output");

    compiler::Rewriter rw(g);
    g_ = &g;
    rw_ = &rw;
    pairs_.clear();
    for (ir::Node* n : sites) rewrite(*n);
    std::vector<ir::Node*> dead(sites.rbegin(), sites.rend());
    rw.eraseDead(dead);
    rw.finish();
    ctx.addMatch("complex_to_real", static_cast<int64_t>(sites.size()));
    return true;
  }

 private:
  static bool touchesComplex(const ir::Node& n) {
    for (const ir::Value* v : n.outputs())
      if (isComplexValue(v)) return true;
    for (const auto& a : n.args()) {
      if (a.value.isValue() && isComplexValue(a.value.value)) return true;
      if (a.value.kind == ir::Attr::Kind::List)
        for (const auto& e : a.value.list)
          if (e.isValue() && isComplexValue(e.value)) return true;
    }
    return false;
  }

  bool reject(PassContext& ctx, const std::string& where, const std::string& why) {
    ctx.rejected("complex_to_real", where, why + "; complex arithmetic is left as it is");
    return false;
  }

  // Empty when `n` is one of the rewritten forms (the table above) with the operands that
  // form needs; else why not (a malformed graph is left to the later stages' one-line errors).
  static std::string unsupported(const ir::Node& n) {
    const std::string& t = n.target;
    const ir::Value* out = n.numOutputs() == 1 ? n.output(0) : nullptr;
    const ir::Value* self = valueArg(n, "self");
    if (!out) return fmt::format("{}: not one used output", t);
    if (t == "aten.view_as_complex.default") {
      bool ok = self && self->kind == ir::ValueKind::Tensor && isPartDType(self->type.dtype) &&
                !self->type.shape.empty() && isTwo(self->type.shape.back()) && isComplexValue(out) &&
                partOf(out->type.dtype) == self->type.dtype;
      return ok ? std::string() : "view_as_complex of other than a [..., 2] f32/f64 tensor";
    }
    if (t == "aten.view_as_real.default")
      return isComplexValue(self) && !isComplexValue(out) ? std::string() : "view_as_real of a non-complex value";
    if (t == "aten.polar.default") {
      const ir::Value* r = valueArg(n, "abs");
      const ir::Value* theta = valueArg(n, "angle");
      bool ok = r && theta && r->kind == ir::ValueKind::Tensor && theta->kind == ir::ValueKind::Tensor &&
                isPartDType(r->type.dtype) && r->type.dtype == theta->type.dtype && isComplexValue(out) &&
                partOf(out->type.dtype) == r->type.dtype;
      return ok ? std::string() : "polar of other than two f32/f64 tensors of one dtype";
    }
    if (t == "aten.slice.Tensor" || t == "aten.select.int" || t == "aten.unsqueeze.default" || isReshape(t))
      return isComplexValue(self) && isComplexValue(out) ? std::string()
                                                         : fmt::format("{}: a complex view of a non-complex value", t);
    if (isCopyLike(t)) {
      const ir::Value* x = self ? self : valueArg(n, "a");
      if (!isComplexValue(x) || !isComplexValue(out) || x->type.dtype != out->type.dtype)
        return fmt::format("{} changes a complex tensor's dtype", t);
      return {};
    }
    if (t == "aten.mul.Tensor" || t == "aten.add.Tensor" || t == "aten.sub.Tensor") {
      const ir::Value* b = valueArg(n, "other");
      const ir::Attr* other = compiler::argOf(n, "other");
      if (!isComplexValue(self) || !isComplexValue(out)) return fmt::format("{}: the first operand is not complex", t);
      if (!other || (!b && !other->asDouble()))
        return fmt::format("{}: the second operand is not a tensor or a number", t);
      if (b && b->kind != ir::ValueKind::Tensor) return fmt::format("{}: the second operand is not a tensor", t);
      if (t != "aten.mul.Tensor" && (!isComplexValue(b) || compiler::numberArg(n, "alpha").value_or(1.0) != 1.0))
        return fmt::format("{} of a complex and a real operand (or with alpha)", t);
      if (b && isComplexValue(b) && b->type.dtype != self->type.dtype) return "complex operands of different dtypes";
      return {};
    }
    return fmt::format("{} on a complex tensor", t);
  }

  // ------------------------------------------------------------------ building blocks
  ir::Value* make(const std::string& target, std::vector<ir::Arg> args, ir::DType dt, std::vector<ir::SymExpr> shape,
                  ir::Node& at) {
    ir::TensorType type;
    type.dtype = dt;
    type.shape = std::move(shape);
    type.stride = ir::TensorType::contiguousStrides(type.shape);
    type.storage_offset = ir::SymExpr::integer(0);
    if (at.output(0)) type.device = at.output(0)->type.device;
    std::vector<Out> outs(1);
    outs[0].type = type;
    ir::Node* c = rw_->create(target, std::move(args), outs, &at, {&at}, at.name);
    return c->output(0);
  }
  std::vector<ir::SymExpr> shapeOf(const ir::Value* v) { return v->type.shape; }
  std::vector<ir::SymExpr> withPair(std::vector<ir::SymExpr> s) {
    s.push_back(ir::SymExpr::integer(2));
    return s;
  }
  ir::Value* part(ir::Value* pair, int64_t index, ir::Node& at) {
    std::vector<ir::SymExpr> s = shapeOf(pair);
    s.pop_back();
    return make("aten.select.int", {A("self", V(pair)), A("dim", I(-1)), A("index", I(index))}, pair->type.dtype, s,
                at);
  }
  ir::Value* binary(const char* target, ir::Value* a, ir::Value* b, ir::Node& at) {
    return make(target, {A("self", V(a)), A("other", V(b))}, a->type.dtype, broadcastShape(shapeOf(a), shapeOf(b)), at);
  }
  ir::Value* unary(const char* target, ir::Value* a, ir::Node& at) {
    return make(target, {A("self", V(a))}, a->type.dtype, shapeOf(a), at);
  }
  ir::Value* stackPair(ir::Value* re, ir::Value* im, ir::Node& at) {
    return make("aten.stack.default", {A("tensors", ir::Attr::ofList({V(re), V(im)})), A("dim", I(-1))}, re->type.dtype,
                withPair(broadcastShape(shapeOf(re), shapeOf(im))), at);
  }
  // A dim argument of an op on z, for the same op on p(z) (one more trailing dim).
  ir::Attr shiftedDim(const ir::Node& n) {
    int64_t d = compiler::intArg(n, "dim").value_or(0);
    return I(d < 0 ? d - 1 : d);
  }

  // ------------------------------------------------------------------ the rewrite
  void rewrite(ir::Node& n) {
    const std::string& t = n.target;
    ir::Value* out = n.output(0);
    ir::Value* self = valueArg(n, "self");
    if (t == "aten.view_as_complex.default") return define(out, self);
    if (t == "aten.view_as_real.default") return rw_->replace(out, pair(self));
    if (t == "aten.polar.default") {
      ir::Value* r = valueArg(n, "abs");
      ir::Value* theta = valueArg(n, "angle");
      ir::Value* cos = unary("aten.cos.default", theta, n);
      ir::Value* re = binary("aten.mul.Tensor", r, cos, n);
      ir::Value* sin = unary("aten.sin.default", theta, n);
      ir::Value* im = binary("aten.mul.Tensor", r, sin, n);
      return define(out, stackPair(re, im, n));
    }
    if (isCopyLike(t)) return define(out, pair(self ? self : valueArg(n, "a")));
    if (t == "aten.mul.Tensor") return define(out, complexMul(n, self, n.output(0)));
    if (t == "aten.add.Tensor" || t == "aten.sub.Tensor")
      return define(out, binary(t.c_str(), pair(self), pair(valueArg(n, "other")), n));
    // views: the same op on the pair, the dim shifted past the (re, im) dim
    std::vector<ir::Arg> args;
    for (const auto& a : n.args()) {
      if (a.value.isValue() && a.value.value == self)
        args.push_back(A(a.name.empty() ? "self" : a.name, V(pair(self))));
      else if (a.name == "dim")
        args.push_back(A("dim", shiftedDim(n)));
      else if (a.name == "size" || a.name == "shape")
        args.push_back(A(a.name, withPairList(a.value)));
      else
        args.push_back(a);
    }
    define(out, make(t, std::move(args), partOf(out->type.dtype), withPair(shapeOf(out)), n));
  }

  ir::Value* complexMul(ir::Node& n, ir::Value* a, ir::Value* out) {
    const ir::Attr* other = compiler::argOf(n, "other");
    ir::Value* b = valueArg(n, "other");
    if (!b)
      return make("aten.mul.Tensor", {A("self", V(pair(a))), A("other", *other)}, partOf(a->type.dtype),
                  withPair(shapeOf(out)), n);
    if (!isComplexValue(b)) {
      ir::Value* col =
          make("aten.unsqueeze.default", {A("self", V(b)), A("dim", I(-1))}, b->type.dtype, withPair(shapeOf(b)), n);
      col->type.shape.back() = ir::SymExpr::integer(1);
      col->type.stride = ir::TensorType::contiguousStrides(col->type.shape);
      return binary("aten.mul.Tensor", pair(a), col, n);
    }
    // One statement per node: the order of the new nodes must not depend on the compiler's
    // order of evaluating arguments.
    ir::Value* pa = pair(a);
    ir::Value* pb = pair(b);
    ir::Value* ar = part(pa, 0, n);
    ir::Value* ai = part(pa, 1, n);
    ir::Value* br = part(pb, 0, n);
    ir::Value* bi = part(pb, 1, n);
    ir::Value* ar_br = binary("aten.mul.Tensor", ar, br, n);
    ir::Value* ai_bi = binary("aten.mul.Tensor", ai, bi, n);
    ir::Value* re = binary("aten.sub.Tensor", ar_br, ai_bi, n);
    ir::Value* ar_bi = binary("aten.mul.Tensor", ar, bi, n);
    ir::Value* ai_br = binary("aten.mul.Tensor", ai, br, n);
    ir::Value* im = binary("aten.add.Tensor", ar_bi, ai_br, n);
    return stackPair(re, im, n);
  }

  static ir::Attr withPairList(const ir::Attr& shape) {
    if (shape.kind != ir::Attr::Kind::List) return shape;
    ir::Attr l = shape;
    l.list.push_back(I(2));
    return l;
  }

  void define(ir::Value* complex, ir::Value* pair_value) {
    if (complex) pairs_[complex] = pair_value;
  }
  ir::Value* pair(ir::Value* complex) {
    auto it = pairs_.find(complex);
    if (it == pairs_.end()) throw std::logic_error("complex-to-real: no pair for " + complex->name);
    return it->second;
  }

  ir::Graph* g_ = nullptr;
  compiler::Rewriter* rw_ = nullptr;
  std::map<const ir::Value*, ir::Value*> pairs_;
};

}  // namespace

std::unique_ptr<Pass> createComplexToRealPass() { return std::make_unique<ComplexToRealPass>(); }

}  // namespace fxfuse::passes
