// Elementwise, reduction and data-movement ops lowered into generated kernels.
//
// `generatedRules()` maps each op target to its rule, a member of Lowerer that adds the
// codegen nodes (gnodes) of one graph node to the open generated group and defines the
// node's outputs. A rule's row also says how the node joins the group:
//   OwnGroup  — the rule opens or joins a row group itself (reductions, softmax, top-k);
//   Pointwise — it reads its operands at the output's coordinates;
//   Remap     — it reads other positions of an operand (views, gathers, scatters, cat, pad),
//               so it needs its operand's values, not only the current element.
// Adding an op: write its rule here (or reuse one), add its row to the table, and give it an
// interpreter entry and a plan golden test (docs/architecture.md).
#include <limits>
#include <map>
#include <set>
#include <unordered_map>

#include "compiler/lowering/lowerer.h"
#include "ir/checked_math.h"

namespace fxfuse::lowering::detail {
namespace {

enum class GroupJoin { OwnGroup, Pointwise, Remap };

struct GeneratedRule {
  void (Lowerer::*lower)(Node&, const GenOut&);
  GroupJoin join;
};

// The codegen unary function of each elementwise unary op.
const std::map<std::string, std::string>& unaryFunctions() {
  static const std::map<std::string, std::string> kFunctions = {
      {"aten.neg.default", "neg"},
      {"aten.abs.default", "abs"},
      {"aten.exp.default", "exp"},
      {"aten.log.default", "log"},
      {"aten.sqrt.default", "sqrt"},
      {"aten.rsqrt.default", "rsqrt"},
      {"aten.reciprocal.default", "reciprocal"},
      {"aten.sin.default", "sin"},
      {"aten.cos.default", "cos"},
      {"aten.tanh.default", "tanh"},
      {"aten.erf.default", "erf"},
      {"aten.sigmoid.default", "sigmoid"},
      {"aten.silu.default", "silu"},
      {"aten.relu.default", "relu"},
      {"aten.logical_not.default", "not"},
      {"aten.bitwise_not.default", "bnot"},
      {"aten.floor.default", "floor"},
      {"aten.ceil.default", "ceil"},
      {"aten.round.default", "round"},
      {"aten.round.decimals", "round_decimals"},
      {"aten.sign.default", "sign"},
      {"aten.square.default", "square"},
      {"aten.log1p.default", "log1p"},
      {"aten.log_sigmoid.default", "log_sigmoid"},
      {"aten.expm1.default", "expm1"},
      {"aten.exp2.default", "exp2"},
      {"aten.log2.default", "log2"},
      {"aten.log10.default", "log10"},
      {"aten.trunc.default", "trunc"},
      {"aten.tan.default", "tan"},
      {"aten.atan.default", "atan"},
      {"aten.sinh.default", "sinh"},
      {"aten.cosh.default", "cosh"},
      {"aten.softplus.default", "softplus"},
      {"aten.isnan.default", "isnan"},
      {"aten.isinf.default", "isinf"},
      {"aten.isfinite.default", "isfinite"},
      {"aten.leaky_relu.default", "leaky_relu"},
  };
  return kFunctions;
}

// The codegen binary function of each elementwise binary op.
const std::map<std::string, std::string>& binaryFunctions() {
  static const std::map<std::string, std::string> kFunctions = {
      {"aten.mul.Tensor", "mul"},
      {"aten.mul.Scalar", "mul"},
      {"aten.div.Tensor", "div"},
      {"aten.div.Scalar", "div"},
      {"aten.pow.Tensor_Scalar", "pow"},
      {"aten.pow.Tensor_Tensor", "pow"},
      {"aten.eq.Tensor", "eq"},
      {"aten.eq.Scalar", "eq"},
      {"aten.ne.Tensor", "ne"},
      {"aten.ne.Scalar", "ne"},
      {"aten.lt.Tensor", "lt"},
      {"aten.lt.Scalar", "lt"},
      {"aten.le.Tensor", "le"},
      {"aten.le.Scalar", "le"},
      {"aten.gt.Tensor", "gt"},
      {"aten.gt.Scalar", "gt"},
      {"aten.ge.Tensor", "ge"},
      {"aten.ge.Scalar", "ge"},
      {"aten.logical_and.default", "and"},
      {"aten.logical_or.default", "or"},
      {"aten.bitwise_and.Tensor", "band"},
      {"aten.bitwise_or.Tensor", "bor"},
      {"aten.__and__.Tensor", "band"},
      {"aten.__or__.Tensor", "bor"},
      {"aten.maximum.default", "max"},
      {"aten.minimum.default", "min"},
      {"aten.bitwise_xor.Tensor", "bxor"},
      {"aten.floor_divide.default", "div_floor"},
      {"aten.floor_divide.Scalar", "div_floor"},
      {"aten.remainder.Tensor", "rem"},
      {"aten.remainder.Scalar", "rem"},
      {"aten.fmod.Tensor", "fmod"},
      {"aten.fmod.Scalar", "fmod"},
      {"aten.bitwise_xor.Scalar", "bxor"},
      {"aten.bitwise_and.Scalar", "band"},
      {"aten.bitwise_or.Scalar", "bor"},
      {"aten.logical_xor.default", "xor"},
      {"aten.atan2.default", "atan2"},
      {"aten.hypot.default", "hypot"},
  };

  return kFunctions;
}

bool isAllReduce(const std::string& t) {
  return t == "fxfuse.all_reduce.default" || t == "vllm.all_reduce.default" ||
         t == "_c10d_functional.all_reduce.default";
}

// The rule table: op target -> rule and group join.
const std::unordered_map<std::string, GeneratedRule>& generatedRules() {
  static const auto* kRules = [] {
    using J = GroupJoin;
    using L = Lowerer;
    struct Row {
      std::vector<std::string> targets;
      void (Lowerer::*lower)(Node&, const GenOut&);
      GroupJoin join;
    };
    const std::vector<Row> rows = {
        // row reductions, softmax, top-k: the rule opens its own group
        {{"aten.argmax.default", "aten.argmin.default"}, &L::lowerArgExtreme, J::OwnGroup},
        {{"aten.max.dim", "aten.min.dim"}, &L::lowerMaxMinDim, J::OwnGroup},
        {{"aten.sum.dim_IntList", "aten.mean.dim", "aten.amax.default", "aten.amin.default", "aten.sum.default",
          "aten.mean.default", "aten.max.default", "aten.min.default"},
         &L::lowerReduction,
         J::OwnGroup},
        {{"aten.any.default", "aten.any.dim", "aten.any.dims", "aten.all.default", "aten.all.dim", "aten.all.dims"},
         &L::lowerAnyAll,
         J::OwnGroup},
        {{"aten.logsumexp.default"}, &L::lowerLogSumExp, J::OwnGroup},
        {{"aten.linalg_vector_norm.default"}, &L::lowerVectorNorm, J::OwnGroup},
        {{"aten.softmax.int", "aten._softmax.default", "aten.log_softmax.int", "aten._log_softmax.default"},
         &L::lowerSoftmax,
         J::OwnGroup},
        {{"aten.topk.default", "aten.sort.default", "aten.sort.stable"}, &L::lowerTopkSort, J::OwnGroup},
        // elementwise
        {{"aten.gelu.default"}, &L::lowerGelu, J::Pointwise},
        {{"aten.div.Tensor_mode"}, &L::lowerDivMode, J::Pointwise},
        {{"aten.pow.Scalar"}, &L::lowerPowScalar, J::Pointwise},
        {{"aten.add.Tensor", "aten.add.Scalar", "aten.sub.Tensor", "aten.sub.Scalar", "aten.rsub.Scalar",
          "aten.rsub.Tensor"},
         &L::lowerAddSub,
         J::Pointwise},
        {{"aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar"},
         &L::lowerWhere,
         J::Pointwise},
        {{"aten.masked_fill.Scalar", "aten.masked_fill.Tensor"}, &L::lowerMaskedFill, J::Pointwise},
        {{"aten.clamp.Tensor", "aten.clamp_min.Tensor", "aten.clamp_max.Tensor"}, &L::lowerClampTensor, J::Pointwise},
        {{"aten.clamp.default", "aten.clamp_min.default", "aten.clamp_max.default"},
         &L::lowerClampScalar,
         J::Pointwise},
        {{"prims.convert_element_type.default", "aten._to_copy.default", "aten.to.dtype", "aten.to.dtype_layout",
          "aten.type_as.default", "aten.to.device", "aten.alias.default", "aten.detach.default", "aten.clone.default",
          "aten.lift_fresh_copy.default", "aten.dropout.default", "_c10d_functional.wait_tensor.default",
          "aten.detach_.default", "aten.positive.default", "fxfuse.all_reduce.default", "vllm.all_reduce.default",
          "_c10d_functional.all_reduce.default"},
         &L::lowerCast,
         J::Pointwise},
        {{"aten.contiguous.default"}, &L::lowerCast, J::Remap},
        // constants
        {{"aten.full.default", "aten.zeros.default", "aten.ones.default", "aten.scalar_tensor.default",
          "aten.full_like.default", "aten.zeros_like.default", "aten.ones_like.default", "aten.new_ones.default",
          "aten.new_zeros.default", "aten.new_full.default", "aten.fill.Scalar", "aten.zero.default"},
         &L::lowerFill,
         J::Pointwise},
        {{"aten.arange.default", "aten.arange.start", "aten.arange.start_step", "prims.iota.default"},
         &L::lowerArange,
         J::Pointwise},
        {{"aten.eye.default", "aten.eye.m"}, &L::lowerEye, J::Pointwise},
        // views and data movement of computed values
        {{"aten.copy.default"}, &L::lowerCopy, J::Remap},
        {{"aten.view.default", "aten.reshape.default", "aten._unsafe_view.default", "aten.as_strided.default"},
         &L::lowerReshape,
         J::Remap},
        {{"aten.permute.default", "aten.transpose.int", "aten.t.default"}, &L::lowerPermute, J::Remap},
        {{"aten.slice.Tensor", "aten.narrow.default"}, &L::lowerSlice, J::Remap},  // narrow: its start, step 1
        {{"aten.select.int"}, &L::lowerSelect, J::Remap},
        {{"aten.unsqueeze.default"}, &L::lowerUnsqueeze, J::Remap},
        {{"aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default"}, &L::lowerSqueeze, J::Remap},
        {{"aten.expand.default"}, &L::lowerExpand, J::Remap},
        {{"aten.split.Tensor", "aten.split_with_sizes.default", "aten.chunk.default", "aten.unbind.int"},
         &L::lowerSplit,
         J::Remap},
        {{"aten.cat.default", "aten.stack.default"}, &L::lowerCat, J::Remap},
        {{"aten.repeat.default"}, &L::lowerRepeat, J::Remap},
        {{"aten.flip.default"}, &L::lowerFlip, J::Remap},
        {{"aten.roll.default"}, &L::lowerRoll, J::Remap},
        {{"aten.repeat_interleave.self_int"}, &L::lowerRepeatInterleave, J::Remap},
        {{"aten.pad.default"}, &L::lowerPad, J::Remap},
        {{"aten.constant_pad_nd.default"}, &L::lowerConstantPadNd, J::Remap},
        {{"aten.triu.default", "aten.tril.default"}, &L::lowerTriangle, J::Remap},
        {{"aten.cumsum.default"}, &L::lowerCumsum, J::Remap},
        {{"aten.diff.default"}, &L::lowerDiff, J::Remap},
        // gathers and scatters
        {{"aten.embedding.default"}, &L::lowerEmbedding, J::Remap},
        {{"aten.index_select.default", "aten.gather.default"}, &L::lowerGather, J::Remap},
        {{"aten.index.Tensor", "aten._unsafe_index.Tensor"}, &L::lowerIndex, J::Remap},
        {{"aten.scatter.src", "aten.scatter.value", "aten.scatter_add.default", "aten.index_add.default"},
         &L::lowerScatter,
         J::Remap},
        {{"aten.index_put.default"}, &L::lowerIndexPut, J::Remap},
        {{"aten.slice_scatter.default"}, &L::lowerSliceScatter, J::Remap},
        {{"aten.select_scatter.default"}, &L::lowerSelectScatter, J::Remap},
        {{"aten.histc.default"}, &L::lowerHistc, J::Remap},
        // generated dot products (correct, not fast)
        {{"aten._grouped_mm.default"}, &L::lowerGroupedMm, J::Remap},
        {{"aten.convolution.default", "aten.conv1d.default"}, &L::lowerConvolution, J::Remap},
    };
    auto* rules = new std::unordered_map<std::string, GeneratedRule>();
    for (const auto& [target, fn] : unaryFunctions())
      rules->emplace(target, GeneratedRule{&L::lowerUnary, J::Pointwise});
    for (const auto& [target, fn] : binaryFunctions())
      rules->emplace(target, GeneratedRule{&L::lowerBinary, J::Pointwise});
    for (const auto& row : rows)
      for (const auto& target : row.targets)
        if (!rules->emplace(target, GeneratedRule{row.lower, row.join}).second)
          throw std::logic_error("generated rule table: two rows for " + target);
    return rules;
  }();
  return *kRules;
}

}  // namespace

std::vector<std::string> generatedRuleTargets() {
  std::vector<std::string> targets;
  for (const auto& [target, rule] : generatedRules()) targets.push_back(target);
  return targets;
}

// The output a rule defines: the node's first present output (multi-output views may leave
// the first unused), which must be a tensor.
GenOut Lowerer::generatedOutput(Node& n) {
  const std::string& t = n.target;
  Value* out = n.output(0);
  for (Value* v : n.outputs())
    if (!out && v) out = v;
  if ((t == "aten.item.default" || t == "aten._local_scalar_dense.default") && out &&
      out->kind == ir::ValueKind::SymInt)
    unsupported(n,
                "a data-dependent size (a tensor's value read back to size later tensors): launch plans need "
                "every size before the first launch");
  if (!out || out->kind != ir::ValueKind::Tensor) unsupported(n, "no tensor output");
  return GenOut{out, out->type.dtype, out->type.shape, n.name};
}

void Lowerer::lowerGenerated(Node& n) {
  const GenOut g = generatedOutput(n);
  const auto& rules = generatedRules();
  auto it = rules.find(n.target);
  const GeneratedRule* rule = it == rules.end() ? nullptr : &it->second;
  if (rule && rule->join == GroupJoin::OwnGroup) return (this->*rule->lower)(n, g);
  // An eval-mode native_dropout is respelled (canonicalize-ops); what is left draws random numbers.
  if (n.target == "aten.native_dropout.default") unsupported(n, "dropout in training mode");
  if (n.numOutputs() > 1) {
    // Multi-output views (split/chunk/unbind): each output is a slice/select of the input.
    Value* self = valArg(n, "self");
    if (!self || self->kind != ir::ValueKind::Tensor) unsupported(n, "no lowering for this op");
    prepareGroup(n, {self->type.shape, 0}, true);
  } else {
    prepareGroup(n, {g.osh, 0}, rule && rule->join == GroupJoin::Remap);
  }
  if (!rule) unsupported(n, "no lowering for this op");
  (this->*rule->lower)(n, g);
}

// ---------------------------------------------------------------------------------- reductions

// The dims a reduction reduces: its one `dim` (softmax, max/min.dim), every dim (the
// .default forms, an empty dim list), or the listed ones.
std::set<int64_t> Lowerer::reducedDims(Node& n, Value* x) {
  const std::string& t = n.target;
  size_t r = x->type.shape.size();
  std::set<int64_t> dims;
  bool one_dim = t == "aten.max.dim" || t == "aten.min.dim" || t == "aten.softmax.int" ||
                 t == "aten._softmax.default" || t == "aten.log_softmax.int" || t == "aten._log_softmax.default";
  bool all_dims =
      t == "aten.sum.default" || t == "aten.mean.default" || t == "aten.max.default" || t == "aten.min.default";
  if (one_dim) {
    dims.insert(normDim(n, intArg(n, "dim", -1), r));
  } else if (all_dims) {
    for (size_t k = 0; k < r; ++k) dims.insert(static_cast<int64_t>(k));
  } else {
    auto listed = intList(n, "dim");
    if (listed.empty())
      for (size_t k = 0; k < r; ++k) dims.insert(static_cast<int64_t>(k));
    for (int64_t d : listed) dims.insert(normDim(n, d, r));
  }
  return dims;
}

// x read as rows of its reduced dims (trailingSource). A rank-0 x is its own reduction:
// the output is defined here as x cast, and nullopt returned.
std::optional<Lowerer::RowSource> Lowerer::reductionSource(Node& n, const GenOut& g, Value* x,
                                                           const std::set<int64_t>& dims) {
  if (x->type.shape.empty()) {
    prepareGroup(n, {g.osh, 0}, false);
    define(g.out, gCast(operand(x, n), g.odt, g.osh, g.o));
    return std::nullopt;
  }
  RowSource s;
  s.k = static_cast<int>(dims.size());
  s.id = trailingSource(n, x, dims, &s.shape);
  return s;
}

// sum, mean, amax, amin, max, min (a `dtype` argument casts first; integer sums in i64).
void Lowerer::lowerReduction(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  Value* x = tensorArg(n, "self");
  auto src = reductionSource(n, g, x, reducedDims(n, x));
  if (!src) return;
  std::string kind = (t.find("sum") != std::string::npos)    ? "sum"
                     : (t.find("mean") != std::string::npos) ? "mean"
                     : (t.find("max") != std::string::npos)  ? "max"
                                                             : "min";
  int in = src->id;
  if (auto dt = dtypeArg(n, "dtype")) in = gCast(src->id, *dt, src->shape, g.o);
  if (kind == "sum" && !ir::isFloating(cg_.node(in).dtype) && cg_.node(in).dtype != DType::I64)
    in = gCast(in, DType::I64, src->shape, g.o);
  int red = gReduce(kind, in, src->k, g.odt, g.osh, g.o);
  if (in != src->id) member(in);
  define(g.out, red);
}

// any / all: whether some / every element of a row is nonzero, as the max / min of x != 0
// (bool, or u8 for a u8 input: the output's dtype). No dim, or dim=None: every dim.
void Lowerer::lowerAnyAll(Node& n, const GenOut& g) {
  const std::string& o = g.o;
  Value* x = tensorArg(n, "self");
  if (!x) unsupported(n, "missing input tensor");
  const Attr* dim = arg(n, "dim");
  std::set<int64_t> dims;
  if (!dim || dim->isNone() || intList(n, "dim").empty())
    for (size_t k = 0; k < x->type.shape.size(); ++k) dims.insert(static_cast<int64_t>(k));
  else
    for (int64_t d : intList(n, "dim")) dims.insert(normDim(n, d, x->type.shape.size()));
  // A rank-0 input is its own row; nonzero-ness still has to be taken.
  if (x->type.shape.empty()) {
    prepareGroup(n, {g.osh, 0}, false);
    int nz = gBin("ne", operand(x, n), constNum(0, DType::I32), DType::BOOL, {}, o);
    member(nz);
    define(g.out, gCast(nz, g.odt, g.osh, o));
    return;
  }
  auto src = reductionSource(n, g, x, dims);
  const auto rs = rowShape(src->shape, src->k);
  int nz = gBin("ne", src->id, constNum(0, DType::I32), DType::BOOL, src->shape, o);
  int wide = gCast(nz, DType::I32, src->shape, o);
  int red = gReduce(n.target.find("any") != std::string::npos ? "max" : "min", wide, src->k, DType::I32, rs, o);
  for (int id : {nz, wide}) member(id);
  defineReducedRow(g, red, rs);
}

// max/min.dim: with their indices used, the arg-extreme rule; else a plain reduction.
void Lowerer::lowerMaxMinDim(Node& n, const GenOut& g) {
  bool indices_used = n.numOutputs() > 1 && n.output(1) && n.output(1)->numUses() > 0;
  if (indices_used) return lowerArgExtreme(n, g);
  lowerReduction(n, g);
}

// softmax / log_softmax over the last dim, in f32 (f64 for f64 input), rounded once.
void Lowerer::lowerSoftmax(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  const std::string& o = g.o;
  Value* x = tensorArg(n, "self");
  const auto& ish = x->type.shape;
  std::set<int64_t> dims = reducedDims(n, x);
  if (*dims.begin() != static_cast<int64_t>(ish.size()) - 1)
    unsupported(n, "softmax over a dimension other than the last");
  auto src = reductionSource(n, g, x, dims);
  if (!src) return;
  bool log = t == "aten.log_softmax.int" || t == "aten._log_softmax.default";
  DType ct = cg_.node(src->id).dtype == DType::F64 ? DType::F64 : DType::F32;
  auto rs = rowShape(ish, 1);
  int xf = gCast(src->id, ct, ish, o);
  int mx = gReduce("max", xf, 1, ct, rs, o);
  int sh = gBin("sub", xf, mx, ct, ish, o);
  int e = gUnary("exp", sh, ct, ish, o);
  int s = gReduce("sum", e, 1, ct, rs, o);
  int res = log ? gBin("sub", sh, gUnary("log", s, ct, rs, o), ct, ish, o) : gBin("div", e, s, ct, ish, o);
  for (int id : {xf, mx, sh, e, s}) member(id);
  define(g.out, gCast(res, g.odt, g.osh, o));
}

// The 2-norm: sqrt(sum(x^2)) in f32 (f64 for f64 input), rounded once.
void Lowerer::lowerVectorNorm(Node& n, const GenOut& g) {
  const std::string& o = g.o;
  Value* x = tensorArg(n, "self");
  auto src = reductionSource(n, g, x, reducedDims(n, x));
  if (!src) return;
  if (num(n, "ord", 2.0) != 2.0) unsupported(n, "vector norms other than ord=2");
  DType ct = cg_.node(src->id).dtype == DType::F64 ? DType::F64 : DType::F32;
  auto rs = rowShape(src->shape, src->k);
  int xf = gCast(src->id, ct, src->shape, o);
  int sq = gUnary("square", xf, ct, src->shape, o);
  int sm = gReduce("sum", sq, src->k, ct, rs, o);
  int res = gUnary("sqrt", sm, ct, rs, o);
  for (int id : {xf, sq, sm}) member(id);
  defineReducedRow(g, res, rs);
}

// m + log(sum(exp(x - m))) with m the row maximum, taken as 0 when infinite (a row of -inf
// gives -inf, not NaN), in f32 (f64 for f64 input) as torch computes it.
void Lowerer::lowerLogSumExp(Node& n, const GenOut& g) {
  const std::string& o = g.o;
  Value* x = tensorArg(n, "self");
  auto src = reductionSource(n, g, x, reducedDims(n, x));
  if (!src) return;
  DType ct = cg_.node(src->id).dtype == DType::F64 ? DType::F64 : DType::F32;
  const auto& dsh = src->shape;
  auto rs = rowShape(dsh, src->k);
  int xf = gCast(src->id, ct, dsh, o);
  int mx = gReduce("max", xf, src->k, ct, rs, o);
  int m0 = gUnary("finite_or_zero", mx, ct, rs, o);
  int sh = gBin("sub", xf, m0, ct, dsh, o);
  int e = gUnary("exp", sh, ct, dsh, o);
  int sm = gReduce("sum", e, src->k, ct, rs, o);
  int res = gBin("add", gUnary("log", sm, ct, rs, o), m0, ct, rs, o);
  for (int id : {xf, mx, m0, sh, e, sm}) member(id);
  defineReducedRow(g, res, rs);
}

// Defines the output from a row result `res` of shape `rs` computed in a wider type: rounded
// once to the output dtype, reshaped to the output's shape (keepdim or not).
void Lowerer::defineReducedRow(const GenOut& g, int res, const std::vector<SymExpr>& rs) {
  member(res);
  int cast = gCast(res, g.odt, rs, g.o);
  if (cast != res) member(cast);
  define(g.out, gnode("remap", "reshape", {cast}, g.odt, g.osh, g.o));
}

// ---------------------------------------------------------------------------------- other rules

namespace {

// Functions torch computes in floating point whatever the input (an integer tensor's sigmoid
// is a float tensor): an integral compute type becomes f32 for them, and the result is cast to
// the graph's output dtype.
bool floatingFunction(const std::string& f) {
  static const std::set<std::string> kFloating = {
      "exp",   "log",    "sqrt", "rsqrt", "reciprocal", "sin",         "cos",   "tanh",  "erf",  "sigmoid",
      "silu",  "log1p",  "expm1", "exp2", "log2",       "log10",       "tan",   "atan",  "sinh", "cosh",
      "softplus", "log_sigmoid"};
  return kFloating.count(f) > 0;
}

bool bitwiseFunction(const std::string& f) { return f == "bnot" || f == "band" || f == "bor" || f == "bxor"; }

}  // namespace

void Lowerer::lowerUnary(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  int a = operand(valArg(n, "self"), n);
  std::string f = unaryFunctions().at(n.target);
  DType ct = ir::isFloating(odt) ? odt : cg_.node(a).dtype;
  if (f == "not") ct = DType::BOOL;
  if (floatingFunction(f) && !ir::isFloating(ct)) ct = DType::F32;
  if (bitwiseFunction(f) && (ir::isFloating(ct) || ir::isFloating(cg_.node(a).dtype)))
    unsupported(n, fmt::format("a bitwise op on {} (torch takes integer and bool tensors only)", ir::dtypeName(ct)));
  int res = gUnary(f, a, ct == DType::BOOL && f != "not" && f != "bnot" ? odt : ct, osh, o);
  if (f == "softplus") cg_.node(res).f = {num(n, "beta", 1.0), num(n, "threshold", 20.0)};
  if (f == "leaky_relu") cg_.node(res).f = {num(n, "negative_slope", 0.01)};
  if (f == "round_decimals") cg_.node(res).f = {static_cast<double>(intArg(n, "decimals", 0))};
  define(out, gCast(res, odt, osh, o));
}

void Lowerer::lowerGelu(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  int a = operand(valArg(n, "self"), n);
  define(out, gUnary(str(n, "approximate", "none") == "tanh" ? "gelu_tanh" : "gelu", a, odt, osh, o));
}

void Lowerer::lowerBinary(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  int a = scalarOrTensor(n, "self");
  int c = scalarOrTensor(n, t.find("pow") != std::string::npos ? "exponent" : "other");
  std::string f = binaryFunctions().at(n.target);
  DType ct = odt;
  if (f == "eq" || f == "ne" || f == "lt" || f == "le" || f == "gt" || f == "ge" || f == "and" || f == "or" ||
      f == "xor")
    ct = DType::BOOL;
  // Floating functions of two arguments: torch computes integer inputs in the default float
  // dtype, so a graph that says otherwise is malformed.
  if ((f == "atan2" || f == "hypot") && !ir::isFloating(odt))
    unsupported(n, fmt::format("{} with a {} result (torch computes it in floating point)", f, ir::dtypeName(odt)));
  if (bitwiseFunction(f) &&
      (ir::isFloating(ct) || ir::isFloating(cg_.node(a).dtype) || ir::isFloating(cg_.node(c).dtype)))
    unsupported(n, fmt::format("a bitwise op on {} (torch takes integer and bool tensors only)", ir::dtypeName(ct)));
  define(out, gBin(f, a, c, ct, osh, o));
}

void Lowerer::lowerDivMode(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  int a = operand(valArg(n, "self"), n);
  int c = scalarOrTensor(n, "other");
  std::string mode = str(n, "rounding_mode", "");
  define(out, gBin(mode == "floor" ? "div_floor" : mode == "trunc" ? "div_trunc" : "div", a, c, odt, osh, o));
}

void Lowerer::lowerPowScalar(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  int a = scalarOrTensor(n, "self");
  int c = operand(valArg(n, "exponent"), n);
  define(out, gBin("pow", a, c, odt, osh, o));
}

void Lowerer::lowerAddSub(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  int a = scalarOrTensor(n, "self");  // core ATen exports write `1 - x` as sub.Tensor(self=1, other=x)
  int c = scalarOrTensor(n, "other");
  double alpha = num(n, "alpha", 1.0);
  if (alpha != 1.0) c = gBin("mul", c, constNum(alpha, DType::F64), odt, cg_.node(c).shape, o), member(c);
  bool rs = t.find("rsub") != std::string::npos;
  define(out, gBin(t.find("add") != std::string::npos ? "add" : "sub", rs ? c : a, rs ? a : c, odt, osh, o));
}

void Lowerer::lowerWhere(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  int c = operand(valArg(n, "condition"), n);
  int a = scalarOrTensor(n, "self"), b = scalarOrTensor(n, "other");
  define(out, gnode("where", "", {c, a, b}, odt, osh, o));
}

void Lowerer::lowerMaskedFill(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  int a = operand(valArg(n, "self"), n);
  int m = operand(valArg(n, "mask"), n);
  int v = scalarOrTensor(n, "value");
  define(out, gnode("where", "", {m, v, a}, odt, osh, o));
}

void Lowerer::lowerClampTensor(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  // Tensor bounds: maximum with min, then minimum with max (NaN propagates, as torch's).
  int v = operand(valArg(n, "self"), n);
  if (Value* lo = valArg(n, "min")) v = gBin("max", v, operand(lo, n), odt, osh, o);
  if (Value* hi = valArg(n, "max")) v = gBin("min", v, operand(hi, n), odt, osh, o);
  define(out, v);
}

void Lowerer::lowerClampScalar(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  int a = operand(valArg(n, "self"), n);
  int id = gnode("clamp", "", {a}, odt, osh, o);
  GNode& clamp = cg_.node(id);
  const Attr* lo = arg(n, "min");
  const Attr* hi = arg(n, "max");
  clamp.f = {lo ? lo->asDouble().value_or(0) : 0.0, hi ? hi->asDouble().value_or(0) : 0.0};
  clamp.iv = {lo ? 1 : 0, hi ? 1 : 0};
  define(out, id);
}

// Dtype casts and identity ops (an all-reduce over one rank is the identity).
void Lowerer::lowerCast(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  if (isAllReduce(n.target) && opts_.world_size > 1) unsupported(n, "no lowering for this op");
  Value* x = valArg(n, "self");
  if (!x) x = valArg(n, "a");
  if (!x) x = valArg(n, "input");
  if (!x) x = valArg(n, "tensor");
  if (!x) unsupported(n, "missing input");
  int a = operand(x, n);
  define(out, gnode("cast", "", {a}, odt, osh, o));
}

void Lowerer::lowerFill(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  double v = t.find("zeros") != std::string::npos ? 0.0 : t.find("ones") != std::string::npos ? 1.0 : 0.0;
  if (t == "aten.full.default" || t == "aten.full_like.default" || t == "aten.new_full.default")
    v = num(n, "fill_value", 0.0);
  if (t == "aten.scalar_tensor.default") v = num(n, "s", 0.0);
  if (t == "aten.fill.Scalar") v = num(n, "value", 0.0);
  int c = constNum(v, odt);
  member(c);
  define(out, gnode("remap", "expand", {c}, odt, osh, o));
}

void Lowerer::lowerArange(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  double start = 0, step = 1;
  if (t == "aten.arange.start" || t == "aten.arange.start_step") start = num(n, "start", 0);
  if (t == "aten.arange.start_step") step = num(n, "step", 1);
  if (t == "prims.iota.default") {
    start = static_cast<double>(hint(requiredSize(n, "start")));
    step = static_cast<double>(hint(requiredSize(n, "step")));
  }
  int id = gnode("iota", "", {}, odt, osh, o);
  cg_.node(id).f = {start, step};
  cg_.node(id).iv = {0};
  define(out, id);
}

void Lowerer::lowerCopy(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  // functional copy_: src's values broadcast to self's shape in self's dtype (self is only
  // the destination's metadata)
  Value* src = tensorArg(n, "src");
  if (!src) unsupported(n, "a tensor argument is missing");
  checkBroadcastsTo(n, src->type.shape, osh, "src");
  int v = gnode("remap", "expand", {operand(src, n)}, src->type.dtype, osh, o);
  if (src->type.dtype != odt) {
    member(v);
    v = gnode("cast", "", {v}, odt, osh, o);
  }
  define(out, v);
}

void Lowerer::lowerEye(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  // ones on the main diagonal of an [n, m] matrix
  if (osh.size() != 2) unsupported(n, "eye must produce a matrix");
  define(out, gnode("eye", "", {}, odt, osh, o));
}

void Lowerer::lowerReshape(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = valArg(n, "self");
  if (t == "aten.as_strided.default") {
    // A computed value owns contiguous storage in its kernel's index space, so an as_strided
    // that reads all of it with contiguous strides from offset 0 is its reshape (torch 1.13's
    // _reshape_alias, respelled to as_strided, is this). A view (permute, slice, ...) shares
    // its base's storage, which as_strided would read instead: refused, as is any other.
    const Attr* offset = arg(n, "storage_offset");
    const bool from_start = !offset || offset->isNone() || offset->asInt().value_or(-1) == 0;
    const Node* producer = x ? x->producer() : nullptr;
    const bool owns_storage = producer && !aliasForm(producer->target);
    if (!x || !owns_storage || !from_start || sizeList(n, "stride") != contiguousStrides(osh) ||
        !(numelOf(osh) == numelOf(x->type.shape)))
      unsupported(n,
                  "as_strided of a computed value (only a contiguous reshape of a value that is no view can be "
                  "generated)");
  }
  define(out, gnode("remap", "reshape", {operand(x, n)}, odt, osh, o));
}

void Lowerer::lowerPermute(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "self");
  size_t r = x->type.shape.size();
  std::vector<int64_t> perm;
  if (t == "aten.permute.default") {
    for (int64_t p : intList(n, "dims")) perm.push_back(normDim(n, p, r));
    if (perm.size() != r) unsupported(n, "permutation of another rank");
  } else {
    for (size_t k = 0; k < r; ++k) perm.push_back(static_cast<int64_t>(k));
    if (r >= 2) {
      int64_t a = t == "aten.t.default" ? 0 : normDim(n, intArg(n, "dim0", 0), r);
      int64_t b = t == "aten.t.default" ? 1 : normDim(n, intArg(n, "dim1", 1), r);
      std::swap(perm[static_cast<size_t>(a)], perm[static_cast<size_t>(b)]);
    }
  }
  int id = gnode("remap", "permute", {operand(x, n)}, odt, osh, o);
  cg_.node(id).iv = perm;
  define(out, id);
}

