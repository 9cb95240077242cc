#include "compiler/lowering/codegen.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

#include "ir/status.h"

namespace fxfuse::lowering {

using ir::DType;
using ir::SymExpr;

std::string computeType(DType t) {
  switch (t) {
    case DType::F64: return "double";
    case DType::F32: case DType::F16: case DType::BF16: case DType::F8E4M3FN: case DType::F8E5M2:
      return "float";
    case DType::BOOL: return "bool";
    case DType::I64: case DType::I32: case DType::I16: case DType::I8: case DType::U8:
      return "long long";
    default:
      fail("generated code: dtype {} is not supported", ir::dtypeName(t));
  }
}

namespace {

// An integer constant of a generated kernel as a C++ literal; one that no int64 holds (the
// graph's value was a float out of range, or NaN) is refused rather than converted.
std::string integerLiteral(double v, const std::string& origin) {
  if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0))
    fail("{}: integer constant {} does not fit in int64", origin, v);
  return std::to_string(static_cast<long long>(v)) + "LL";
}

const char* storeType(DType t) {
  switch (t) {
    case DType::F64: return "double";
    case DType::F32: return "float";
    case DType::F16: case DType::BF16: return "unsigned short";
    case DType::F8E4M3FN: case DType::F8E5M2: case DType::U8: case DType::BOOL: return "unsigned char";
    case DType::I64: return "long long";
    case DType::I32: return "int";
    case DType::I16: return "short";
    case DType::I8: return "signed char";
    default: fail("generated code: dtype {} cannot be stored", ir::dtypeName(t));
  }
}

std::string suffix(DType t) {
  std::string n(ir::dtypeName(t));
  return n;
}

}  // namespace

const std::string& generatedPrelude() {
  static const std::string p = R"CUDA(// fxfuse generated kernel (compiler/lowering/codegen.cc)
// Programmatic dependent launch (kernels/device/pdl.cuh): the next kernel may be scheduled now;
// nothing is read or written before the previous kernel has finished.
__device__ __forceinline__ void fx_pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
#define FX_INF __int_as_float(0x7f800000)
#define FX_NAN __int_as_float(0x7fc00000)
__device__ __forceinline__ float fx_ld_bf16(unsigned short b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ __forceinline__ unsigned short fx_st_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float fx_ld_f16(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ unsigned short fx_st_f16(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ __forceinline__ float fx_ld_f8e4m3fn(unsigned char b) {
  unsigned s = (b >> 7) & 1u, e = (b >> 3) & 15u, m = b & 7u;
  float v;
  if (e == 15u && m == 7u) v = FX_NAN;
  else if (e == 0u) v = (float)m * 0.001953125f;
  else v = __uint_as_float(((e + 120u) << 23) | (m << 20));
  return s ? -v : v;
}
// torch's float -> float8_e4m3fn: round to nearest even, NaN above the largest finite value.
__device__ __forceinline__ unsigned char fx_st_f8e4m3fn(float f) {
  if (f != f) return 0x7f;
  if (fabsf(f) > 464.0f) return f < 0.0f ? 0xff : 0x7f;
  unsigned short r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(f));
  return (unsigned char)(r & 0xffu);
}
__device__ __forceinline__ float fx_ld_f8e5m2(unsigned char b) { return fx_ld_f16((unsigned short)(((unsigned)b) << 8)); }
__device__ __forceinline__ unsigned char fx_st_f8e5m2(float f) {
  unsigned short r;
  asm("cvt.rn.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(f));
  return (unsigned char)(r & 0xffu);
}
__device__ __forceinline__ float fx_r_f32(float x) { return x; }
__device__ __forceinline__ float fx_r_bf16(float x) { return fx_ld_bf16(fx_st_bf16(x)); }
__device__ __forceinline__ float fx_r_f16(float x) { return fx_ld_f16(fx_st_f16(x)); }
__device__ __forceinline__ float fx_r_f8e4m3fn(float x) { return fx_ld_f8e4m3fn(fx_st_f8e4m3fn(x)); }
__device__ __forceinline__ float fx_r_f8e5m2(float x) { return fx_ld_f8e5m2(fx_st_f8e5m2(x)); }
__device__ __forceinline__ double fx_r_f64(double x) { return x; }
__device__ __forceinline__ long long fx_r_i64(long long x) { return x; }
__device__ __forceinline__ long long fx_r_i32(long long x) { return (long long)(int)x; }
__device__ __forceinline__ long long fx_r_i16(long long x) { return (long long)(short)x; }
__device__ __forceinline__ long long fx_r_i8(long long x) { return (long long)(signed char)x; }
__device__ __forceinline__ long long fx_r_u8(long long x) { return (long long)(unsigned char)x; }
__device__ __forceinline__ bool fx_r_b8(bool x) { return x; }
template <class T> __device__ __forceinline__ T fx_maxp(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a > b ? a : b)); }
template <class T> __device__ __forceinline__ T fx_minp(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a < b ? a : b)); }
__device__ __forceinline__ float fx_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ double fx_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
__device__ __forceinline__ long long fx_floordiv(long long a, long long b) { long long q = a / b; return ((a % b != 0) && ((a < 0) != (b < 0))) ? q - 1 : q; }
__device__ __forceinline__ long long fx_remainder(long long a, long long b) { long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
struct FxSum { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return a + b; } };
struct FxMax { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return fx_maxp(a, b); } };
struct FxMin { template <class T> __device__ __forceinline__ T operator()(T a, T b) const { return fx_minp(a, b); } };
// Block-wide reduction; every thread gets the result. blockDim.x is a multiple of 32.
template <class T, class Op> __device__ __forceinline__ T fx_block_reduce(T v, Op op) {
  __shared__ unsigned long long fx_sh_raw[32];
  T* sh = reinterpret_cast<T*>(fx_sh_raw);
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) sh[w] = v;
  __syncthreads();
  T r = sh[0];
  for (int k = 1; k < nw; ++k) r = op(r, sh[k]);
  return r;
}
)CUDA";
  return p;
}

// What a kernel that reads index tensors adds to the prelude. A read outside its dimension
// records the first bad read (its site: 1 + the position in GeneratedKernel.index_sites, the
// index, the size) and takes position 0 instead, so nothing outside the tensor is touched; the
// runtime reads the record after a run and refuses the run's outputs in one line naming the node
// (Program::checkIndexErrors). torch raises a device-side assert for the same read.
const std::string& indexCheckSource() {
  static const std::string p = R"CUDA(__device__ unsigned long long fx_index_error[3];
__device__ __forceinline__ long long fx_index(long long i, long long n, bool wrap, unsigned long long site) {
  if (i < n && (wrap ? i >= -n : i >= 0)) return i < 0 ? i + n : i;
  if (atomicCAS(&fx_index_error[0], 0ULL, site) == 0ULL) {
    fx_index_error[1] = (unsigned long long)i;
    fx_index_error[2] = (unsigned long long)n;
  }
  return 0;
}
)CUDA";
  return p;
}

