#include "ir/op_schema.h"

#include <cctype>

#include "ir/op_table.h"
#include "ir/status.h"

namespace fxfuse::ir {

int OpSchema::argIndex(std::string_view arg_name) const {
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].name == arg_name) return static_cast<int>(i);
  return -1;
}

std::vector<int> OpSchema::mutableArgs() const {
  std::vector<int> out;
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].is_mutable) out.push_back(static_cast<int>(i));
  return out;
}

namespace {

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return std::string(s.substr(a, b - a));
}

// Splits on commas at bracket depth 0.
std::vector<std::string> splitTop(std::string_view s) {
  std::vector<std::string> out;
  int depth = 0;
  size_t start = 0;
  bool quote = false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '\'' || c == '"') quote = !quote;
    if (quote) continue;
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  std::string last = trim(s.substr(start));
  if (!last.empty()) out.push_back(last);
  return out;
}

SchemaArg parseArg(const std::string& text, std::string_view schema) {
  SchemaArg a;
  std::string t = text;
  auto eq = t.find('=');
  if (eq != std::string::npos) {
    a.default_value = trim(std::string_view(t).substr(eq + 1));
    t = trim(std::string_view(t).substr(0, eq));
  }
  // Type is everything up to the last space (alias annotations contain no spaces except
  // in "(a -> *)" which we strip first).
  std::string type_part = t, name;
  // Remove alias annotation "(...)" after Tensor.
  std::string cleaned;
  int depth = 0;
  for (char c : t) {
    if (c == '(') {
      ++depth;
      continue;
    }
    if (c == ')') {
      --depth;
      continue;
    }
    if (depth > 0) {
      if (c == '!') a.is_mutable = true;
      continue;
    }
    cleaned += c;
  }
  cleaned = trim(cleaned);
  auto sp = cleaned.rfind(' ');
  if (sp == std::string::npos) {
    type_part = cleaned;
  } else {
    type_part = trim(std::string_view(cleaned).substr(0, sp));
    name = trim(std::string_view(cleaned).substr(sp + 1));
  }
  if (type_part.find('!') != std::string::npos) {
    a.is_mutable = true;
    std::string x;
    for (char c : type_part)
      if (c != '!') x += c;
    type_part = x;
  }
  if (type_part.empty()) fail("malformed op schema '{}': argument '{}'", std::string(schema), text);
  a.type = type_part;
  a.name = name;
  a.is_tensor = type_part.rfind("Tensor", 0) == 0;
  a.is_optional = type_part.find('?') != std::string::npos;
  a.is_list = type_part.find('[') != std::string::npos;
  return a;
}

}  // namespace

OpSchema parseOpSchema(std::string_view text) {
  OpSchema s;
  s.text = std::string(text);
  auto open = text.find('(');
  auto arrow = text.rfind("->");
  if (open == std::string_view::npos || arrow == std::string_view::npos || arrow < open)
    fail("malformed op schema '{}'", std::string(text));
  std::string qual = trim(text.substr(0, open));
  auto colons = qual.find("::");
  if (colons == std::string::npos) fail("malformed op schema '{}': no namespace", std::string(text));
  s.ns = qual.substr(0, colons);
  std::string rest = qual.substr(colons + 2);
  auto dot = rest.find('.');
  s.name = dot == std::string::npos ? rest : rest.substr(0, dot);
  s.overload = dot == std::string::npos ? "default" : rest.substr(dot + 1);
  // Matching ')' for the argument list.
  int depth = 0;
  size_t close = std::string_view::npos;
  for (size_t i = open; i < text.size(); ++i) {
    if (text[i] == '(') ++depth;
    if (text[i] == ')' && --depth == 0) {
      close = i;
      break;
    }
  }
  if (close == std::string_view::npos) fail("malformed op schema '{}': unbalanced parentheses", std::string(text));
  bool kwonly = false;
  for (const auto& part : splitTop(text.substr(open + 1, close - open - 1))) {
    if (part == "*") {
      kwonly = true;
      continue;
    }
    SchemaArg a = parseArg(part, text);
    a.kwarg_only = kwonly;
    s.args.push_back(std::move(a));
  }
  std::string ret = trim(text.substr(text.find("->", close) + 2));
  if (ret.size() >= 2 && ret.front() == '(' && ret.back() == ')') ret = ret.substr(1, ret.size() - 2);
  for (const auto& part : splitTop(ret)) s.returns.push_back(parseArg(part, text));
  return s;
}