void Lowerer::lowerSlice(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "self");
  size_t r = x->type.shape.size();
  int64_t d = normDim(n, intArg(n, "dim", 0), r);
  SymExpr start = sizeArg(n, "start").value_or(I(0));
  if (start.isInt() && start.intValue() < 0) start = start + x->type.shape[static_cast<size_t>(d)];
  SymExpr step = sizeArg(n, "step").value_or(I(1));
  if (static_cast<size_t>(d) < std::min(r, osh.size()))
    checkSliceFits(n, start, step, x->type.shape[static_cast<size_t>(d)], osh[static_cast<size_t>(d)]);
  int id = gnode("remap", "slice", {operand(x, n)}, odt, osh, o);
  cg_.node(id).iv = {d};
  cg_.node(id).sv = {start, step};
  define(out, id);
}

void Lowerer::lowerSelect(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "self");
  if (x->type.rank() == 0) unsupported(n, "select of a 0-d tensor (it has no dim to select from)");
  int64_t d = normDim(n, intArg(n, "dim", 0), x->type.shape.size());
  SymExpr idx = requiredSize(n, "index");
  if (idx.isInt() && idx.intValue() < 0) idx = idx + x->type.shape[static_cast<size_t>(d)];
  int id = gnode("remap", "select", {operand(x, n)}, odt, osh, o);
  cg_.node(id).iv = {d};
  cg_.node(id).sv = {idx};
  define(out, id);
}