std::string sourceHash(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

bool broadcastsTo(const std::vector<SymExpr>& from, const std::vector<SymExpr>& to) {
  if (from.size() > to.size()) return false;
  size_t off = to.size() - from.size();
  for (size_t k = 0; k < from.size(); ++k) {
    const SymExpr& a = from[k];
    if (a.isInt() && a.intValue() == 1) continue;
    if (a != to[k + off]) return false;
  }
  return true;
}

std::vector<SymExpr> rowsOf(const std::vector<SymExpr>& domain, int kred) {
  size_t lead = domain.size() - std::min(domain.size(), static_cast<size_t>(std::max(kred, 0)));
  return std::vector<SymExpr>(domain.begin(), domain.begin() + static_cast<long>(lead));
}

bool storedPerRow(const std::vector<SymExpr>& shape, const std::vector<SymExpr>& domain, int kred) {
  return kred > 0 && !broadcastsTo(shape, domain) && numelOf(shape) != numelOf(domain) &&
         numelOf(shape) == numelOf(rowsOf(domain, kred));
}

SymExpr numelOf(const std::vector<SymExpr>& shape) {
  SymExpr n = SymExpr::integer(1);
  for (const auto& d : shape) n = n * d;
  return n;
}

int Codegen::addMem(const MemTensor& t) {
  mems_.push_back(t);
  return static_cast<int>(mems_.size()) - 1;
}

int Codegen::add(GNode n) {
  for (int i : n.in)
    if (i < 0 || i >= static_cast<int>(nodes_.size())) fail("codegen: bad operand {} of {}", i, n.op);
  nodes_.push_back(std::move(n));
  return static_cast<int>(nodes_.size()) - 1;
}

int64_t Codegen::cost(int i) const {
  std::map<int, int64_t> memo;
  std::function<int64_t(int)> rec = [&](int k) -> int64_t {
    auto it = memo.find(k);
    if (it != memo.end()) return it->second;
    const GNode& n = nodes_[static_cast<size_t>(k)];
    int64_t c = 1;
    if (n.op != "load" && n.op != "reduce")
      for (int a : n.in) c = std::min<int64_t>(c + rec(a), int64_t{1} << 40);
    if (n.op == "cumsum" || n.op == "scatter") c *= 64;
    if (n.op == "topk" || n.op == "histc" || n.op == "grouped_mm" || n.op == "conv") c *= 4096;
    memo[k] = c;
    return c;
  };
  return rec(i);
}

// ---------------------------------------------------------------------------------- emitter

namespace {

std::string floatLit(double v, bool dbl) {
  if (std::isnan(v)) return dbl ? "(double)FX_NAN" : "FX_NAN";
  // Past float's range a float literal is infinite too (printed, it would read "inf").
  if (std::isinf(v) || (!dbl && std::isinf(static_cast<float>(v))))
    return std::string(v < 0 ? "-" : "") + (dbl ? "(double)FX_INF" : "FX_INF");
  char buf[64];
  if (dbl) {
    std::snprintf(buf, sizeof buf, "%.17g", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(static_cast<float>(v)));
  }
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  if (!dbl) s += "f";
  return "(" + s + ")";
}

class Emitter {
 public:
  Emitter(const Codegen& cg) : cg_(cg) {}

  std::string sx(const SymExpr& e) {
    if (e.isInt()) return "(" + std::to_string(e.intValue()) + "LL)";
    std::string key = e.str();
    auto it = int_index_.find(key);
    if (it == int_index_.end()) {
      it = int_index_.emplace(key, static_cast<int>(int_args_.size())).first;
      int_args_.push_back(e);
    }
    return "c.e" + std::to_string(it->second);
  }
  int ptr(int tref) {
    for (size_t k = 0; k < tensor_args_.size(); ++k)
      if (tensor_args_[k] == tref) return static_cast<int>(k);
    tensor_args_.push_back(tref);
    return static_cast<int>(tensor_args_.size()) - 1;
  }

  // Index vector for operand `in_shape` of an elementwise node of shape `out_shape` indexed by `i`.
  std::string bcastIndex(std::ostringstream& o, const std::string& var, const std::vector<SymExpr>& in_shape,
                         const std::vector<SymExpr>& out_shape, const std::string& i) {
    size_t ri = in_shape.size(), ro = out_shape.size();
    if (ri > ro) fail("codegen: operand of rank {} broadcast to rank {}", ri, ro);
    o << "  long long " << var << "[" << std::max<size_t>(ri, 1) << "];";
    if (ri == 0) o << " " << var << "[0] = 0;";
    for (size_t k = 0; k < ri; ++k) {
      const SymExpr& a = in_shape[k];
      const SymExpr& b = out_shape[k + ro - ri];
      bool zero = a.isInt() && a.intValue() == 1 && !(b.isInt() && b.intValue() == 1);
      o << " " << var << "[" << k << "] = " << (zero ? std::string("0") : i + "[" + std::to_string(k + ro - ri) + "]")
        << ";";
    }
    o << "\n";
    return var;
  }

  // Linear remap: index `i` over `from` (row-major) to an index over `to` (same numel).
  void linearIndex(std::ostringstream& o, const std::string& var, const std::vector<SymExpr>& from,
                   const std::vector<SymExpr>& to, const std::string& i) {
    o << "  long long " << var << "[" << std::max<size_t>(to.size(), 1) << "]; { long long t = 0;";
    for (size_t k = 0; k < from.size(); ++k) o << " t = t * " << sx(from[k]) << " + " << i << "[" << k << "];";
    if (to.empty()) o << " " << var << "[0] = 0;";
    for (size_t k = to.size(); k-- > 0;) {
      if (k > 0)
        o << " " << var << "[" << k << "] = t % " << sx(to[k]) << "; t /= " << sx(to[k]) << ";";
      else
        o << " " << var << "[0] = t;";
    }
    o << " }\n";
  }

  std::string call(int id, const std::string& idx) { return "fx_n" + std::to_string(id) + "(c, " + idx + ")"; }

  // Value of operand `a` converted to C type `ct`.
  std::string conv(const std::string& expr, DType from, const std::string& ct) {
    std::string f = computeType(from);
    if (f == ct) return expr;
    if (ct == "bool") return "((" + expr + ") != 0)";
    return "((" + ct + ")(" + expr + "))";
  }

  std::string round(DType t, const std::string& expr) { return "fx_r_" + suffix(t) + "(" + expr + ")"; }

  // The device function computing node `id` at output index `i`, after those of its operands
  // (each node's function is emitted once, before its first user).
  void emitNode(int id) {
    if (emitted_.count(id)) return;
    const GNode& n = cg_.node(id);
    for (int a : n.in) emitNode(a);
    emitted_.insert(id);
    std::ostringstream o;
    const std::string ct = computeType(n.dtype);
    o << "__device__ __forceinline__ " << ct << " fx_n" << id << "(const FxCtx& c, const long long* i) {";
    if (!n.origin.empty()) o << "  // " << n.origin;
    o << "\n";
    if (n.op == "reduce") {
      // A reduction is computed once per row by the kernel body (Codegen::emit) into the context.
      o << "  return c.r" << id << ";\n";
    } else {
      (this->*bodyEmitter(n.op))(o, n, ct);
    }
    o << "}\n";
    funcs_ << o.str();
  }

  // Writes the body of a node's device function (computing type `ct`) to `o`.
  using BodyEmitter = void (Emitter::*)(std::ostringstream& o, const GNode& n, const std::string& ct);

  // The body emitter of GNode op `op` (every op but reduce; codegen.h lists them).
  static BodyEmitter bodyEmitter(const std::string& op) {
    static const std::map<std::string, BodyEmitter> emitters = {
        {"load", &Emitter::emitLoad},
        {"const", &Emitter::emitConst},
        {"unary", &Emitter::emitUnary},
        {"binary", &Emitter::emitBinary},
        {"cast", &Emitter::emitCast},
        {"where", &Emitter::emitWhere},
        {"clamp", &Emitter::emitClamp},
        {"remap", &Emitter::emitRemap},
        {"cat", &Emitter::emitCat},
        {"pad", &Emitter::emitPad},
        {"iota", &Emitter::emitIota},
        {"eye", &Emitter::emitEye},
        {"gather", &Emitter::emitGather},
        {"index", &Emitter::emitIndex},
        {"tri", &Emitter::emitTri},
        {"slice_scatter", &Emitter::emitSliceScatter},
        {"select_scatter", &Emitter::emitSelectScatter},
        {"cumsum", &Emitter::emitCumsum},
        {"rotary", &Emitter::emitRotary},
        {"scatter", &Emitter::emitScatter},
        {"topk", &Emitter::emitTopk},
        {"histc", &Emitter::emitHistc},
        {"grouped_mm", &Emitter::emitGroupedMm},
        {"conv", &Emitter::emitConv},
    };
    auto it = emitters.find(op);
    if (it == emitters.end()) fail("codegen: unknown op {}", op);
    return it->second;
  }

  // Operand k of `n`.
  const GNode& operand(const GNode& n, size_t k) const { return cg_.node(n.in.at(k)); }

  // `value` as a position along a dimension of `size`, checked (indexCheckSource): in
  // [0, size), or with `wrap` also [-size, 0) counted from the end, as torch indexes.
  std::string checkedIndex(const GNode& n, const char* op, const std::string& value, const SymExpr& size, bool wrap) {
    index_sites_.emplace_back(n.origin, op);
    return "fx_index(" + value + ", " + sx(size) + ", " + (wrap ? "true" : "false") + ", " +
           std::to_string(index_sites_.size()) + "ULL)";
  }

  // Operand k of elementwise node `n` read at the output index broadcast to its shape (the
  // index vector jk is declared in `o`).
  std::string broadcastOperand(std::ostringstream& o, const GNode& n, size_t k) {
    std::string var = "j" + std::to_string(k);
    bcastIndex(o, var, operand(n, k).shape, n.shape, "i");
    return call(n.in[k], var);
  }

  // load: the element of memory tensor `mem` at the index (strided), converted from its stored type.
  void emitLoad(std::ostringstream& o, const GNode& n, const std::string& ct) {
    const MemTensor& m = cg_.mem(n.mem);
    int p = ptr(m.tref);
    // The pointer argument already points at the tensor's first element (the runtime adds
    // the TensorRef's offset), so only the strides enter the index here.
    o << "  long long off = 0";
    for (size_t k = 0; k < m.shape.size(); ++k) o << " + i[" << k << "] * " << sx(m.stride[k]);
    o << ";\n";
    std::string raw = "((const " + std::string(storeType(m.dtype)) + "*)c.p" + std::to_string(p) + ")[off]";
    std::string v;
    switch (m.dtype) {
      case DType::BF16: v = "fx_ld_bf16(" + raw + ")"; break;
      case DType::F16: v = "fx_ld_f16(" + raw + ")"; break;
      case DType::F8E4M3FN: v = "fx_ld_f8e4m3fn(" + raw + ")"; break;
      case DType::F8E5M2: v = "fx_ld_f8e5m2(" + raw + ")"; break;
      case DType::BOOL: v = "(" + raw + " != 0)"; break;
      default: v = "(" + computeType(m.dtype) + ")" + raw; break;
    }
    o << "  return " << conv(v, m.dtype, ct) << ";\n";
  }

  // const: a symbolic size (sv[0], a kernel int argument) or the number f[0] as a literal.
  void emitConst(std::ostringstream& o, const GNode& n, const std::string& ct) {
    if (!n.sv.empty())
      o << "  return " << conv(sx(n.sv[0]), DType::I64, ct) << ";\n";
    else if (ct == "float" || ct == "double")
      o << "  return " << round(n.dtype, floatLit(n.f.at(0), ct == "double")) << ";\n";
    else if (ct == "bool")
      o << "  return " << (n.f.at(0) != 0 ? "true" : "false") << ";\n";
    else
      o << "  return " << round(n.dtype, integerLiteral(n.f.at(0), n.origin)) << ";\n";
  }

  // unary: n.s of in[0] (broadcast), rounded to the node's dtype.
  void emitUnary(std::ostringstream& o, const GNode& n, const std::string& ct) {
    std::string a = broadcastOperand(o, n, 0);
    const DType in_dtype = operand(n, 0).dtype;
    if (n.s == "not") {
      o << "  return !(" << conv(a, in_dtype, "bool") << ");\n";
      return;
    }
    // A predicate (bool result) computes in its operand's type.
    std::string t = ct == "bool" ? computeType(in_dtype) : ct;
    std::string e = unaryExpr(n, conv(a, in_dtype, t), t, ct);
    o << "  return " << round(n.dtype, conv(e, n.dtype == DType::BOOL ? in_dtype : n.dtype, ct)) << ";\n";
  }

  // The unary ops that are one libm call on the operand: their float and double functions.
  static const std::map<std::string, std::pair<const char*, const char*>>& libmUnaryOps() {
    static const std::map<std::string, std::pair<const char*, const char*>> ops = {
        {"exp", {"expf", "exp"}},         {"log", {"logf", "log"}},       {"sqrt", {"sqrtf", "sqrt"}},
        {"sin", {"sinf", "sin"}},         {"cos", {"cosf", "cos"}},       {"tanh", {"tanhf", "tanh"}},
        {"erf", {"erff", "erf"}},         {"floor", {"floorf", "floor"}}, {"ceil", {"ceilf", "ceil"}},
        {"round", {"rintf", "rint"}},     {"log1p", {"log1pf", "log1p"}}, {"expm1", {"expm1f", "expm1"}},
        {"exp2", {"exp2f", "exp2"}},      {"log2", {"log2f", "log2"}},    {"log10", {"log10f", "log10"}},
        {"trunc", {"truncf", "trunc"}},   {"tan", {"tanf", "tan"}},       {"atan", {"atanf", "atan"}},
        {"sinh", {"sinhf", "sinh"}},      {"cosh", {"coshf", "cosh"}},
    };
    return ops;
  }

  // Unary op n.s of `x` (already in the computing type `t`) as an expression; `ct` is the
  // node's own computing type.
  std::string unaryExpr(const GNode& n, const std::string& x, const std::string& t, const std::string& ct) {
    const std::string& f = n.s;
    bool d = t == "double";
    auto fn = [&](const char* fl, const char* db) { return std::string(d ? db : fl) + "(" + x + ")"; };
    auto libm = libmUnaryOps().find(f);
    if (libm != libmUnaryOps().end()) return fn(libm->second.first, libm->second.second);
    if (f == "neg") return "-(" + x + ")";
    if (f == "abs") return t == "long long" ? "llabs(" + x + ")" : fn("fabsf", "fabs");
    if (f == "rsqrt") return d ? "(1.0 / sqrt(" + x + "))" : "(1.0f / sqrtf(" + x + "))";
    if (f == "reciprocal") return d ? "(1.0 / (" + x + "))" : "(1.0f / (" + x + "))";
    if (f == "sigmoid") return "fx_sigmoid(" + x + ")";
    if (f == "silu") return "((" + x + ") * fx_sigmoid(" + x + "))";
    if (f == "relu") return "fx_maxp(" + x + ", (" + t + ")0)";
    if (f == "gelu")
      return d ? "(0.5 * (" + x + ") * (1.0 + erf((" + x + ") * 0.70710678118654752)))"
               : "(0.5f * (" + x + ") * (1.0f + erff((" + x + ") * 0.70710678118654752f)))";
    if (f == "gelu_tanh")
      return "(0.5f * (" + x + ") * (1.0f + tanhf(0.79788456080286536f * ((" + x + ") + 0.044715f * (" + x +
             ") * (" + x + ") * (" + x + ")))))";
    if (f == "bnot") return ct == "bool" ? "!(" + x + ")" : "~(" + x + ")";
    if (f == "sign") return "(" + t + ")(((" + x + ") > 0) - ((" + x + ") < 0))";
    if (f == "square") return "((" + x + ") * (" + x + "))";
    if (f == "log_sigmoid")  // min(x, 0) - log1p(exp(-|x|)), stable for large |x|
      return d ? "(fmin(" + x + ", 0.0) - log1p(exp(-fabs(" + x + "))))"
               : "(fminf(" + x + ", 0.0f) - log1pf(expf(-fabsf(" + x + "))))";
    if (f == "softplus") {  // f = {beta, threshold}: x*beta > threshold ? x : log1p(exp(x*beta))/beta
      std::string beta = floatLit(n.f.size() > 0 ? n.f[0] : 1.0, d), thr = floatLit(n.f.size() > 1 ? n.f[1] : 20.0, d);
      return "((" + x + ") * " + beta + " > " + thr + " ? (" + x + ") : " + (d ? "log1p(exp(" : "log1pf(expf(") + "(" +
             x + ") * " + beta + ")) / " + beta + ")";
    }
    // Integers and bools are never infinite or NaN (and CUDA's isinf has no integer overload).
    const bool floating = d || t == "float";
    if (f == "isnan") return "((" + x + ") != (" + x + "))";
    if (f == "isinf") return floating ? "isinf(" + x + ")" : "false";
    if (f == "isfinite") return floating ? "isfinite(" + x + ")" : "true";
    if (f == "finite_or_zero") return floating ? "(isinf(" + x + ") ? (" + t + ")0 : (" + x + "))" : x;
    if (f == "round_decimals") {  // f = {decimals}: torch scales by 10^|decimals| in the compute type
      const double decimals = n.f.empty() ? 0.0 : n.f[0];
      const std::string scale = floatLit(std::pow(10.0, std::fabs(decimals)), d), r = d ? "rint(" : "rintf(";
      if (decimals > 0) return "(" + r + "(" + x + ") * " + scale + ") / " + scale + ")";
      if (decimals < 0) return "(" + r + "(" + x + ") / " + scale + ") * " + scale + ")";
      return r + x + ")";
    }
    if (f == "leaky_relu")  // f = {negative_slope}
      return "((" + x + ") > (" + t + ")0 ? (" + x + ") : (" + x + ") * (" + t + ")" +
             floatLit(n.f.empty() ? 0.01 : n.f[0], d) + ")";
    fail("codegen: unknown unary op {}", f);
  }

  // binary: n.s of in[0] and in[1] (both broadcast), rounded to the node's dtype.
  void emitBinary(std::ostringstream& o, const GNode& n, const std::string& ct) {
    std::string a = broadcastOperand(o, n, 0), b = broadcastOperand(o, n, 1);
    const std::string& f = n.s;
    bool cmp = f == "eq" || f == "ne" || f == "lt" || f == "le" || f == "gt" || f == "ge";
    bool logic = f == "and" || f == "or" || f == "xor";
    // Comparisons compute in a type both operands fit (f64, f32, bool or int64), logic ops in bool.
    std::string t;
    if (cmp) {
      DType x = operand(n, 0).dtype, y = operand(n, 1).dtype;
      t = (x == DType::F64 || y == DType::F64) ? "double"
          : (ir::isFloating(x) || ir::isFloating(y)) ? "float"
          : (x == DType::BOOL && y == DType::BOOL) ? "bool" : "long long";
    } else if (logic) {
      t = "bool";
    } else {
      t = ct;
    }
    std::string x = conv(a, operand(n, 0).dtype, t), y = conv(b, operand(n, 1).dtype, t);
    std::string e = binaryExpr(f, x, y, t);
    DType rt = (cmp || logic) ? DType::BOOL : n.dtype;
    o << "  return " << round(n.dtype, conv("(" + e + ")", rt, ct)) << ";\n";
  }

  // The binary ops that are one C operator between the operands.
  static const std::map<std::string, const char*>& infixBinaryOps() {
    static const std::map<std::string, const char*> ops = {
        {"add", " + "},  {"sub", " - "},  {"mul", " * "}, {"div", " / "},  {"eq", " == "}, {"ne", " != "},
        {"lt", " < "},   {"le", " <= "},  {"gt", " > "},  {"ge", " >= "},  {"and", " && "}, {"or", " || "},
        {"band", " & "}, {"bor", " | "},  {"bxor", " ^ "}, {"xor", " != "},
    };
    return ops;
  }

  // Binary op `f` of `x` and `y` (both already in the computing type `t`) as an expression.
  std::string binaryExpr(const std::string& f, const std::string& x, const std::string& y, const std::string& t) {
    auto infix = infixBinaryOps().find(f);
    if (infix != infixBinaryOps().end()) return x + infix->second + y;
    if (f == "div_trunc")
      return t == "long long" ? x + " / " + y : (t == "double" ? "trunc(" : "truncf(") + x + " / " + y + ")";
    if (f == "div_floor")
      return t == "long long" ? "fx_floordiv(" + x + ", " + y + ")"
                              : (t == "double" ? "floor(" : "floorf(") + x + " / " + y + ")";
    if (f == "pow")
      return t == "double"  ? "pow(" + x + ", " + y + ")"
             : t == "float" ? "powf(" + x + ", " + y + ")"
                            : "(long long)pow((double)" + x + ", (double)" + y + ")";
    if (f == "atan2") return (t == "double" ? "atan2(" : "atan2f(") + x + ", " + y + ")";
    if (f == "hypot") return (t == "double" ? "hypot(" : "hypotf(") + x + ", " + y + ")";
    if (f == "max") return "fx_maxp(" + x + ", " + y + ")";
    if (f == "min") return "fx_minp(" + x + ", " + y + ")";
    if (f == "rem")
      return t == "long long" ? "fx_remainder(" + x + ", " + y + ")"
             : t == "double"  ? "(" + x + " - floor(" + x + " / " + y + ") * " + y + ")"
                              : "(" + x + " - floorf(" + x + " / " + y + ") * " + y + ")";
    if (f == "fmod")
      return t == "long long" ? "(" + x + " % " + y + ")" : (t == "double" ? "fmod(" : "fmodf(") + x + ", " + y + ")";
    fail("codegen: unknown binary op {}", f);
  }

  // cast: in[0] converted to the node's dtype (a float to an integer truncates).
  void emitCast(std::ostringstream& o, const GNode& n, const std::string& ct) {
    std::string a = broadcastOperand(o, n, 0);
    DType from = operand(n, 0).dtype;
    std::string e = conv(a, from, ct);
    if (ct == "long long" && computeType(from) != "long long" && computeType(from) != "bool")
      e = "((long long)(" + a + "))";
    o << "  return " << round(n.dtype, e) << ";\n";
  }

  // where: in[0] ? in[1] : in[2], all broadcast.
  void emitWhere(std::ostringstream& o, const GNode& n, const std::string& ct) {
    std::string p = broadcastOperand(o, n, 0), a = broadcastOperand(o, n, 1), b = broadcastOperand(o, n, 2);
    o << "  return "
      << round(n.dtype, conv(p, operand(n, 0).dtype, "bool") + " ? " + conv(a, operand(n, 1).dtype, ct) + " : " +
                            conv(b, operand(n, 2).dtype, ct))
      << ";\n";
  }

  // clamp: in[0] at least f[0] (when iv[0]) and at most f[1] (when iv[1]).
  void emitClamp(std::ostringstream& o, const GNode& n, const std::string& ct) {
    std::string x = conv(broadcastOperand(o, n, 0), operand(n, 0).dtype, ct);
    std::string e = x;
    bool d = ct == "double";
    if (n.iv.at(0)) e = "fx_maxp(" + e + ", (" + ct + ")" + (ct == "long long" ? std::to_string(static_cast<long long>(n.f.at(0))) : floatLit(n.f.at(0), d)) + ")";
    if (n.iv.at(1)) e = "fx_minp(" + e + ", (" + ct + ")" + (ct == "long long" ? std::to_string(static_cast<long long>(n.f.at(1))) : floatLit(n.f.at(1), d)) + ")";
    o << "  return " << round(n.dtype, e) << ";\n";
  }

  // remap: in[0] read at the index its view kind n.s maps the output index to (j).
  void emitRemap(std::ostringstream& o, const GNode& n, const std::string& ct) {
    const GNode& src = operand(n, 0);
    size_t ri = src.shape.size();
    o << "  long long j[" << std::max<size_t>(ri, 1) << "]; j[0] = 0;\n";
    if (n.s == "reshape") {
      linearIndex(o, "jr", n.shape, src.shape, "i");
      for (size_t k = 0; k < ri; ++k) o << "  j[" << k << "] = jr[" << k << "];\n";
    } else if (n.s == "permute") {
      for (size_t k = 0; k < n.iv.size(); ++k) o << "  j[" << n.iv[k] << "] = i[" << k << "];\n";
    } else if (n.s == "slice") {
      for (size_t k = 0; k < ri; ++k)
        o << "  j[" << k << "] = " << (static_cast<int64_t>(k) == n.iv[0] ? sx(n.sv[0]) + " + i[" + std::to_string(k) + "] * " + sx(n.sv[1]) : "i[" + std::to_string(k) + "]") << ";\n";
    } else if (n.s == "select") {
      size_t d = static_cast<size_t>(n.iv[0]);
      for (size_t k = 0, q = 0; k < ri; ++k)
        o << "  j[" << k << "] = " << (k == d ? sx(n.sv[0]) : "i[" + std::to_string(q++) + "]") << ";\n";
    } else if (n.s == "unsqueeze") {
      size_t d = static_cast<size_t>(n.iv[0]);
      for (size_t k = 0, q = 0; q < n.shape.size(); ++q) {
        if (q == d) continue;
        o << "  j[" << k++ << "] = i[" << q << "];\n";
      }
    } else if (n.s == "squeeze") {
      std::set<int64_t> dims(n.iv.begin(), n.iv.end());
      for (size_t k = 0, q = 0; k < ri; ++k)
        o << "  j[" << k << "] = " << (dims.count(static_cast<int64_t>(k)) ? std::string("0") : "i[" + std::to_string(q++) + "]") << ";\n";
    } else if (n.s == "repeat") {  // out dim lead + k reads src dim k modulo its size
      size_t lead = n.shape.size() - ri;
      for (size_t k = 0; k < ri; ++k) o << "  j[" << k << "] = i[" << lead + k << "] % " << sx(src.shape[k]) << ";\n";
    } else if (n.s == "repeat_interleave") {  // iv[0] = dim, sv[0] = repeats
      for (size_t k = 0; k < ri; ++k)
        o << "  j[" << k << "] = i[" << k << "]" << (static_cast<int64_t>(k) == n.iv.at(0) ? " / " + sx(n.sv.at(0)) : "")
          << ";\n";
    } else if (n.s == "flip") {  // iv = the reversed dims
      std::set<int64_t> dims(n.iv.begin(), n.iv.end());
      for (size_t k = 0; k < ri; ++k)
        o << "  j[" << k << "] = "
          << (dims.count(static_cast<int64_t>(k)) ? "(" + sx(src.shape[k]) + " - 1) - i[" + std::to_string(k) + "]"
                                                  : "i[" + std::to_string(k) + "]")
          << ";\n";
    } else if (n.s == "roll") {  // iv = (dim, shift) pairs: j = (i - shift) mod size, never negative
      for (size_t k = 0; k < ri; ++k) o << "  j[" << k << "] = i[" << k << "];\n";
      for (size_t p = 0; p + 1 < n.iv.size(); p += 2) {
        const std::string d = std::to_string(n.iv[p]), size = sx(src.shape[static_cast<size_t>(n.iv[p])]);
        o << "  j[" << d << "] = ((i[" << d << "] - (" << n.iv[p + 1] << "LL)) % " << size << " + " << size << ") % "
          << size << ";\n";
      }
    } else if (n.s == "expand") {
      bcastIndex(o, "jb", src.shape, n.shape, "i");
      for (size_t k = 0; k < ri; ++k) o << "  j[" << k << "] = jb[" << k << "];\n";
    } else {
      fail("codegen: unknown remap {}", n.s);
    }
    o << "  return " << conv(call(n.in[0], "j"), src.dtype, ct) << ";\n";
  }

  // cat: the operand whose extent along iv[0] holds the index (empty operands skipped), read
  // at the index less that operand's start.
  void emitCat(std::ostringstream& o, const GNode& n, const std::string& ct) {
    size_t d = static_cast<size_t>(n.iv[0]);
    size_t r = n.shape.size();
    o << "  long long j[" << r << "];";
    for (size_t k = 0; k < r; ++k) o << " j[" << k << "] = i[" << k << "];";
    o << "\n  long long p = i[" << d << "];\n";
    SymExpr start = SymExpr::integer(0);
    for (size_t k = 0; k < n.in.size(); ++k) {
      const GNode& s = operand(n, k);
      SymExpr sz = s.shape.size() == r ? s.shape[d] : SymExpr::integer(0);
      if (sz.isInt() && sz.intValue() == 0) continue;
      SymExpr end = start + sz;
      o << "  if (p < " << sx(end) << ") { j[" << d << "] = p - " << sx(start) << "; return "
        << conv(call(n.in[k], "j"), s.dtype, ct) << "; }\n";
      start = end;
    }
    o << "  return (" << ct << ")0;\n";
  }

  // pad: in[0] shifted by the leading pads (sv pairs from the last dim), f[0] outside it.
  void emitPad(std::ostringstream& o, const GNode& n, const std::string& ct) {
    const GNode& src = operand(n, 0);
    size_t r = n.shape.size();
    o << "  long long j[" << std::max<size_t>(r, 1) << "]; j[0] = 0;";
    for (size_t k = 0; k < r; ++k) o << " j[" << k << "] = i[" << k << "];";
    o << "\n";
    for (size_t p = 0; p * 2 < n.sv.size(); ++p) {
      size_t dim = r - 1 - p;
      o << "  j[" << dim << "] = i[" << dim << "] - " << sx(n.sv[2 * p]) << "; if (j[" << dim << "] < 0 || j[" << dim
        << "] >= " << sx(src.shape[dim]) << ") return " << round(n.dtype, "(" + ct + ")" + floatLit(n.f.at(0), true)) << ";\n";
    }
    o << "  return " << conv(call(n.in[0], "j"), src.dtype, ct) << ";\n";
  }

  // iota: f[0] + f[1] * index[iv[0]], computed in f64.
  void emitIota(std::ostringstream& o, const GNode& n, const std::string& ct) {
    o << "  return " << round(n.dtype, "(" + ct + ")(" + floatLit(n.f.at(0), true) + " + " + floatLit(n.f.at(1), true) +
                                           " * (double)i[" + std::to_string(n.iv.at(0)) + "])")
      << ";\n";
  }

  // eye: 1 on the diagonal of the two dims, else 0.
  void emitEye(std::ostringstream& o, const GNode&, const std::string& ct) {
    o << "  return i[0] == i[1] ? (" << ct << ")1 : (" << ct << ")0;\n";
  }

  // gather (iv[1] = 3), index_select (1) and embedding (2): in[0] read where in[1] points
  // along iv[0] (negative indices wrap).
  void emitGather(std::ostringstream& o, const GNode& n, const std::string& ct) {
    const GNode& src = operand(n, 0);
    const GNode& idx = operand(n, 1);
    int64_t kind = n.iv.at(1);
    size_t rs = src.shape.size();
    o << "  long long j[" << std::max<size_t>(rs, 1) << "]; j[0] = 0;\n";
    if (kind == 2) {  // embedding: out = idx.shape + [H]
      size_t ri = idx.shape.size();
      o << "  long long q[" << std::max<size_t>(ri, 1) << "]; q[0] = 0;";
      for (size_t k = 0; k < ri; ++k) o << " q[" << k << "] = i[" << k << "];";
      o << "\n  j[0] = " << checkedIndex(n, "embedding", conv(call(n.in[1], "q"), idx.dtype, "long long"), src.shape.at(0), false)
        << "; j[1] = i[" << ri << "];\n";
    } else {
      size_t d = static_cast<size_t>(n.iv.at(0));
      for (size_t k = 0; k < rs; ++k) o << "  j[" << k << "] = i[" << k << "];\n";
      if (kind == 1) {
        o << "  long long q[1]; q[0] = i[" << d << "];\n";
        o << "  j[" << d << "] = "
          << checkedIndex(n, "index_select", conv(call(n.in[1], "q"), idx.dtype, "long long"), src.shape[d], true) << ";\n";
      } else {
        o << "  j[" << d << "] = "
          << checkedIndex(n, "gather", conv(call(n.in[1], "i"), idx.dtype, "long long"), src.shape[d], true) << ";\n";
      }
    }
    o << "  return " << conv(call(n.in[0], "j"), src.dtype, ct) << ";\n";
  }

  // index: advanced indexing of in[0] from dim iv[0] by the index tensors in[1..], which
  // broadcast together to the output dims they replace.
  void emitIndex(std::ostringstream& o, const GNode& n, const std::string& ct) {
    const GNode& src = operand(n, 0);
    size_t d0 = static_cast<size_t>(n.iv.at(0));
    size_t m = n.in.size() - 1;
    size_t nb = n.shape.size() + m - src.shape.size();
    std::vector<SymExpr> bshape(n.shape.begin() + static_cast<long>(d0), n.shape.begin() + static_cast<long>(d0 + nb));
    size_t rs = src.shape.size();
    o << "  long long j[" << std::max<size_t>(rs, 1) << "]; j[0] = 0;\n";
    for (size_t k = 0; k < d0; ++k) o << "  j[" << k << "] = i[" << k << "];\n";
    o << "  long long ib[" << std::max<size_t>(nb, 1) << "]; ib[0] = 0;";
    for (size_t k = 0; k < nb; ++k) o << " ib[" << k << "] = i[" << d0 + k << "];";
    o << "\n";
    for (size_t t = 0; t < m; ++t) {
      std::string var = "q" + std::to_string(t);
      bcastIndex(o, var, operand(n, 1 + t).shape, bshape, "ib");
      o << "  j[" << d0 + t << "] = "
        << checkedIndex(n, "index", conv(call(n.in[1 + t], var), operand(n, 1 + t).dtype, "long long"), src.shape[d0 + t], true)
        << ";\n";
    }
    for (size_t k = d0 + m; k < rs; ++k) o << "  j[" << k << "] = i[" << k - m + nb << "];\n";
    o << "  return " << conv(call(n.in[0], "j"), src.dtype, ct) << ";\n";
  }

  // tri: triu (iv[0] = 1) / tril of in[0] with diagonal sv[0].
  void emitTri(std::ostringstream& o, const GNode& n, const std::string& ct) {
    size_t r = n.shape.size();
    std::string a = broadcastOperand(o, n, 0);
    o << "  long long dd = i[" << r - 1 << "] - i[" << r - 2 << "];\n";
    o << "  bool keep = " << (n.iv.at(0) ? "dd >= " : "dd <= ") << sx(n.sv.at(0)) << ";\n";
    o << "  return keep ? " << conv(a, operand(n, 0).dtype, ct) << " : (" << ct << ")0;\n";
  }

  // slice_scatter: in[1] at the positions start, start + step, ... (< end) along iv[0]
  // (sv = start, end, step), else in[0].
  void emitSliceScatter(std::ostringstream& o, const GNode& n, const std::string& ct) {
    size_t d = static_cast<size_t>(n.iv.at(0));
    size_t r = n.shape.size();
    o << "  long long p = i[" << d << "] - " << sx(n.sv[0]) << ";\n";
    o << "  if (p >= 0 && i[" << d << "] < " << sx(n.sv[1]) << " && p % " << sx(n.sv[2]) << " == 0) {\n";
    o << "    long long j[" << r << "];";
    for (size_t k = 0; k < r; ++k) o << " j[" << k << "] = i[" << k << "];";
    o << " j[" << d << "] = p / " << sx(n.sv[2]) << ";\n";
    o << "    return " << conv(call(n.in[1], "j"), operand(n, 1).dtype, ct) << ";\n  }\n";
    o << "  return " << conv(call(n.in[0], "i"), operand(n, 0).dtype, ct) << ";\n";
  }

  // select_scatter: in[1] where the index along iv[0] is sv[0], else in[0].
  void emitSelectScatter(std::ostringstream& o, const GNode& n, const std::string& ct) {
    size_t d = static_cast<size_t>(n.iv.at(0));
    size_t r = n.shape.size();
    o << "  if (i[" << d << "] == " << sx(n.sv.at(0)) << ") {\n";
    o << "    long long j[" << std::max<size_t>(r - 1, 1) << "]; j[0] = 0;";
    for (size_t k = 0, q = 0; k < r; ++k)
      if (k != d) o << " j[" << q++ << "] = i[" << k << "];";
    o << "\n    return " << conv(call(n.in[1], "j"), operand(n, 1).dtype, ct) << ";\n  }\n";
    o << "  return " << conv(call(n.in[0], "i"), operand(n, 0).dtype, ct) << ";\n";
  }

  // cumsum along iv[0]: a loop over the elements up to the index, rounded at every step.
  void emitCumsum(std::ostringstream& o, const GNode& n, const std::string& ct) {
    size_t d = static_cast<size_t>(n.iv.at(0));
    size_t r = n.shape.size();
    std::string acc = ct == "long long" || ct == "bool" ? "long long" : ct;
    o << "  long long j[" << std::max<size_t>(r, 1) << "]; j[0] = 0;";
    for (size_t k = 0; k < r; ++k) o << " j[" << k << "] = i[" << k << "];";
    o << "\n  " << acc << " s = 0;\n  for (long long k = 0; k <= i[" << d << "]; ++k) { j[" << d << "] = k; s = fx_r_"
      << suffix(n.dtype) << "(s + " << conv(call(n.in[0], "j"), operand(n, 0).dtype, acc) << "); }\n";
    o << "  return " << round(n.dtype, "s") << ";\n";
  }

  // vLLM rotary_embedding on in[0] ([T, ...] viewed as [T, H, head]) with positions in[1]
  // ([T]) and cos_sin_cache in[2] ([P, rot]: cos | sin); every product and sum rounded.
  // iv = {head size, rotary dim, neox: pairs are the halves (1) or adjacent elements (0)}.
  void emitRotary(std::ostringstream& o, const GNode& n, const std::string& ct) {
    const GNode& x = operand(n, 0);
    size_t r = x.shape.size();
    int64_t head = n.iv.at(0), rot = n.iv.at(1), half = rot / 2;
    bool neox = n.iv.at(2) != 0;
    o << "  long long lin = 0;";
    for (size_t k = 1; k < r; ++k) o << " lin = lin * " << sx(x.shape[k]) << " + i[" << k << "];";
    o << "\n  long long w = lin % " << head << "LL;\n";
    o << "  " << ct << " self = " << conv(call(n.in[0], "i"), x.dtype, ct) << ";\n";
    o << "  if (w >= " << rot << "LL) return self;\n";
    if (n.iv.size() > 3) o << "  if (lin >= " << n.iv[3] << "LL) return self;  // past the rotated columns\n";
    o << "  long long q0[1]; q0[0] = i[0];\n";
    o << "  long long p = "
      << checkedIndex(n, "rotary_embedding", conv(call(n.in[1], "q0"), operand(n, 1).dtype, "long long"),
                      operand(n, 2).shape.at(0), false)
      << ";\n";
    o << "  bool first; long long k, partner;\n";
    if (neox)
      o << "  first = w < " << half << "LL; k = first ? w : w - " << half << "LL; partner = first ? lin + " << half
        << "LL : lin - " << half << "LL;\n";
    else
      o << "  first = (w % 2) == 0; k = w / 2; partner = first ? lin + 1 : lin - 1;\n";
    o << "  long long cc[2]; cc[0] = p; cc[1] = k; long long sc[2]; sc[0] = p; sc[1] = k + " << half << "LL;\n";
    o << "  float cs = " << round(n.dtype, conv(call(n.in[2], "cc"), operand(n, 2).dtype, "float")) << ";\n";
    o << "  float sn = " << round(n.dtype, conv(call(n.in[2], "sc"), operand(n, 2).dtype, "float")) << ";\n";
    o << "  long long j[" << std::max<size_t>(r, 1) << "]; j[0] = i[0]; { long long t = partner;";
    for (size_t k = r; k-- > 1;) o << " j[" << k << "] = t % " << sx(x.shape[k]) << "; t /= " << sx(x.shape[k]) << ";";
    o << " }\n";
    o << "  float other = " << conv(call(n.in[0], "j"), x.dtype, "float") << ";\n";
    o << "  return first ? " << round(n.dtype, round(n.dtype, "self * cs") + " - " + round(n.dtype, "other * sn"))
      << " : " << round(n.dtype, round(n.dtype, "self * cs") + " + " + round(n.dtype, "other * sn")) << ";\n";
  }

  // scatter (iv[1] = 0: last write wins, 1: add), index_add (iv[1] = 2, f[0] = alpha) and
  // index_copy / index_put on dim 0 (iv[1] = 3, last write wins) as a
  // pure function of the output index: self's element plus every source element whose index
  // entry names this position along iv[0] (a loop over the index's extent along that dim).
  void emitScatter(std::ostringstream& o, const GNode& n, const std::string& ct) {
    const GNode& self = cg_.node(n.in.at(0));
    const GNode& idx = cg_.node(n.in.at(1));
    const GNode& src = cg_.node(n.in.at(2));
    const size_t d = static_cast<size_t>(n.iv.at(0)), r = n.shape.size();
    const int64_t mode = n.iv.at(1);
    const std::string acc = ct == "bool" ? "long long" : ct;
    o << "  " << acc << " v = " << conv(call(n.in[0], "i"), self.dtype, acc) << ";\n";
    o << "  long long q[" << std::max<size_t>(r, 1) << "]; q[0] = 0;";
    for (size_t k = 0; k < r; ++k) o << " q[" << k << "] = i[" << k << "];";
    o << "\n";
    if (mode < 2)  // scatter: positions outside the index tensor's extent keep self
      for (size_t k = 0; k < r; ++k)
        if (k != d && k < idx.shape.size()) o << "  if (i[" << k << "] >= " << sx(idx.shape[k]) << ") return v;\n";
    const bool one_d = mode == 2 || mode == 3;  // index_add / index_copy: a 1-D index along d
    std::string extent = one_d ? sx(idx.shape.at(0)) : sx(idx.shape.at(d));
    static const char* const kModeOps[] = {"scatter", "scatter_add", "index_add", "index_copy"};
    const char* op = kModeOps[std::clamp<int64_t>(mode, 0, 3)];
    o << "  for (long long p = 0; p < " << extent << "; ++p) {\n";
    if (one_d) {
      o << "    long long ip[1]; ip[0] = p;\n";
      o << "    if (" << checkedIndex(n, op, conv(call(n.in[1], "ip"), idx.dtype, "long long"), self.shape[d], true)
        << " != i[" << d << "]) continue;\n";
    } else {
      o << "    q[" << d << "] = p;\n";
      o << "    if (" << checkedIndex(n, op, conv(call(n.in[1], "q"), idx.dtype, "long long"), self.shape[d], true)
        << " != i[" << d << "]) continue;\n";
    }
    o << "    q[" << d << "] = p;\n";
    std::string sv = conv(call(n.in[2], "q"), src.dtype, acc);
    if (mode == 0 || mode == 3) o << "    v = " << sv << ";\n";
    else if (mode == 1) o << "    v = v + " << sv << ";\n";
    else o << "    v = v + (" << acc << ")" << floatLit(n.f.at(0), acc == "double") << " * " << sv << ";\n";
    o << "  }\n";
    o << "  return " << round(n.dtype, conv("v", acc == ct ? n.dtype : DType::I64, ct)) << ";\n";
  }

  // histc: bin i[0] of iv[0] equal bins over [f[0], f[1]] (both 0: the input's range; equal:
  // widened by 1 each side) counts the input elements x with floor((x - lo) / (hi - lo) *
  // bins) == i[0], x == hi in the last bin, x outside not counted (the interpreter's rule, in
  // f64). A loop over the whole input per bin: meant for expert-routing counts.
  void emitHistc(std::ostringstream& o, const GNode& n, const std::string& ct) {
    const GNode& src = cg_.node(n.in.at(0));
    const size_t r = src.shape.size();
    std::string total = "1LL";
    for (size_t k = 0; k < r; ++k) total += " * " + sx(src.shape[k]);
    o << "  long long j[" << std::max<size_t>(r, 1) << "]; j[0] = 0;\n";
    o << "  const long long total = " << total << ", bins = " << n.iv.at(0) << "LL;\n";
    // The loop header over the input's elements: x is element p, j[] its row-major index.
    std::string element = "  for (long long p = 0; p < total; ++p) {\n    { long long t = p;";
    for (size_t k = r; k-- > 0;)
      element += " j[" + std::to_string(k) + "] = t % " + sx(src.shape[k]) + "; t /= " + sx(src.shape[k]) + ";";
    element += " }\n    const double x = " + conv(call(n.in[0], "j"), src.dtype, "double") + ";\n";
    o << "  double lo = " << floatLit(n.f.at(0), true) << ", hi = " << floatLit(n.f.at(1), true) << ";\n";
    if (n.f.at(0) == 0 && n.f.at(1) == 0) {
      o << "  bool any = false;\n" << element;
      o << "    if (!any || x < lo) lo = x;\n    if (!any || x > hi) hi = x;\n    any = true;\n  }\n";
    }
    o << "  if (lo == hi) { lo -= 1.0; hi += 1.0; }\n";
    o << "  long long count = 0;\n" << element;
    o << "    if (!(x >= lo && x <= hi)) continue;\n";
    o << "    long long b = (long long)((x - lo) / (hi - lo) * (double)bins);\n";
    o << "    if (b >= bins) b = bins - 1;\n";
    o << "    if (b == i[0]) ++count;\n  }\n";
    o << "  return " << round(n.dtype, conv("count", DType::I64, ct)) << ";\n";
  }

  // grouped_mm: out[i, j] = sum_k self[i, k] * mat2[g, k, j] for the group g whose rows
  // [offs[g-1], offs[g]) hold row i; rows past the last offset are 0. Accumulated in f64,
  // rounded to f32 and then to the output dtype, as the interpreter does.
  void emitGroupedMm(std::ostringstream& o, const GNode& n, const std::string& ct) {
    const GNode& a = cg_.node(n.in.at(0));
    const GNode& b = cg_.node(n.in.at(1));
    const GNode& offs = cg_.node(n.in.at(2));
    o << "  long long q[1]; long long g = 0;\n";
    o << "  for (; g < " << sx(b.shape.at(0)) << "; ++g) { q[0] = g; if (i[0] < "
      << conv(call(n.in[2], "q"), offs.dtype, "long long") << ") break; }\n";
    o << "  if (g == " << sx(b.shape.at(0)) << ") return (" << ct << ")0;\n";
    o << "  long long ia[2]; ia[0] = i[0]; long long ib[3]; ib[0] = g; ib[2] = i[1];\n";
    o << "  double acc = 0;\n";
    o << "  for (long long k = 0; k < " << sx(a.shape.at(1)) << "; ++k) {\n";
    o << "    ia[1] = k; ib[1] = k;\n";
    o << "    acc += " << conv(call(n.in[0], "ia"), a.dtype, "double") << " * "
      << conv(call(n.in[1], "ib"), b.dtype, "double") << ";\n  }\n";
    o << "  return " << round(n.dtype, conv("(float)acc", DType::F32, ct)) << ";\n";
  }

  // conv: iv = {spatial dims S, groups, stride[S], padding[S], dilation[S]}; inputs x [N, C,
  // *spatial], weight [Cout, C / groups, *kernel], optional bias [Cout]. Output element i sums
  // x * weight over its group's input channels and the kernel window (positions outside the
  // input are the zero padding), in f64 as the interpreter, rounded to f32 then to the dtype.
  void emitConv(std::ostringstream& o, const GNode& n, const std::string& ct) {
    const GNode& x = cg_.node(n.in.at(0));
    const GNode& w = cg_.node(n.in.at(1));
    const size_t sd = static_cast<size_t>(n.iv.at(0)), r = sd + 2;
    const int64_t groups = n.iv.at(1);
    auto param = [&](size_t which, size_t d) { return std::to_string(n.iv.at(2 + which * sd + d)); };
    const std::string cg = sx(w.shape.at(1)), og = "(" + sx(w.shape.at(0)) + " / " + std::to_string(groups) + "LL)";
    o << "  long long ix[" << r << "]; ix[0] = i[0]; long long iw[" << r << "]; iw[0] = i[1];\n";
    o << "  const long long g = i[1] / " << og << ";\n";
    o << "  double acc = 0;\n";
    o << "  for (long long ch = 0; ch < " << cg << "; ++ch) {\n";  // `c` is the kernel's context
    o << "    ix[1] = g * " << cg << " + ch; iw[1] = ch;\n";
    for (size_t d = 0; d < sd; ++d) {
      const std::string k = "k" + std::to_string(d), p = "p" + std::to_string(d);
      o << "    for (long long " << k << " = 0; " << k << " < " << sx(w.shape.at(d + 2)) << "; ++" << k << ") {\n";
      o << "      const long long " << p << " = i[" << d + 2 << "] * " << param(0, d) << "LL - " << param(1, d) << "LL + "
        << k << " * " << param(2, d) << "LL;\n";
      o << "      if (" << p << " < 0 || " << p << " >= " << sx(x.shape.at(d + 2)) << ") continue;\n";
      o << "      ix[" << d + 2 << "] = " << p << "; iw[" << d + 2 << "] = " << k << ";\n";
    }
    o << "      acc += " << conv(call(n.in[0], "ix"), x.dtype, "double") << " * "
      << conv(call(n.in[1], "iw"), w.dtype, "double") << ";\n";
    for (size_t d = 0; d < sd; ++d) o << "    }\n";
    o << "  }\n";
    if (n.in.size() > 2) {
      o << "  long long ib[1]; ib[0] = i[1];\n";
      o << "  acc += " << conv(call(n.in[2], "ib"), cg_.node(n.in[2]).dtype, "double") << ";\n";
    }
    o << "  return " << round(n.dtype, conv("(float)acc", DType::F32, ct)) << ";\n";
  }

  // topk/sort along iv[0] (iv[1]: largest first, iv[2]: return the index): output position k
  // holds the element whose rank is k, rank = number of elements ordered before it (NaN
  // counts as the largest value, ties keep index order, as a stable sort). O(n^2) per
  // element: meant for expert-gating rows.
  void emitTopk(std::ostringstream& o, const GNode& n, const std::string& ct) {
    const GNode& src = cg_.node(n.in.at(0));
    const size_t d = static_cast<size_t>(n.iv.at(0)), r = n.shape.size();
    const bool largest = n.iv.at(1) != 0, want_index = n.iv.at(2) != 0;
    const std::string vt = computeType(src.dtype);
    o << "  long long j[" << std::max<size_t>(r, 1) << "]; j[0] = 0;";
    for (size_t k = 0; k < r; ++k) o << " j[" << k << "] = i[" << k << "];";
    o << "\n  const long long n = " << sx(src.shape.at(d)) << ";\n";
    o << "  for (long long p = 0; p < n; ++p) {\n";
    o << "    j[" << d << "] = p; const " << vt << " v = " << call(n.in[0], "j") << ";\n";
    o << "    long long rank = 0;\n";
    o << "    for (long long q = 0; q < n; ++q) {\n";
    o << "      if (q == p) continue;\n";
    o << "      j[" << d << "] = q; const " << vt << " w = " << call(n.in[0], "j") << ";\n";
    o << "      const bool wn = w != w, vn = v != v;\n";
    const bool nan_first = largest || (n.iv.size() > 3 && n.iv[3] != 0);
    if (largest)
      o << "      if (wn ? (!vn || q < p) : (!vn && (w > v || (w == v && q < p)))) ++rank;\n";
    else if (nan_first)  // min/argmin: NaN propagates, so it comes first
      o << "      if (wn ? (!vn || q < p) : (!vn && (w < v || (w == v && q < p)))) ++rank;\n";
    else
      o << "      if (vn ? (!wn || q < p) : (!wn && (w < v || (w == v && q < p)))) ++rank;\n";
    o << "    }\n";
    o << "    if (rank == i[" << d << "]) return "
      << (want_index ? conv("p", DType::I64, ct) : round(n.dtype, conv("v", src.dtype, ct))) << ";\n";
    o << "  }\n  return (" << ct << ")0;\n";
  }

  const Codegen& cg_;
  std::ostringstream funcs_;
  std::set<int> emitted_;
  std::vector<SymExpr> int_args_;
  std::map<std::string, int> int_index_;
  std::vector<int> tensor_args_;
  std::vector<std::pair<std::string, std::string>> index_sites_;  // {graph node, op} of each checked index read
};

std::string accType(const GNode& red, const GNode& src) {
  std::string s = computeType(src.dtype);
  if (red.s == "sum" || red.s == "mean") {
    if (s == "bool") return "long long";
    return s;
  }
  return s == "bool" ? "long long" : s;
}

std::string initVal(const std::string& kind, const std::string& acc) {
  if (kind == "sum" || kind == "mean") return "(" + acc + ")0";
  bool mx = kind == "max";
  if (acc == "float") return mx ? "-FX_INF" : "FX_INF";
  if (acc == "double") return mx ? "-(double)FX_INF" : "(double)FX_INF";
  return mx ? "(-9223372036854775807LL - 1)" : "9223372036854775807LL";
}

// The reductions reachable from the outputs, in creation (topological) order; a pointwise
// kernel (kred 0) may have none.
std::vector<int> reachableReductions(const Codegen& cg, const std::vector<StoredOutput>& outputs, int kred) {
  std::vector<int> reductions;
  std::set<int> seen;
  std::vector<int> stack;
  for (const auto& so : outputs) stack.push_back(so.gnode);
  while (!stack.empty()) {
    int k = stack.back();
    stack.pop_back();
    if (!seen.insert(k).second) continue;
    const GNode& g = cg.node(k);
    if (g.op == "reduce") reductions.push_back(k);
    for (int a : g.in) stack.push_back(a);
  }
  std::sort(reductions.begin(), reductions.end());
  if (kred == 0 && !reductions.empty()) fail("codegen: reduction in a pointwise kernel ({})", cg.node(reductions[0]).origin);
  return reductions;
}

// The graph nodes fused into a kernel: its members' origins, each once, in member order.
std::vector<std::string> fusedNodeNames(const Codegen& cg, const std::vector<int>& members) {
  std::vector<std::string> names;
  for (int m : members) {
    if (!cg.node(m).origin.empty()) {
      bool seen = false;
      for (const auto& s : names) seen = seen || s == cg.node(m).origin;
      if (!seen) names.push_back(cg.node(m).origin);
    }
  }
  return names;
}

// Computed value `v` converted to the type a destination of dtype `t` stores.
std::string storedValue(DType t, const std::string& v) {
  switch (t) {
    case DType::BF16: return "fx_st_bf16(" + v + ")";
    case DType::F16: return "fx_st_f16(" + v + ")";
    case DType::F8E4M3FN: return "fx_st_f8e4m3fn(" + v + ")";
    case DType::F8E5M2: return "fx_st_f8e5m2(" + v + ")";
    case DType::BOOL: return "(unsigned char)(" + v + " ? 1 : 0)";
    default: return "(" + std::string(storeType(t)) + ")(" + v + ")";
  }
}

// The body of a generated kernel: the loop over its domain (grid-stride over the elements, or
// one CTA per row whose reductions are computed first) storing every output at each domain
// index d. The emitter numbers int arguments in the order the body names them.
class KernelBody {
 public:
  // `out_ptr`: each output's pointer parameter.
  KernelBody(const Codegen& cg, Emitter& em, const std::vector<SymExpr>& domain, int kred,
             const std::vector<StoredOutput>& outputs, const std::vector<int>& out_ptr)
      : cg_(cg), em_(em), domain_(domain), kred_(kred), outputs_(outputs), out_ptr_(out_ptr) {}

  // A pointwise kernel: one thread per element of the domain (grid-stride loop).
  std::string pointwise() {
    const size_t R = domain_.size();
    std::ostringstream body;
    body << "  const long long n = " << em_.sx(numelOf(domain_)) << ";\n";
    body << "  for (long long lin = (long long)blockIdx.x * blockDim.x + threadIdx.x; lin < n; lin += (long long)gridDim.x * blockDim.x) {\n";
    body << "    long long d[" << std::max<size_t>(R, 1) << "]; d[0] = 0;\n";
    if (R > 0) unravel(body, "lin", 0, R, "d");
    storeOutputs(body);
    body << "  }\n";
    return body.str();
  }

  // A row kernel: one CTA per row (the leading dims); each of `reductions` is computed over
  // the row's columns (the trailing kred dims) before the columns' outputs are stored.
  std::string rows(const std::vector<int>& reductions) {
    const size_t R = domain_.size();
    std::ostringstream body;
    size_t lead = R - static_cast<size_t>(kred_);
    std::vector<SymExpr> rows_shape(domain_.begin(), domain_.begin() + static_cast<long>(lead));
    std::vector<SymExpr> cols_shape(domain_.begin() + static_cast<long>(lead), domain_.end());
    body << "  const long long rows = " << em_.sx(numelOf(rows_shape)) << ", cols = " << em_.sx(numelOf(cols_shape)) << ";\n";
    body << "  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {\n";
    body << "    long long d[" << std::max<size_t>(R, 1) << "]; d[0] = 0;\n";
    if (lead > 0) unravel(body, "row", 0, lead, "d");
    for (int r : reductions) reduceRow(body, r, lead);
    body << "    for (long long col = threadIdx.x; col < cols; col += blockDim.x) {\n";
    std::ostringstream un;
    unravel(un, "col", lead, R, "d");
    body << un.str();
    storeOutputs(body);
    body << "    }\n";
    body << "    __syncthreads();\n";
    body << "  }\n";
    return body.str();
  }

 private:
  // Linear index `lin` over domain dims [from, to) as their coordinates var[from..to).
  void unravel(std::ostringstream& o, const std::string& lin, size_t from, size_t to, const std::string& var) {
    o << "    { long long t = " << lin << ";";
    for (size_t k = to; k-- > from;) {
      if (k > from)
        o << " " << var << "[" << k << "] = t % " << em_.sx(domain_[k]) << "; t /= " << em_.sx(domain_[k]) << ";";
      else
        o << " " << var << "[" << k << "] = t;";
    }
    o << " }\n";
  }

  // Reduction `r` of the current row: each thread folds a strided share of the columns, the
  // block combines them, and the result goes to the context (c.r<r>) for the nodes reading it.
  void reduceRow(std::ostringstream& body, int r, size_t lead) {
    const GNode& red = cg_.node(r);
    const GNode& src = cg_.node(red.in.at(0));
    std::string acc = accType(red, src);
    std::string op = red.s == "max" ? "FxMax()" : red.s == "min" ? "FxMin()" : "FxSum()";
    std::string comb = red.s == "max" ? "fx_maxp(a, v)" : red.s == "min" ? "fx_minp(a, v)" : "a + v";
    body << "    { " << acc << " a = " << initVal(red.s, acc) << ";\n";
    body << "      for (long long col = threadIdx.x; col < cols; col += blockDim.x) {\n";
    std::ostringstream un;
    unravel(un, "col", lead, domain_.size(), "d");
    body << "  " << un.str();
    body << "        " << acc << " v = " << em_.conv(em_.call(red.in[0], "d"), src.dtype, acc) << "; a = " << comb << ";\n";
    body << "      }\n";
    body << "      a = fx_block_reduce(a, " << op << ");\n";
    std::string res = red.s == "mean" ? "(a / (" + acc + ")cols)" : "a";
    body << "      c.r" << r << " = " << em_.round(red.dtype, em_.conv(res, red.s == "mean" || red.s == "sum" ? (acc == "long long" ? DType::I64 : acc == "double" ? DType::F64 : DType::F32) : src.dtype, computeType(red.dtype))) << ";\n";
    body << "    }\n";
  }

  // Every output's value at the domain index d written to its destination.
  void storeOutputs(std::ostringstream& o) {
    for (size_t q = 0; q < outputs_.size(); ++q) {
      const StoredOutput& so = outputs_[q];
      const GNode& g = cg_.node(so.gnode);
      std::ostringstream blk;
      std::string var = "s" + std::to_string(q);
      // A per-row value (a row statistic of another shape, e.g. without keepdim) is stored
      // once per row, by the first column, at the row's linear index.
      bool per_row = so.per_row || storedPerRow(g.shape, domain_, kred_);
      if (per_row)
        em_.linearIndex(blk, var, rowsOf(domain_, kred_), g.shape, "d");
      else if (broadcastsTo(g.shape, domain_))
        em_.bcastIndex(blk, var, g.shape, domain_, "d");
      else
        em_.linearIndex(blk, var, domain_, g.shape, "d");
      o << "    " << (per_row ? "if (col == 0) {" : "{") << blk.str();
      o << "      long long off = 0";
      for (size_t k = 0; k < so.dest.shape.size(); ++k) o << " + " << var << "[" << k << "] * " << em_.sx(so.dest.stride[k]);
      o << ";\n";
      std::string v = em_.call(so.gnode, var);
      std::string ptr = "((" + std::string(storeType(so.dest.dtype)) + "*)c.p" + std::to_string(out_ptr_[q]) + ")[off]";
      o << "      " << ptr << " = " << storedValue(so.dest.dtype, v) << ";\n    }\n";
    }
  }

  const Codegen& cg_;
  Emitter& em_;
  const std::vector<SymExpr>& domain_;
  const int kred_;
  const std::vector<StoredOutput>& outputs_;
  const std::vector<int>& out_ptr_;
};

// Threads per block: 256, or for a row kernel whose row length is known, a block that fits it
// (32 to 512).
int threadsPerBlock(const std::vector<SymExpr>& domain, int kred) {
  int threads = 256;
  if (kred > 0) {
    size_t lead = domain.size() - static_cast<size_t>(kred);
    std::vector<SymExpr> cols_shape(domain.begin() + static_cast<long>(lead), domain.end());
    SymExpr cols = numelOf(cols_shape);
    if (cols.isInt()) {
      int64_t cv = cols.intValue();
      threads = cv <= 32 ? 32 : cv <= 64 ? 64 : cv <= 128 ? 128 : cv <= 2048 ? 256 : 512;
    }
  }
  return threads;
}

// The grid: a pointwise kernel's blocks cover its domain, at most 132 * 16 of them (the loop
// strides over the rest); a row kernel has one block per row.
std::vector<SymExpr> launchGrid(const std::vector<SymExpr>& domain, int kred, int threads) {
  if (kred == 0) {
    SymExpr blocks = SymExpr::apply(SymExpr::Kind::CeilDiv, {numelOf(domain), SymExpr::integer(threads)});
    return {SymExpr::apply(SymExpr::Kind::Min, {blocks, SymExpr::integer(132 * 16)}), SymExpr::integer(1),
            SymExpr::integer(1)};
  }
  size_t lead = domain.size() - static_cast<size_t>(kred);
  std::vector<SymExpr> rows_shape(domain.begin(), domain.begin() + static_cast<long>(lead));
  return {SymExpr::apply(SymExpr::Kind::Min, {numelOf(rows_shape), SymExpr::integer(2147483647)}), SymExpr::integer(1),
          SymExpr::integer(1)};
}

// The kernel's whole source: the prelude, its context (pointer and int parameters, then the
// rows' reduction results), the node functions and the entry `name` that fills the context
// and runs `body`. The body is emitted first: the int parameters are those it registered.
std::string kernelSource(const Codegen& cg, const Emitter& em, const std::string& name,
                         const std::vector<int>& reductions, const std::string& body, int threads) {
  std::ostringstream src;
  src << generatedPrelude();
  if (!em.index_sites_.empty()) src << indexCheckSource();
  src << "struct FxCtx {\n";
  for (size_t k = 0; k < em.tensor_args_.size(); ++k) src << "  void* p" << k << ";\n";
  for (size_t k = 0; k < em.int_args_.size(); ++k) src << "  long long e" << k << ";\n";
  for (int r : reductions) src << "  " << computeType(cg.node(r).dtype) << " r" << r << ";\n";
  src << "};\n";
  src << em.funcs_.str();
  src << "extern \"C\" __global__ void __launch_bounds__(" << threads << ") " << name << "(";
  for (size_t k = 0; k < em.tensor_args_.size(); ++k) src << (k ? ", " : "") << "void* p" << k;
  for (size_t k = 0; k < em.int_args_.size(); ++k)
    src << (k || !em.tensor_args_.empty() ? ", " : "") << "long long e" << k;
  src << ") {\n  fx_pdl_begin();\n  FxCtx c;\n";
  for (size_t k = 0; k < em.tensor_args_.size(); ++k) src << "  c.p" << k << " = p" << k << ";\n";
  for (size_t k = 0; k < em.int_args_.size(); ++k) src << "  c.e" << k << " = e" << k << ";\n";
  src << body << "}\n";
  return src.str();
}

}  // namespace

KernelSource Codegen::emit(const std::string& name, const std::vector<int>& members,
                           const std::vector<SymExpr>& domain, int kred, const std::vector<StoredOutput>& outputs) const {
  Emitter em(*this);
  KernelSource ks;
  ks.name = name;
  ks.kind = kred > 0 ? "row" : "pointwise";
  const std::vector<int> reductions = reachableReductions(*this, outputs, kred);
  for (const auto& so : outputs) em.emitNode(so.gnode);
  for (int r : reductions) em.emitNode(node(r).in.at(0));
  ks.nodes = fusedNodeNames(*this, members);
  // Output pointers get parameter slots after the inputs the functions use.
  std::vector<int> out_ptr;
  for (const auto& so : outputs) out_ptr.push_back(em.ptr(so.dest.tref));
  KernelBody body(*this, em, domain, kred, outputs, out_ptr);
  const std::string body_s = kred == 0 ? body.pointwise() : body.rows(reductions);
  const int threads = threadsPerBlock(domain, kred);
  ks.source = kernelSource(*this, em, name, reductions, body_s, threads);
  ks.tensor_args = em.tensor_args_;
  ks.int_args = em.int_args_;
  ks.index_sites = em.index_sites_;
  ks.block = {SymExpr::integer(threads), SymExpr::integer(1), SymExpr::integer(1)};
  ks.grid = launchGrid(domain, kred, threads);
  return ks;
}

}  // namespace fxfuse::lowering