namespace {

const char* const kBuiltinSchemas[] = {
    // Matrix products.
    "aten::mm(Tensor self, Tensor mat2) -> Tensor",
    "aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
    "aten::bmm(Tensor self, Tensor mat2) -> Tensor",
    "aten::baddbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor",
    "aten::matmul(Tensor self, Tensor other) -> Tensor",
    "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor",
    "aten::_scaled_mm(Tensor self, Tensor mat2, Tensor scale_a, Tensor scale_b, Tensor? bias=None, Tensor? scale_result=None, ScalarType? out_dtype=None, bool use_fast_accum=False) -> Tensor",
    "aten::_grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None, ScalarType? out_dtype=None) -> Tensor",
    "aten::conv1d(Tensor input, Tensor weight, Tensor? bias=None, SymInt[1] stride=1, SymInt[1] padding=0, SymInt[1] dilation=1, SymInt groups=1) -> Tensor",
    "aten::convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor",
    // Elementwise.
    "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "aten::add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
    "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
    "aten::sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "aten::sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
    "aten::rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
    "aten::rsub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::mul.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::mul_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)",
    "aten::div.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::div.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor",
    "aten::pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor",
    "aten::pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor",
    "aten::pow.Scalar(Scalar self, Tensor exponent) -> Tensor",
    "aten::rsqrt(Tensor self) -> Tensor",
    "aten::sqrt(Tensor self) -> Tensor",
    "aten::exp(Tensor self) -> Tensor",
    "aten::log(Tensor self) -> Tensor",
    "aten::neg(Tensor self) -> Tensor",
    "aten::abs(Tensor self) -> Tensor",
    "aten::reciprocal(Tensor self) -> Tensor",
    "aten::sin(Tensor self) -> Tensor",
    "aten::cos(Tensor self) -> Tensor",
    "aten::tanh(Tensor self) -> Tensor",
    "aten::erf(Tensor self) -> Tensor",
    "aten::sigmoid(Tensor self) -> Tensor",
    "aten::silu(Tensor self) -> Tensor",
    "aten::relu(Tensor self) -> Tensor",
    "aten::relu_(Tensor(a!) self) -> Tensor(a!)",
    "aten::gelu(Tensor self, *, str approximate='none') -> Tensor",
    "aten::clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
    "aten::clamp_min(Tensor self, Scalar min) -> Tensor",
    "aten::clamp_max(Tensor self, Scalar max) -> Tensor",
    "aten::clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor",
    "aten::clamp_min.Tensor(Tensor self, Tensor min) -> Tensor",
    "aten::clamp_max.Tensor(Tensor self, Tensor max) -> Tensor",
    "aten::where.self(Tensor condition, Tensor self, Tensor other) -> Tensor",
    "aten::where.ScalarSelf(Tensor condition, Scalar self, Tensor other) -> Tensor",
    "aten::where.ScalarOther(Tensor condition, Tensor self, Scalar other) -> Tensor",
    "aten::where.Scalar(Tensor condition, Scalar self, Scalar other) -> Tensor",
    "aten::softplus(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor",
    "aten::square(Tensor self) -> Tensor",
    "aten::floor_divide(Tensor self, Tensor other) -> Tensor",
    "aten::floor_divide.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::eq.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::eq.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::ne.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::lt.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::le.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::__and__.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::diff(Tensor self, int n=1, int dim=-1, Tensor? prepend=None, Tensor? append=None) -> Tensor",
    "aten::new_ones(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::to.device(Tensor(a) self, Device device, ScalarType dtype, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)",
    "aten::lt.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::le.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::gt.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::gt.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::ge.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::ge.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::logical_not(Tensor self) -> Tensor",
    "aten::logical_and(Tensor self, Tensor other) -> Tensor",
    "aten::logical_or(Tensor self, Tensor other) -> Tensor",
    "aten::bitwise_not(Tensor self) -> Tensor",
    "aten::bitwise_and.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::bitwise_or.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor",
    "aten::log1p(Tensor self) -> Tensor",
    "aten::expm1(Tensor self) -> Tensor",
    "aten::floor(Tensor self) -> Tensor",
    "aten::log_sigmoid(Tensor self) -> Tensor",
    "aten::minimum(Tensor self, Tensor other) -> Tensor",
    "aten::maximum(Tensor self, Tensor other) -> Tensor",
    "aten::min.other(Tensor self, Tensor other) -> Tensor",
    "aten::max.other(Tensor self, Tensor other) -> Tensor",
    "aten::div_.Tensor(Tensor(a!) self, Tensor other) -> Tensor(a!)",
    "aten::clamp_(Tensor(a!) self, Scalar? min=None, Scalar? max=None) -> Tensor(a!)",
    "aten::__or__.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::masked_fill.Tensor(Tensor self, Tensor mask, Tensor value) -> Tensor",
    "aten::masked_fill_.Scalar(Tensor(a!) self, Tensor mask, Scalar value) -> Tensor(a!)",
    "aten::polar(Tensor abs, Tensor angle) -> Tensor",
    "aten::triu(Tensor self, int diagonal=0) -> Tensor",
    "aten::tril(Tensor self, int diagonal=0) -> Tensor",
    "aten::atan(Tensor self) -> Tensor",
    "aten::tan(Tensor self) -> Tensor",
    "aten::sinh(Tensor self) -> Tensor",
    "aten::cosh(Tensor self) -> Tensor",
    "aten::exp2(Tensor self) -> Tensor",
    "aten::log2(Tensor self) -> Tensor",
    "aten::log10(Tensor self) -> Tensor",
    "aten::ceil(Tensor self) -> Tensor",
    "aten::trunc(Tensor self) -> Tensor",
    "aten::round(Tensor self) -> Tensor",
    "aten::round.decimals(Tensor self, *, int decimals) -> Tensor",
    "aten::sign(Tensor self) -> Tensor",
    "aten::positive(Tensor(a) self) -> Tensor(a)",
    "aten::isinf(Tensor self) -> Tensor",
    "aten::isnan(Tensor self) -> Tensor",
    "aten::isfinite(Tensor self) -> Tensor",
    "aten::atan2(Tensor self, Tensor other) -> Tensor",
    "aten::hypot(Tensor self, Tensor other) -> Tensor",
    "aten::fmod.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::fmod.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::remainder.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::remainder.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::true_divide.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::true_divide.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::sub_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)",
    "aten::ne.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::logical_xor(Tensor self, Tensor other) -> Tensor",
    "aten::bitwise_and.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::bitwise_or.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::bitwise_xor.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::bitwise_xor.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::__xor__.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten::__xor__.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten::clip(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
    "aten::hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor",
    "aten::leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor",
    "aten::fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!)",
    "aten::zero_(Tensor(a!) self) -> Tensor(a!)",
    "aten::fill.Scalar(Tensor self, Scalar value) -> Tensor",
    "aten::zero(Tensor self) -> Tensor",
    // Reductions.
    "aten::sum(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
    "aten::mean(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "aten::mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
    "aten::amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
    "aten::amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
    "aten::max(Tensor self) -> Tensor",
    "aten::max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
    "aten::min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
    "aten::argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
    "aten::argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
    "aten::min(Tensor self) -> Tensor",
    "aten::all(Tensor self) -> Tensor",
    "aten::all.dim(Tensor self, int dim, bool keepdim=False) -> Tensor",
    "aten::all.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor",
    "aten::any(Tensor self) -> Tensor",
    "aten::any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor",
    "aten::any.dims(Tensor self, int[]? dim=None, bool keepdim=False) -> Tensor",
    "aten::std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor",
    "aten::std.dim(Tensor self, int[1]? dim, bool unbiased=True, bool keepdim=False) -> Tensor",
    "aten::dot(Tensor self, Tensor tensor) -> Tensor",
    "aten::mv(Tensor self, Tensor vec) -> Tensor",
    "aten::cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
    "aten::var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor",
    "aten::var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> (Tensor, Tensor)",
    "aten::topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)",
    "aten::sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",
    "aten::sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)",
    "aten::logsumexp(Tensor self, int[1] dim, bool keepdim=False) -> Tensor",
    "aten::histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor",
    "prims::prepare_softmax_online(Tensor a, int dim) -> (Tensor, Tensor)",
    "aten::softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
    "aten::_softmax(Tensor self, int dim, bool half_to_float) -> Tensor",
    "aten::log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
    "aten::_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor",
    // Views and shape ops.
    "aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)",
    "aten::view.dtype(Tensor(a) self, ScalarType dtype) -> Tensor(a)",
    "aten::reshape(Tensor(a) self, SymInt[] shape) -> Tensor(a)",
    "aten::_unsafe_view(Tensor self, SymInt[] size) -> Tensor",
    "aten::permute(Tensor(a) self, int[] dims) -> Tensor(a)",
    "aten::transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)",
    "aten::t(Tensor(a) self) -> Tensor(a)",
    "aten::expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)",
    "aten::unsqueeze(Tensor(a) self, int dim) -> Tensor(a)",
    "aten::squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)",
    "aten::squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)",
    "aten::squeeze(Tensor(a) self) -> Tensor(a)",
    "aten::slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)",
    "aten::slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor",
    "aten::select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)",
    "aten::as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)",
    "aten::cat(Tensor[] tensors, int dim=0) -> Tensor",
    "aten::stack(Tensor[] tensors, int dim=0) -> Tensor",
    "aten::split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
    "aten::split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]",
    "aten::unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]",
    "aten::chunk(Tensor(a -> *) self, int chunks, int dim=0) -> Tensor(a)[]",
    "aten::index.Tensor(Tensor self, Tensor?[] indices) -> Tensor",
    "aten::_unsafe_index.Tensor(Tensor self, Tensor?[] indices) -> Tensor",
    "aten::index_select(Tensor self, int dim, Tensor index) -> Tensor",
    "aten::gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor",
    "aten::embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor",
    "aten::repeat(Tensor self, SymInt[] repeats) -> Tensor",
    "aten::scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
    "aten::scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor",
    "aten::scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
    "aten::index_add(Tensor self, int dim, Tensor index, Tensor source, *, Scalar alpha=1) -> Tensor",
    "aten::index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor",
    "aten::pad(Tensor self, SymInt[] pad, str mode='constant', float? value=None) -> Tensor",
    "aten::detach_(Tensor(a!) self) -> Tensor(a!)",
    "aten::repeat_interleave.self_int(Tensor self, SymInt repeats, int? dim=None, *, SymInt? output_size=None) -> Tensor",
    "aten::constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor",
    "aten::flatten.using_ints(Tensor(a) self, int start_dim=0, int end_dim=-1) -> Tensor(a)",
    "aten::unflatten.int(Tensor(a) self, int dim, SymInt[] sizes) -> Tensor(a)",
    "aten::reshape_as(Tensor(a) self, Tensor other) -> Tensor(a)",
    "aten::linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
    "aten::expand_as(Tensor(a) self, Tensor other) -> Tensor(a)",
    "aten::concat(Tensor[] tensors, int dim=0) -> Tensor",
    "aten::concatenate(Tensor[] tensors, int dim=0) -> Tensor",
    "aten::narrow(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)",
    "aten::flip(Tensor self, int[] dims) -> Tensor",
    "aten::roll(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor",
    "aten::_reshape_alias(Tensor(a) self, SymInt[] size, SymInt[] stride) -> Tensor(a)",
    "aten::view_copy(Tensor self, SymInt[] size) -> Tensor",
    "aten::lift_fresh(Tensor(a) self) -> Tensor(a)",
    "aten::_unsafe_index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor",
    "aten::native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)",
    "aten::select_scatter(Tensor self, Tensor src, int dim, SymInt index) -> Tensor",
    "aten::scatter_.src(Tensor(a!) self, int dim, Tensor index, Tensor src) -> Tensor(a!)",
    "aten::scatter_.value(Tensor(a!) self, int dim, Tensor index, Scalar value) -> Tensor(a!)",
    "aten::index_put_(Tensor(a!) self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor(a!)",
    "aten::view_as_complex(Tensor(a) self) -> Tensor(a)",
    "aten::view_as_real(Tensor(a) self) -> Tensor(a)",
    "aten::_local_scalar_dense(Tensor self) -> Scalar",
    "aten::item(Tensor self) -> Scalar",
    "prims::device_put(Tensor a, Device device, bool non_blocking=False) -> Tensor",
    "aten::clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor",
    "aten::contiguous(Tensor(a) self, *, MemoryFormat memory_format=contiguous_format) -> Tensor(a)",
    "aten::alias(Tensor(a) self) -> Tensor(a)",
    "aten::detach(Tensor(a) self) -> Tensor(a)",
    "aten::lift_fresh_copy(Tensor self) -> Tensor",
    "aten::copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor",
    "aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)",
    "aten::dropout(Tensor input, float p, bool train) -> Tensor",
    // Casts.
    "aten::_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor",
    "aten::to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)",
    "aten::to.dtype_layout(Tensor(a) self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)",
    "aten::type_as(Tensor self, Tensor other) -> Tensor",
    "prims::convert_element_type(Tensor a, ScalarType dtype) -> Tensor",
    // Factories.
    "aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
    "aten::empty_strided(SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::empty_permuted(SymInt[] size, int[] physical_layout, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::empty_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
    "aten::zeros_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
    "aten::ones_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
    "aten::full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
    "aten::full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::ones(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::scalar_tensor(Scalar s, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::arange(Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::new_zeros(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::new_full(Tensor self, SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::new_empty(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::new_empty_strided(Tensor self, SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::eye(SymInt n, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten::eye.m(SymInt n, SymInt m, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "prims::iota(SymInt length, *, SymInt start, SymInt step, ScalarType dtype, Device device, bool requires_grad) -> Tensor",
    // Normalization and attention built-ins.
    "aten::rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor",
    "aten::_fused_rms_norm(Tensor input, int[] normalized_shape, Tensor? weight, float? eps) -> (Tensor, Tensor)",
    "aten::native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)",
    "aten::native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW, int group, float eps) -> (Tensor, Tensor, Tensor)",
    "aten::layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1e-05, bool cudnn_enable=True) -> Tensor",
    "aten::scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor",
    "aten::_scaled_dot_product_flash_attention(Tensor query, Tensor key, Tensor value, float dropout_p=0.0, bool is_causal=False, bool return_debug_mask=False, *, float? scale=None) -> (Tensor output, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, Tensor rng_state, Tensor unused, Tensor debug_attn_mask)",
    "aten::_scaled_dot_product_flash_attention_for_cpu(Tensor query, Tensor key, Tensor value, float dropout_p=0.0, bool is_causal=False, *, Tensor? attn_mask=None, float? scale=None) -> (Tensor output, Tensor logsumexp)",
    "aten::_scaled_dot_product_efficient_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_bias, bool compute_log_sumexp, float dropout_p=0.0, bool is_causal=False, *, float? scale=None) -> (Tensor output, Tensor log_sumexp, Tensor philox_seed, Tensor philox_offset)",
    "aten::_scaled_dot_product_cudnn_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_bias, bool compute_log_sumexp, float dropout_p=0.0, bool is_causal=False, bool return_debug_mask=False, *, float? scale=None) -> (Tensor output, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, Tensor philox_seed, Tensor philox_offset, Tensor debug_attn_mask)",
    // Symbolic sizes and asserts.
    "aten::sym_size.int(Tensor self, int dim) -> SymInt",
    "aten::sym_numel(Tensor self) -> SymInt",
    "aten::sym_stride.int(Tensor self, int dim) -> SymInt",
    "aten::sym_storage_offset(Tensor self) -> SymInt",
    "aten::size.int(Tensor self, int dim) -> int",
    "aten::numel(Tensor self) -> int",
    "aten::_assert_tensor_metadata(Tensor a, SymInt[]? size=None, SymInt[]? stride=None, ScalarType? dtype=None, *, Device? device=None, Layout? layout=None) -> ()",
    "aten::_assert_scalar(Scalar self, str assert_msg) -> ()",
    "aten::sym_constrain_range_for_size(Scalar size, *, int? min=None, int? max=None) -> ()",
    "aten::sym_constrain_range(Scalar size, *, int? min=None, int? max=None) -> ()",
    "aten::_assert_async(Tensor self) -> ()",
    "aten::_assert_async.msg(Tensor self, str assert_msg) -> ()",
    // Collectives.
    "_c10d_functional::all_reduce(Tensor input, str reduce_op, str group_name) -> Tensor",
    "_c10d_functional::wait_tensor(Tensor tensor) -> Tensor",
    // vLLM custom ops (csrc/torch_bindings.cpp and vllm/ python registrations).
    "_C::rms_norm(Tensor! result, Tensor input, Tensor weight, float epsilon) -> ()",
    "_C::fused_add_rms_norm(Tensor! input, Tensor! residual, Tensor weight, float epsilon) -> ()",
    "_C::static_scaled_fp8_quant(Tensor! result, Tensor input, Tensor scale) -> ()",
    "_C::dynamic_scaled_fp8_quant(Tensor! result, Tensor input, Tensor! scale) -> ()",
    "_C::dynamic_per_token_scaled_fp8_quant(Tensor! result, Tensor input, Tensor! scale, Tensor? scale_ub) -> ()",
    "_C::per_token_group_fp8_quant(Tensor input, Tensor! output_q, Tensor! output_s, int group_size, float eps, float fp8_min, float fp8_max, bool scale_ue8m0) -> ()",
    "_C::silu_and_mul(Tensor! result, Tensor input) -> ()",
    "_C::rms_norm_static_fp8_quant(Tensor! result, Tensor input, Tensor weight, Tensor scale, float epsilon) -> ()",
    "_C::fused_add_rms_norm_static_fp8_quant(Tensor! result, Tensor input, Tensor! residual, Tensor weight, Tensor scale, float epsilon) -> ()",
    "_C::rms_norm_dynamic_per_token_quant(Tensor! result, Tensor input, Tensor weight, Tensor! scale, float epsilon, Tensor? scale_ub, Tensor!? residual) -> ()",
    "_C::silu_and_mul_quant(Tensor! result, Tensor input, Tensor scale) -> ()",
    "_C::rotary_embedding(Tensor positions, Tensor! query, Tensor!? key, int head_size, Tensor cos_sin_cache, bool is_neox) -> ()",
    "_C::cutlass_scaled_mm(Tensor! out, Tensor a, Tensor b, Tensor a_scales, Tensor b_scales, Tensor? bias) -> ()",
    "vllm::unified_attention(Tensor query, Tensor key, Tensor value, str layer_name) -> Tensor",
    "vllm::unified_attention_with_output(Tensor query, Tensor key, Tensor value, Tensor! output, str layer_name, Tensor? output_scale=None, Tensor!? output_block_scale=None) -> ()",
    "vllm::all_reduce(Tensor tensor, str group_name) -> Tensor",
};

}  // namespace