void Lowerer::lowerUnsqueeze(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  int64_t d = intArg(n, "dim", 0);
  if (d < 0) d += static_cast<int64_t>(osh.size());
  int id = gnode("remap", "unsqueeze", {operand(valArg(n, "self"), n)}, odt, osh, o);
  cg_.node(id).iv = {d};
  define(out, id);
}

void Lowerer::lowerSqueeze(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "self");
  size_t r = x->type.shape.size();
  std::vector<int64_t> dims;
  for (size_t k = 0; k < r; ++k) {
    bool listed = t == "aten.squeeze.default";
    if (t == "aten.squeeze.dim") listed = normDim(n, intArg(n, "dim", 0), r) == static_cast<int64_t>(k);
    if (t == "aten.squeeze.dims")
      for (int64_t d : intList(n, "dim")) listed = listed || normDim(n, d, r) == static_cast<int64_t>(k);
    if (listed && isOne(x->type.shape[k])) dims.push_back(static_cast<int64_t>(k));
  }
  int id = gnode("remap", "squeeze", {operand(x, n)}, odt, osh, o);
  cg_.node(id).iv = dims;
  define(out, id);
}

void Lowerer::lowerExpand(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  define(out, gnode("remap", "expand", {operand(valArg(n, "self"), n)}, odt, osh, o));
}

void Lowerer::lowerSplit(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "self");
  size_t r = x->type.shape.size();
  int64_t d = normDim(n, intArg(n, "dim", 0), r);
  int src = operand(x, n);
  SymExpr start = I(0);
  for (size_t q = 0; q < n.numOutputs(); ++q) {
    Value* ov = n.output(q);
    if (t == "aten.unbind.int") {
      if (ov) {
        int id = gnode("remap", "select", {src}, ov->type.dtype, ov->type.shape, o);
        cg_.node(id).iv = {d};
        cg_.node(id).sv = {I(static_cast<int64_t>(q))};
        define(ov, id);
      }
      continue;
    }
    SymExpr len;
    if (ov)
      len = ov->type.shape[static_cast<size_t>(d)];
    else if (t == "aten.split_with_sizes.default")
      len = sizeList(n, "split_sizes").at(q);
    else if (t == "aten.split.Tensor")
      len = requiredSize(n, "split_size");
    else
      unsupported(n, "chunk with an unused output");
    if (ov && ov->numUses() > 0) {
      int id = gnode("remap", "slice", {src}, ov->type.dtype, ov->type.shape, o);
      cg_.node(id).iv = {d};
      cg_.node(id).sv = {start, I(1)};
      define(ov, id);
    }
    start = start + len;
  }
}