const OpRegistry& OpRegistry::builtin() {
  static const OpRegistry* reg = [] {
    auto* r = new OpRegistry();
    for (const char* s : kBuiltinSchemas) r->add(parseOpSchema(s));
    for (const auto& op : fxfuseOps()) r->add(parseOpSchema(op.schema));
    return r;
  }();
  return *reg;
}

const OpSchema* OpRegistry::find(std::string_view target) const {
  auto it = ops_.find(target);
  return it == ops_.end() ? nullptr : &it->second;
}

void OpRegistry::add(const OpSchema& s) { ops_[s.target()] = s; }

const OpSchema* lookupSchema(const std::map<std::string, std::string>& module_schemas, std::string_view target,
                             std::map<std::string, OpSchema, std::less<>>* cache) {
  if (cache) {
    auto it = cache->find(target);
    if (it != cache->end()) return &it->second;
    auto ms = module_schemas.find(std::string(target));
    if (ms != module_schemas.end()) {
      try {
        OpSchema s = parseOpSchema(ms->second);
        return &cache->emplace(std::string(target), std::move(s)).first->second;
      } catch (const FxError&) {
        // Fall through to the built-in table.
      }
    }
  }
  return OpRegistry::builtin().find(target);
}

}  // namespace fxfuse::ir