void Lowerer::lowerCat(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  const Attr* l = arg(n, "tensors");
  if (!l || l->kind != Attr::Kind::List) unsupported(n, "cat without a tensor list");
  int64_t d = intArg(n, "dim", 0);
  d = d < 0 ? d + static_cast<int64_t>(osh.size()) : d;
  if (d < 0 || d >= static_cast<int64_t>(osh.size()))
    unsupported(n, fmt::format("dim {} is outside the {}-D output", intArg(n, "dim", 0), osh.size()));
  std::vector<int> ins;
  for (const auto& e : l->list) {
    if (!e.isValue()) unsupported(n, "cat of a non-tensor");
    int a = operand(e.value, n);
    if (t == "aten.stack.default") {
      auto sh = cg_.node(a).shape;
      sh.insert(sh.begin() + d, I(1));
      int u = gnode("remap", "unsqueeze", {a}, cg_.node(a).dtype, sh, o);
      cg_.node(u).iv = {d};
      member(u);
      a = u;
    }
    ins.push_back(gCast(a, odt, cg_.node(a).shape, o));
    if (ins.back() != a) member(ins.back());
  }
  int id = gnode("cat", "", ins, odt, osh, o);
  cg_.node(id).iv = {d};
  define(out, id);
}

void Lowerer::lowerRepeat(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "self");
  if (sizeList(n, "repeats").size() < x->type.shape.size()) unsupported(n, "fewer repeats than dimensions");
  define(out, gnode("remap", "repeat", {operand(x, n)}, odt, osh, o));
}

// flip: each listed dim read backwards (a remap; iv = the dims).
void Lowerer::lowerFlip(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "self");
  if (osh != x->type.shape) unsupported(n, "a flip's output must have its input's shape");
  std::set<int64_t> dims;
  for (int64_t d : intList(n, "dims"))
    if (!dims.insert(normDim(n, d, x->type.shape.size())).second)
      unsupported(n, fmt::format("dim {} appears twice in a flip's dims (torch refuses it)", d));
  if (x->type.shape.empty()) dims.clear();  // a 0-d tensor flips to itself
  int id = gnode("remap", "flip", {operand(x, n)}, odt, osh, o);
  cg_.node(id).iv.assign(dims.begin(), dims.end());
  define(out, id);
}

// roll: output index i along a rolled dim reads (i - shift) mod size (iv = dim, shift pairs);
// without dims the flattened tensor rolls by its one shift. A dim listed twice rolls by the
// sum of its shifts (torch rolls once per entry); shifts are reduced modulo static sizes.
void Lowerer::lowerRoll(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "self");
  if (osh != x->type.shape) unsupported(n, "a roll's output must have its input's shape");
  std::vector<int64_t> shifts = intList(n, "shifts"), dims = intList(n, "dims");
  int src = operand(x, n);
  std::vector<SymExpr> rolled_shape = x->type.shape;
  if (dims.empty()) {
    if (shifts.size() != 1) unsupported(n, "a roll without dims takes exactly one shift");
    rolled_shape = {numelOf(x->type.shape)};
    src = gnode("remap", "reshape", {src}, x->type.dtype, rolled_shape, o);
    member(src);
    dims = {0};
  } else {
    if (shifts.size() != dims.size()) unsupported(n, "a roll needs one shift per dim");
    for (int64_t& d : dims) d = normDim(n, d, x->type.shape.size());
    if (x->type.shape.empty()) unsupported(n, "a roll of a 0-d tensor along a dim");
  }
  constexpr int64_t kMaxShift = int64_t{1} << 62;  // (i - shift) stays in range in the kernel
  std::map<int64_t, int64_t> shift_of;
  for (size_t k = 0; k < dims.size(); ++k) {
    const SymExpr& size = rolled_shape[static_cast<size_t>(dims[k])];
    int64_t s = shifts[k];
    if (size.isInt() && size.intValue() > 0) s %= size.intValue();
    int64_t& total = shift_of[dims[k]];
    if (s < -kMaxShift || s > kMaxShift || __builtin_add_overflow(total, s, &total) || total < -kMaxShift ||
        total > kMaxShift)
      unsupported(n, fmt::format("a roll shift of {} along a dim of symbolic size (at most 2^62)", shifts[k]));
  }
  int id = gnode("remap", "roll", {src}, odt, rolled_shape, o);
  for (const auto& [d, s] : shift_of) cg_.node(id).iv.insert(cg_.node(id).iv.end(), {d, s});
  if (rolled_shape != osh) {
    member(id);
    id = gnode("remap", "reshape", {id}, odt, osh, o);
  }
  define(out, id);
}

void Lowerer::lowerRepeatInterleave(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "self");
  int src = operand(x, n);
  int64_t d = 0;
  if (arg(n, "dim")) {
    d = normDim(n, intArg(n, "dim", 0), x->type.shape.size());
  } else if (x->type.shape.size() != 1) {  // dim=None repeats the flattened input
    std::vector<SymExpr> flat{numelOf(x->type.shape)};
    src = gnode("remap", "reshape", {src}, x->type.dtype, flat, o);
    member(src);
  }
  int id = gnode("remap", "repeat_interleave", {src}, odt, osh, o);
  cg_.node(id).iv = {d};
  cg_.node(id).sv = {sizeArg(n, "repeats").value_or(I(1))};
  define(out, id);
}

void Lowerer::lowerScatter(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "self");
  Value* index = valArg(n, "index");
  if (!index) unsupported(n, "missing index tensor");
  size_t r = x->type.shape.size();
  if (r == 0 || osh.size() != r)
    unsupported(n, fmt::format("an output of rank {} for self of rank {} (both at least 1 and equal)", osh.size(), r));
  if (!index->isTensor() || !ir::isIntegral(index->type.dtype, /*include_bool=*/false))
    unsupported(n, fmt::format("an index of dtype {} (indices are integers)", ir::dtypeName(index->type.dtype)));
  int64_t d = normDim(n, intArg(n, "dim", 0), r);
  bool index_add = t == "aten.index_add.default";
  if (index_add ? index->type.shape.size() != 1 : index->type.shape.size() != r)
    unsupported(n, "index tensor of an unexpected rank");
  if (t == "aten.scatter.src" || t == "aten.scatter.value")
    if (const Attr* red = arg(n, "reduce"); red) unsupported(n, "scatter with a reduce mode");
  // The generated kernel reads src at index's coordinates and self's other dims: index may
  // not be larger than either (torch's rule), else the kernel would read out of bounds.
  auto notLarger = [&](const SymExpr& a, const SymExpr& b) {
    return a == b || (a.isInt() && b.isInt() && a.intValue() <= b.intValue());
  };
  Value* srcv = t == "aten.scatter.value" ? nullptr : valArg(n, index_add ? "source" : "src");
  if (!index_add) {
    for (size_t k = 0; k < r; ++k) {
      const SymExpr& ik = index->type.shape[k];
      if (srcv && (srcv->type.shape.size() != r || !notLarger(ik, srcv->type.shape[k])))
        unsupported(n, "index is larger than src");
      if (static_cast<int64_t>(k) != d && !notLarger(ik, x->type.shape[k]))
        unsupported(n, "index is larger than self outside the scatter dim");
    }
  } else if (!srcv || srcv->type.shape.size() != r || !notLarger(index->type.shape[0], srcv->type.shape[d])) {
    unsupported(n, "index_add source does not match the index");
  }
  int src = t == "aten.scatter.value" ? scalarOrTensor(n, "value") : operand(srcv, n);
  int id = gnode("scatter", "", {operand(x, n), operand(index, n), src}, odt, osh, o);
  cg_.node(id).iv = {d, index_add ? 2 : t == "aten.scatter_add.default" ? 1 : 0};
  cg_.node(id).f = {num(n, "alpha", 1.0)};
  define(out, id);
}

void Lowerer::lowerIndexPut(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  // self[idx] = values (or +=, accumulate) with one 1-D index tensor on dim 0 (token
  // permutation back into a [tokens, hidden] buffer): index_add / index_copy along dim 0.
  Value* x = tensorArg(n, "self");
  Value* values = tensorArg(n, "values");
  const Attr* l = arg(n, "indices");
  if (!l || l->kind != Attr::Kind::List || l->list.size() != 1 || !l->list[0].isValue())
    unsupported(n, "index_put with other than one index tensor");
  Value* index = l->list[0].value;
  std::vector<SymExpr> want = x->type.shape;
  if (index->type.shape.size() != 1 || want.empty()) unsupported(n, "index_put with an index that is not 1-D");
  want[0] = index->type.shape[0];
  if (index->type.dtype == DType::BOOL || values->type.shape != want)
    unsupported(n, "index_put with a boolean index or values that are not [index, ...]");
  if (!index->isTensor() || !ir::isIntegral(index->type.dtype, /*include_bool=*/false) || osh.size() != want.size())
    unsupported(n, fmt::format("index_put with an index of dtype {} or an output of rank {} (need integers, rank {})",
                               ir::dtypeName(index->type.dtype), osh.size(), want.size()));
  int id = gnode("scatter", "", {operand(x, n), operand(index, n), operand(values, n)}, odt, osh, o);
  cg_.node(id).iv = {0, flag(n, "accumulate", false) ? 2 : 3};
  cg_.node(id).f = {1.0};
  define(out, id);
}

void Lowerer::lowerGroupedMm(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  // MoE expert GEMMs, self [T, K] rows grouped by offs over mat2 [G, K, N]: codegen's
  // grouped_mm node (a generated dot product per output element, f64 accumulation as the
  // interpreter's; correct for any routing, not fast).
  Value* a = tensorArg(n, "self");
  Value* b = tensorArg(n, "mat2");
  Value* offs = valArg(n, "offs");
  if (!a || !b || !offs || offs->kind != ir::ValueKind::Tensor || valArg(n, "bias"))
    unsupported(n, "only self [T, K], mat2 [G, K, N] and offs [G] without bias are supported");
  if (a->type.shape.size() != 2 || b->type.shape.size() != 3 || offs->type.shape.size() != 1)
    unsupported(n, "only self [T, K], mat2 [G, K, N] and offs [G] are supported");
  // The generated kernel reads within these shapes only when they agree.
  if (a->type.shape[1] != b->type.shape[1] || offs->type.shape[0] != b->type.shape[0] ||
      osh != std::vector<SymExpr>{a->type.shape[0], b->type.shape[2]})
    unsupported(n, "self, mat2, offs and the output shape do not agree");
  int id = gnode("grouped_mm", "", {operand(a, n), operand(b, n), operand(offs, n)}, odt, osh, o);
  define(out, id);
}

void Lowerer::lowerHistc(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  // counts per bin (MoE routing: tokens per expert): codegen's histc node
  Value* x = tensorArg(n, "self");
  if (!x || x->kind != ir::ValueKind::Tensor) unsupported(n, "missing input tensor");
  int64_t bins = intArg(n, "bins", 100);
  if (bins <= 0) unsupported(n, "bins must be positive");
  int id = gnode("histc", "", {operand(x, n)}, odt, osh, o);
  cg_.node(id).iv = {bins};
  cg_.node(id).f = {num(n, "min", 0.0), num(n, "max", 0.0)};
  define(out, id);
}

// The generated pad kernel reads its input at the output index shifted by the leading pads,
// bounds-checked only in the padded dims: the input must have the output's rank, the other
// dims must be the output's, and each padded dim must be the input's plus both pads.
void Lowerer::checkPadShapes(const Node& n, const Value* x, const std::vector<SymExpr>& pad,
                             const std::vector<SymExpr>& out_shape) {
  if (!x || x->kind != ir::ValueKind::Tensor) unsupported(n, "missing input");
  const std::vector<SymExpr>& in = x->type.shape;
  if (pad.size() % 2 != 0 || pad.size() > 2 * in.size() || in.size() != out_shape.size())
    unsupported(n, fmt::format("{} pad values for a {}-D input and a {}-D output", pad.size(), in.size(),
                               out_shape.size()));
  for (size_t d = 0; d < in.size(); ++d) {
    const size_t p = in.size() - 1 - d;  // pads come from the last dim
    const SymExpr want = 2 * p < pad.size() ? in[d] + pad[2 * p] + pad[2 * p + 1] : in[d];
    if (out_shape[d] != want) unsupported(n, fmt::format("output dim {} does not follow from the input and the pads", d));
  }
}

void Lowerer::lowerPad(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  if (str(n, "mode", "constant") != "constant") unsupported(n, "only constant padding is supported");
  std::vector<SymExpr> pad = sizeList(n, "pad");
  Value* x = valArg(n, "self");
  checkPadShapes(n, x, pad, osh);
  int id = gnode("pad", "", {operand(x, n)}, odt, osh, o);
  cg_.node(id).sv = pad;
  cg_.node(id).f = {num(n, "value", 0.0)};
  define(out, id);
}

void Lowerer::lowerConstantPadNd(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  std::vector<SymExpr> pad = sizeList(n, "pad");
  Value* x = valArg(n, "self");
  checkPadShapes(n, x, pad, osh);
  int id = gnode("pad", "", {operand(x, n)}, odt, osh, o);
  cg_.node(id).sv = pad;
  cg_.node(id).f = {num(n, "value", 0.0)};
  define(out, id);
}

void Lowerer::lowerEmbedding(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* weight = valArg(n, "weight");
  // The kernel checks the token ids against the weight's rows (codegen.cc indexCheckSource).
  if (weight && weight->isTensor() && weight->type.rank() != 2)
    unsupported(n, fmt::format("embedding weight must be 2-D, got rank {}", weight->type.rank()));
  int w = operand(weight, n);
  int ix = operand(valArg(n, "indices"), n);
  int id = gnode("gather", "", {w, ix}, odt, osh, o);
  cg_.node(id).iv = {0, 2};
  define(out, id);
}

void Lowerer::lowerGather(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "self");
  Value* index = tensorArg(n, "index");
  const bool select = t == "aten.index_select.default";
  // The kernel reads the index at the output position (gather: same rank as self and the
  // output) or at the selected dim (index_select: a vector).
  if (x->type.rank() == 0 || osh.size() != x->type.rank())
    unsupported(n, fmt::format("an output of rank {} for self of rank {} (both at least 1 and equal)", osh.size(),
                               x->type.rank()));
  if (index->type.rank() != (select ? 1 : x->type.rank()))
    unsupported(n, fmt::format("an index of rank {} (need {})", index->type.rank(), select ? 1 : x->type.rank()));
  if (!ir::isIntegral(index->type.dtype, /*include_bool=*/false))
    unsupported(n, fmt::format("an index of dtype {} (indices are integers)", ir::dtypeName(index->type.dtype)));
  int64_t d = normDim(n, intArg(n, "dim", 0), x->type.shape.size());
  int id = gnode("gather", "", {operand(x, n), operand(index, n)}, odt, osh, o);
  cg_.node(id).iv = {d, select ? 1 : 3};
  define(out, id);
}

void Lowerer::lowerIndex(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "self");
  const Attr* l = arg(n, "indices");
  if (!l || l->kind != Attr::Kind::List) unsupported(n, "index without an index list");
  if (l->list.size() > x->type.rank())
    unsupported(n, fmt::format("{} indices for a tensor of rank {}", l->list.size(), x->type.rank()));
  int64_t first = -1, last = -1;
  size_t index_rank = 0;
  std::vector<int> ins{operand(x, n)};
  for (size_t k = 0; k < l->list.size(); ++k) {
    const Attr& e = l->list[k];
    if (e.isNone()) continue;
    if (!e.isValue() || !e.value->isTensor()) unsupported(n, "non-tensor index");
    if (e.value->type.dtype == DType::BOOL || e.value->type.dtype == DType::U8) unsupported(n, "boolean mask indexing");
    if (!ir::isIntegral(e.value->type.dtype, /*include_bool=*/false))
      unsupported(n, fmt::format("an index tensor of dtype {} (indices are integers)", ir::dtypeName(e.value->type.dtype)));
    if (first < 0) first = static_cast<int64_t>(k);
    if (last >= 0 && last != static_cast<int64_t>(k) - 1) unsupported(n, "non-adjacent advanced indices");
    last = static_cast<int64_t>(k);
    index_rank = std::max(index_rank, e.value->type.rank());
    ins.push_back(operand(e.value, n));
  }
  if (first < 0) unsupported(n, "index without index tensors");
  // The result: the dims before the indexed ones, the indices' broadcast shape, the dims after.
  const size_t indexed = ins.size() - 1;
  if (osh.size() != x->type.rank() - indexed + index_rank)
    unsupported(n, fmt::format("an output of rank {} (indexing rank {} by {} index tensors of rank {} gives rank {})",
                               osh.size(), x->type.rank(), indexed, index_rank, x->type.rank() - indexed + index_rank));
  int id = gnode("index", "", ins, odt, osh, o);
  cg_.node(id).iv = {first};
  define(out, id);
}

void Lowerer::lowerSliceScatter(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "self");
  if (x->type.rank() == 0 || osh.size() != x->type.rank())
    unsupported(n, fmt::format("an output of rank {} for self of rank {} (both at least 1 and equal)", osh.size(),
                               x->type.rank()));
  int64_t d = normDim(n, intArg(n, "dim", 0), x->type.shape.size());
  SymExpr start = sizeArg(n, "start").value_or(I(0));
  SymExpr end = sizeArg(n, "end").value_or(x->type.shape[static_cast<size_t>(d)]);
  if (hint(end) > hint(x->type.shape[static_cast<size_t>(d)])) end = x->type.shape[static_cast<size_t>(d)];
  int id = gnode("slice_scatter", "", {operand(x, n), operand(valArg(n, "src"), n)}, odt, osh, o);
  cg_.node(id).iv = {d};
  cg_.node(id).sv = {start, end, sizeArg(n, "step").value_or(I(1))};
  define(out, id);
}

void Lowerer::lowerSelectScatter(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  // out = self with out[.., index, ..] (along dim) = src
  Value* x = tensorArg(n, "self");
  Value* src = tensorArg(n, "src");
  if (!x || !src) unsupported(n, "a tensor argument is missing");
  size_t r = x->type.shape.size();
  if (r == 0 || src->type.shape.size() + 1 != r) unsupported(n, "src must have one dimension fewer than self");
  int64_t d = normDim(n, intArg(n, "dim", 0), r);
  std::vector<SymExpr> row = x->type.shape;
  row.erase(row.begin() + d);
  bool same = src->type.shape.size() == row.size();  // read at row coordinates: equal at the hints
  for (size_t k = 0; same && k < row.size(); ++k)
    same = src->type.shape[k] == row[k] || hint(src->type.shape[k]) == hint(row[k]);
  if (!same) unsupported(n, "src's shape is not self's without dim");
  SymExpr idx = requiredSize(n, "index");
  if (idx.isInt() && idx.intValue() < 0) idx = idx + x->type.shape[static_cast<size_t>(d)];
  if (idx.isInt() && (idx.intValue() < 0 || idx.intValue() >= hint(x->type.shape[static_cast<size_t>(d)])))
    unsupported(n, "index out of range of the dimension");
  int id = gnode("select_scatter", "", {operand(x, n), operand(src, n)}, odt, osh, o);
  cg_.node(id).iv = {d};
  cg_.node(id).sv = {idx};
  define(out, id);
}

void Lowerer::lowerCumsum(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "self");
  int id = gnode("cumsum", "", {operand(x, n)}, odt, osh, o);
  cg_.node(id).iv = {normDim(n, intArg(n, "dim", 0), x->type.shape.size())};
  define(out, id);
}

void Lowerer::lowerDiff(Node& n, const GenOut& g) {
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  // diff(x, n=1, dim, prepend, append): out[i] = y[i+1] - y[i] along dim, where
  // y = cat(prepend, x, append); generated as the difference of two slices of the concatenation:
  //   prepend ─┐                 ┌─ slice(1:)  ─┐
  //   x ───────┼─ cat(dim) = y ──┤              ├─ sub ─ out
  //   append ──┘                 └─ slice(:-1) ─┘
  if (intArg(n, "n", 1) != 1) unsupported(n, "diff with n != 1");
  Value* x = tensorArg(n, "self");
  int64_t d = normDim(n, intArg(n, "dim", -1), x->type.shape.size());
  std::vector<int> parts;
  std::vector<SymExpr> ysh = x->type.shape;
  ysh[static_cast<size_t>(d)] = I(0);
  for (const char* name : {"prepend", "self", "append"}) {
    Value* v = valArg(n, name);
    if (!v) continue;
    if (v->type.shape.size() != x->type.shape.size()) unsupported(n, "diff with a prepend/append of another rank");
    int a = operand(v, n);
    parts.push_back(gCast(a, x->type.dtype, cg_.node(a).shape, o));
    if (parts.back() != a) member(parts.back());
    ysh[static_cast<size_t>(d)] = ysh[static_cast<size_t>(d)] + v->type.shape[static_cast<size_t>(d)];
  }
  int y = parts.front();
  if (parts.size() > 1) {
    y = gnode("cat", "", parts, x->type.dtype, ysh, o);
    cg_.node(y).iv = {d};
    member(y);
  }
  int hi = gnode("remap", "slice", {y}, x->type.dtype, osh, o);
  cg_.node(hi).iv = {d};
  cg_.node(hi).sv = {I(1), I(1)};
  member(hi);
  int lo = gnode("remap", "slice", {y}, x->type.dtype, osh, o);
  cg_.node(lo).iv = {d};
  cg_.node(lo).sv = {I(0), I(1)};
  member(lo);
  DType ct = x->type.dtype == DType::BOOL ? DType::BOOL : odt;
  define(out, gBin(ct == DType::BOOL ? "bxor" : "sub", hi, lo, odt, osh, o));
}

void Lowerer::lowerTriangle(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  int id = gnode("tri", "", {operand(valArg(n, "self"), n)}, odt, osh, o);
  cg_.node(id).iv = {t == "aten.triu.default" ? 1 : 0};
  cg_.node(id).sv = {I(intArg(n, "diagonal", 0))};
  define(out, id);
}

void Lowerer::lowerTopkSort(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  // values and indices: the element of each rank (codegen's topk node)
  Value* x = tensorArg(n, "self");
  if (!x || x->kind != ir::ValueKind::Tensor) unsupported(n, "missing input tensor");
  size_t r = x->type.shape.size();
  if (r == 0) unsupported(n, "rank-0 input");
  int64_t d = normDim(n, intArg(n, "dim", -1), r);
  bool largest = t == "aten.topk.default" ? flag(n, "largest", true) : flag(n, "descending", false);
  prepareGroup(n, {osh, 0}, true);  // reads other positions: an index remap of its operand
  int src = operand(x, n);
  for (size_t q = 0; q < 2 && q < n.numOutputs(); ++q) {
    Value* ov = n.output(q);
    if (!ov) continue;
    int id = gnode("topk", "", {src}, ov->type.dtype, ov->type.shape, o);
    cg_.node(id).iv = {d, largest ? 1 : 0, static_cast<int64_t>(q)};
    define(ov, id);
  }
}

void Lowerer::lowerArgExtreme(Node& n, const GenOut& g) {
  const std::string& t = n.target;
  [[maybe_unused]] const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "self");
  if (x->type.shape.empty()) unsupported(n, "rank-0 input");
  bool arg_only = t.rfind("aten.arg", 0) == 0;
  prepareGroup(n, {osh, 0}, true);
  int src = operand(x, n);
  std::vector<SymExpr> xs = x->type.shape;
  int64_t d = 0;
  if (arg(n, "dim")) {
    d = normDim(n, intArg(n, "dim", 0), xs.size());
  } else {  // argmax over all elements: of the flattened input
    xs = {numelOf(xs)};
    src = gnode("remap", "reshape", {src}, x->type.dtype, xs, o);
    member(src);
  }
  std::vector<SymExpr> ks = xs;
  ks[static_cast<size_t>(d)] = I(1);
  for (size_t q = 0; q < n.numOutputs() && q < 2; ++q) {
    Value* ov = n.output(q);
    if (!ov) continue;
    int id = gnode("topk", "", {src}, ov->type.dtype, ks, o);
    cg_.node(id).iv = {d, t.find("max") != std::string::npos ? 1 : 0, arg_only || q == 1 ? 1 : 0, 1};
    if (ov->type.shape != ks) {
      member(id);
      id = gnode("remap", "reshape", {id}, ov->type.dtype, ov->type.shape, o);
    }
    define(ov, id);
  }
}

// One spatial dim of a convolution: the generated kernel computes each window position
// `i * stride - pad + k * dilation` in int64, so the parameters must fit int32 (with every
// tensor dim far below 2^32 elements the sum cannot wrap), and a static output length must be
// the one they give (ir::checkedConvSpan / stride + 1).
void Lowerer::checkConvWindow(const Node& n, const SymExpr& in, const SymExpr& kernel, const SymExpr& out,
                              int64_t stride, int64_t pad, int64_t dil) {
  constexpr int64_t kMaxParam = std::numeric_limits<int32_t>::max();
  if (stride > kMaxParam || pad > kMaxParam || dil > kMaxParam)
    unsupported(n, fmt::format("stride {}, padding {} and dilation {} must fit int32", stride, pad, dil));
  if (!in.isInt() || !kernel.isInt() || !out.isInt()) return;
  const std::optional<int64_t> span = ir::checkedConvSpan(in.intValue(), kernel.intValue(), pad, dil);
  if (!span || *span < 0 || out.intValue() != *span / stride + 1)
    unsupported(n, fmt::format("output length {} does not follow from input length {}, kernel {}, stride {}, padding {} "
                               "and dilation {}",
                               out.intValue(), in.intValue(), kernel.intValue(), stride, pad, dil));
}

// Convolutions (not transposed, batched, any number of spatial dims; the depthwise causal
// conv1d of Mamba-style mixers): codegen's conv node, a generated sum over the group's input
// channels and the kernel window per output element.
void Lowerer::lowerConvolution(Node& n, const GenOut& g) {
  const auto& [out, odt, osh, o] = g;
  Value* x = tensorArg(n, "input");
  Value* w = tensorArg(n, "weight");
  Value* bias = valArg(n, "bias");
  if (!x || !w) unsupported(n, "missing input or weight");
  if (flag(n, "transposed", false)) unsupported(n, "transposed convolution");
  const size_t r = x->type.shape.size();
  if (r < 3 || w->type.shape.size() != r) unsupported(n, "only batched input [N, C, *spatial] is supported");
  const size_t sd = r - 2;
  auto perDim = [&](const char* name, int64_t def) {
    std::vector<int64_t> v = arg(n, name) ? intList(n, name) : std::vector<int64_t>{def};
    if (v.size() == 1) v.assign(sd, v[0]);
    if (v.size() != sd) unsupported(n, std::string("argument '") + name + "' does not match the spatial dims");
    return v;
  };
  std::vector<int64_t> stride = perDim("stride", 1), pad = perDim("padding", 0), dil = perDim("dilation", 1);
  int64_t groups = intArg(n, "groups", 1);
  const SymExpr& cout = w->type.shape[0];
  if (groups <= 0 || !cout.isInt() || cout.intValue() % groups != 0)
    unsupported(n, "groups do not divide the channels");
  // The generated kernel reads within x, weight and bias only when these agree.
  if (x->type.shape[1] != w->type.shape[1] * I(groups) || osh.size() != r || osh[0] != x->type.shape[0] ||
      osh[1] != cout)
    unsupported(n, "input channels, weight, groups and the output shape do not agree");
  if (bias && bias->kind == ir::ValueKind::Tensor && bias->type.shape != std::vector<SymExpr>{cout})
    unsupported(n, "bias must be [out channels]");
  for (size_t d = 0; d < sd; ++d) {
    if (stride[d] <= 0 || dil[d] <= 0 || pad[d] < 0) unsupported(n, "stride, dilation must be positive, padding >= 0");
    checkConvWindow(n, x->type.shape[d + 2], w->type.shape[d + 2], osh[d + 2], stride[d], pad[d], dil[d]);
  }
  std::vector<int> ins = {operand(x, n), operand(w, n)};
  if (bias && bias->kind == ir::ValueKind::Tensor) ins.push_back(operand(bias, n));
  int id = gnode("conv", "", ins, odt, osh, o);
  std::vector<int64_t> iv = {static_cast<int64_t>(sd), groups};
  for (const auto* v : {&stride, &pad, &dil}) iv.insert(iv.end(), v->begin(), v->end());
  cg_.node(id).iv = iv;
  define(out, id);
}

}  // namespace fxfuse::lowering::detail
