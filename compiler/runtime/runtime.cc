#include "compiler/runtime/runtime.h"

#include <cmath>
#include <cstdlib>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "compiler/lowering/codegen.h"
#include "compiler/lowering/lowering.h"
#include "compiler/runtime/cuda_libs.h"
#include "compiler/runtime/gemm_tune.h"
#include "kernels/runtime/attention.h"
#include "compiler/runtime/nvrtc_compile.h"
#include "ir/checked_math.h"
#include "ir/proto_io.h"
#include "ir/status.h"
#include "kernels/attention/attention.h"
#include "kernels/kernels.h"

namespace fxfuse::runtime {

namespace pb = fxfuse::plan::v1;
namespace k = fxfuse::kernels;

namespace {

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) fail("CUDA error in {}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

void checkLt(cublasStatus_t s, const std::string& what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("cuBLASLt error in {}: {}", what, cublasLt().cublasLtGetStatusString(s));
}

int bytesOf(pb::DType t) { return ir::dtypeBytes(lowering::fromPlanDType(t)); }

k::DType kdtype(pb::DType t, const std::string& what) {
  switch (t) {
    case pb::BF16: return k::DType::kBFloat16;
    case pb::F16: return k::DType::kFloat16;
    case pb::F32: return k::DType::kFloat32;
    case pb::F8E4M3FN: return k::DType::kFloat8E4M3;
    default: fail("{}: dtype {} is not supported by the kernels library", what, pb::DType_Name(t));
  }
}

cudaDataType_t cudaType(pb::DType t, const std::string& what) {
  switch (t) {
    case pb::BF16: return CUDA_R_16BF;
    case pb::F16: return CUDA_R_16F;
    case pb::F32: return CUDA_R_32F;
    case pb::F8E4M3FN: return CUDA_R_8F_E4M3;
    case pb::F8E5M2: return CUDA_R_8F_E5M2;
    default: fail("{}: dtype {} is not supported by cuBLASLt steps", what, pb::DType_Name(t));
  }
}

ncclDataType_t ncclType(pb::DType t, const std::string& what) {
  switch (t) {
    case pb::BF16: return ncclBfloat16;
    case pb::F16: return ncclFloat16;
    case pb::F32: return ncclFloat32;
    case pb::F64: return ncclFloat64;
    case pb::I32: return ncclInt32;
    case pb::I64: return ncclInt64;
    default: fail("{}: NCCL does not reduce dtype {}", what, pb::DType_Name(t));
  }
}

void checkNcclCall(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess) fail("NCCL error in {}: {}", what, nccl().ncclGetErrorString(r));
}

const char* algorithmName(k::AllReduceAlgorithm a) {
  switch (a) {
    case k::AllReduceAlgorithm::kAuto: return "auto";
    case k::AllReduceAlgorithm::kOneShot: return "one_shot";
    case k::AllReduceAlgorithm::kTwoShot: return "two_shot";
    case k::AllReduceAlgorithm::kNcclFallback: return "nccl_fallback";
  }
  return "?";
}

// $FXFUSE_ALLREDUCE: auto | oneshot | twoshot | nccl (unset: auto).
k::AllReduceAlgorithm algorithmFromEnv() {
  const char* e = std::getenv("FXFUSE_ALLREDUCE");
  std::string v = e ? e : "auto";
  if (v == "auto" || v.empty()) return k::AllReduceAlgorithm::kAuto;
  if (v == "oneshot" || v == "one_shot") return k::AllReduceAlgorithm::kOneShot;
  if (v == "twoshot" || v == "two_shot") return k::AllReduceAlgorithm::kTwoShot;
  if (v == "nccl" || v == "nccl_fallback") return k::AllReduceAlgorithm::kNcclFallback;
  fail("FXFUSE_ALLREDUCE={} is not one of auto, oneshot, twoshot, nccl", v);
}

AttnDType attnType(pb::DType t, const std::string& what) {
  switch (t) {
    case pb::BF16: return AttnDType::kBF16;
    case pb::F16: return AttnDType::kF16;
    case pb::F32: return AttnDType::kF32;
    case pb::BOOL: return AttnDType::kBool;
    case pb::F8E4M3FN: return AttnDType::kF8E4M3;
    default: fail("{}: attention does not support dtype {}", what, pb::DType_Name(t));
  }
}

// The sm90 attention kernels for a rt.attention step (plan arg impl = "sm90"): split-KV decode
// for a few query rows per KV head without a causal offset (Sq == Sk or no causal mask), else the
// wgmma prefill kernel. Returns an empty function when the params do not fit (odd strides,
// misaligned pointers, mask, fp32, ...): the caller uses the reference kernel then. A decode
// workspace is allocated here and freed with the step.
std::function<cudaError_t(cudaStream_t)> sm90Attention(const AttentionParams& q, std::vector<std::function<void()>>* cleanup) {
  namespace fa = fxfuse::attention;
  if (q.mask_dtype != AttnDType::kNone || q.E != q.Ev) return {};
  if (q.dtype != AttnDType::kBF16 && q.dtype != AttnDType::kF16) return {};
  if (q.B > (int64_t{1} << 16) || q.Hq > 65535 || q.Hk <= 0 || q.Hq % q.Hk != 0) return {};
  const fa::DType dt = q.dtype == AttnDType::kBF16 ? fa::DType::kBF16 : fa::DType::kF16;
  fa::DType out_dt;
  if (q.out_dtype == q.dtype) out_dt = dt;
  else if (q.out_dtype == AttnDType::kF8E4M3) out_dt = fa::DType::kF8E4M3;
  else return {};
  if (q.q_stride[3] != 1 || q.k_stride[3] != 1 || q.v_stride[3] != 1 || q.o_stride[3] != 1) return {};
  // Fields both kernels' params share.
  auto common = [&](auto& x) {
    x.dtype = dt;
    x.q = q.q;
    x.out = q.out;
    x.batch = static_cast<int>(q.B);
    x.heads_q = static_cast<int>(q.Hq);
    x.heads_kv = static_cast<int>(q.Hk);
    x.head_size = static_cast<int>(q.E);
    x.softmax_scale = q.scale;
    x.causal = q.causal;
    x.out_dtype = out_dt;
    x.out_scale = q.out_scale;
  };
  const int64_t group = q.Hq / q.Hk;
  if (q.Sq <= 8 && group * q.Sq <= fa::kDecodeMaxRows && (!q.causal || q.Sq == q.Sk) && q.Sk > 0) {
    fa::DecodeParams d;
    common(d);
    d.k_cache = q.k;
    d.v_cache = q.v;
    d.num_query_tokens = static_cast<int>(q.Sq);
    for (int i = 0; i < 3; ++i) {
      d.q_stride[i] = q.q_stride[i];
      d.o_stride[i] = q.o_stride[i];
    }
    // cache strides in (batch, token, head) order
    d.k_stride[0] = q.k_stride[0], d.k_stride[1] = q.k_stride[2], d.k_stride[2] = q.k_stride[1];
    d.v_stride[0] = q.v_stride[0], d.v_stride[1] = q.v_stride[2], d.v_stride[2] = q.v_stride[1];
    d.max_context_len = q.Sk;
    if (!fa::CheckDecode(d).empty()) return {};
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return {};
    const size_t ws = fa::DecodeWorkspaceBytes(d, sms);
    if (ws > 0) {
      void* w = nullptr;
      if (cudaMalloc(&w, ws) != cudaSuccess) return {};
      cleanup->push_back([w] { cudaFree(w); });
      d.workspace = w;
    }
    return [d](cudaStream_t s) { return fa::LaunchDecode(d, s); };
  }
  fa::PrefillParams p;
  common(p);
  p.k = q.k;
  p.v = q.v;
  p.seqlen_q = q.Sq;
  p.seqlen_k = q.Sk;
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = q.q_stride[i];
    p.k_stride[i] = q.k_stride[i];
    p.v_stride[i] = q.v_stride[i];
    p.o_stride[i] = q.o_stride[i];
  }
  if (!fa::CheckPrefill(p).empty()) return {};
  return [p](cudaStream_t s) { return fa::LaunchPrefill(p, s); };
}

}  // namespace

std::string deviceProblem() {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  int drv = 0;
  cudaDriverGetVersion(&drv);  // 0 when no driver is installed
  // The runtime reports a missing driver as "insufficient" (its cuInit fails): say what it is.
  if (drv == 0 && (e == cudaErrorInsufficientDriver || e == cudaErrorInitializationError || e == cudaErrorNoDevice))
    return "no CUDA driver found";
  if (e != cudaSuccess)
    return fmt::format("no usable CUDA device: {} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
  if (n == 0) return "no CUDA device found";
  if (drv < 12080) return fmt::format("CUDA driver {}.{} is too old (12.8 or newer needed)", drv / 1000, (drv % 1000) / 10);
  cudaDeviceProp prop;
  e = cudaGetDeviceProperties(&prop, 0);
  if (e != cudaSuccess) return fmt::format("cannot query device 0: {}", cudaGetErrorString(e));
  if (prop.major != 9)
    return fmt::format("device 0 ({}) is sm_{}{}; fxfuse plans target sm_90a (Hopper)", prop.name, prop.major, prop.minor);
  return "";
}

int64_t DeviceTensor::numel() const { return ir::numelOrFail(shape, "device tensor"); }

// ------------------------------------------------------------------------------ Program

std::unique_ptr<Program> Program::load(const std::string& path, const LoadOptions& opts) {
  return fromPlan(lowering::loadPlan(path), opts);
}

std::unique_ptr<Program> Program::fromPlan(pb::Plan plan, const LoadOptions& opts) {
  std::unique_ptr<Program> p(new Program());
  p->plan_ = std::move(plan);
  p->compileKernels(opts);
  return p;
}

Program::~Program() {
  for (void* l : libraries_) cudaLibraryUnload(static_cast<cudaLibrary_t>(l));
}

void Program::compileKernels(const LoadOptions& opts) {
  for (const auto& gk : plan_.kernels()) {
    const void* fn = nullptr;
    for (size_t i = 0; i < opts.num_embedded && !fn; ++i)
      if (gk.name() == opts.embedded[i].name) fn = opts.embedded[i].function;
    if (fn) {
      kernels_.push_back(fn);
      continue;
    }
    if (lowering::sourceHash(gk.source()) != gk.hash())
      fail("plan kernel {}: source does not match its hash (edited plan?)", gk.name());
    CompiledKernel ck = compileKernel(gk.source(), gk.name(), "sm_90a", opts.use_cache);
    if (ck.from_cache) cache_hits_++;
    cudaLibrary_t lib;
    check(cudaLibraryLoadData(&lib, ck.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
          "loading generated kernel " + gk.name());
    libraries_.push_back(lib);
    cudaKernel_t kern;
    check(cudaLibraryGetKernel(&kern, lib, gk.name().c_str()), "finding generated kernel " + gk.name());
    kernels_.push_back(reinterpret_cast<const void*>(kern));
  }
}

// ------------------------------------------------------------------------------ Session

struct Session::Prepared {
  std::function<void(cudaStream_t)> run;
  std::vector<std::function<void()>> cleanup;
  ~Prepared() {
    for (auto& c : cleanup) c();
  }
};

Session::Session(const Program& program, Communicator* comm)
    : program_(program),
      plan_(program.plan()),
      comm_(comm),
      allreduce_algorithm_(algorithmFromEnv()),
      gemm_tune_(gemmTuningFromEnv()) {
  inputs_.assign(static_cast<size_t>(plan_.inputs_size()), nullptr);
  scalars_.assign(static_cast<size_t>(plan_.inputs_size()), std::nullopt);
  const int plan_ws = std::max(1, plan_.world_size());
  if (comm_ && comm_->worldSize() != plan_ws)
    fail("the plan is for world size {}, the communicator has {} ranks", plan_ws, comm_->worldSize());
}

void Session::setAllReduceAlgorithm(k::AllReduceAlgorithm a) {
  allreduce_algorithm_ = a;
  dirty_ = true;
}

void Session::setGemmTuning(bool on) {
  gemm_tune_ = on;
  dirty_ = true;
}

Session::~Session() {
  steps_.clear();
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  if (graph_) cudaGraphDestroy(graph_);
  if (arena_) cudaFree(arena_);
  if (workspace_) cudaFree(workspace_);
  if (scratch_) cudaFree(scratch_);
  if (cublas_) cublasLt().cublasLtDestroy(static_cast<cublasLtHandle_t>(cublas_));
}

int64_t Session::eval(const fxfuse::ir::v1::SymExpr& e, const std::string& what) const {
  ir::SymExpr x = ir::symExprFromProto(e, what);
  auto v = x.evaluate(env_);
  if (!v) fail("{}: cannot evaluate {} with the bound symbols", what, x.str());
  return *v;
}

void Session::bind(const std::map<std::string, int64_t>& symbols) {
  env_.clear();
  for (const auto& s : plan_.symbols()) {
    auto it = symbols.find(s.name());
    if (it == symbols.end()) fail("symbol {} is not bound (pass --bind {}=N)", s.name(), s.name());
    int64_t v = it->second;
    if (s.has_min() && v < s.min()) fail("symbol {} = {} is below its minimum {}", s.name(), v, s.min());
    if (s.has_max() && v > s.max()) fail("symbol {} = {} is above its maximum {}", s.name(), v, s.max());
    env_[s.name()] = v;
  }
  for (const auto& [name, v] : symbols)
    if (!env_.count(name)) env_[name] = v;
  ir::checkGuards(ir::guardsFromProto(plan_.guards(), "plan"), env_, "plan");
  int64_t need = std::max<int64_t>(eval(plan_.arena().peak_bytes(), "arena size"), 256);
  if (need > arena_bytes_) {
    if (arena_) check(cudaFree(arena_), "freeing the arena");
    arena_ = nullptr;
    check(cudaMalloc(&arena_, static_cast<size_t>(need)), fmt::format("allocating a {}-byte arena", need));
    arena_bytes_ = need;
  }
  dirty_ = true;
  if (graph_exec_) {
    cudaGraphExecDestroy(graph_exec_);
    graph_exec_ = nullptr;
  }
  if (graph_) {
    cudaGraphDestroy(graph_);
    graph_ = nullptr;
  }
}

std::vector<int64_t> Session::inputShape(size_t i) const {
  std::vector<int64_t> s;
  for (const auto& d : plan_.inputs(static_cast<int>(i)).shape()) s.push_back(eval(d, "input shape"));
  return s;
}

void Session::setInput(size_t i, void* device_ptr) {
  if (i >= inputs_.size()) fail("input index {} out of range ({} inputs)", i, inputs_.size());
  inputs_[i] = device_ptr;
  dirty_ = true;
}

void Session::setScalar(size_t i, double value) {
  if (i >= scalars_.size()) fail("input index {} out of range ({} inputs)", i, scalars_.size());
  const auto& in = plan_.inputs(static_cast<int>(i));
  if (!in.is_scalar()) fail("input {} ('{}') is not a lifted scalar", i, in.name());
  if (in.has_scalar_value() && !(value == in.scalar_value()))
    fail("input {} ('{}'): the plan was compiled for the value {}, got {} (recompile with --const {}={})", i, in.name(),
         in.scalar_value(), value, in.name(), value);
  scalars_[i] = value;
  dirty_ = true;
}

void* Session::pointer(int id) const {
  const auto& t = plan_.tensors(id);
  const auto& b = plan_.buffers(t.buffer());
  char* base = nullptr;
  if (b.kind() == pb::INPUT) {
    base = static_cast<char*>(inputs_.at(static_cast<size_t>(b.input())));
    if (!base) return nullptr;  // not set yet: tensor() still gives the layout; prepare() checks
  } else {
    base = static_cast<char*>(arena_) + eval(b.offset(), "buffer offset");
  }
  return base + eval(t.offset(), "tensor offset") * bytesOf(t.dtype());
}

DeviceTensor Session::tensor(int id) const {
  DeviceTensor d;
  const auto& t = plan_.tensors(id);
  d.data = pointer(id);
  d.dtype = t.dtype();
  for (const auto& e : t.shape()) d.shape.push_back(eval(e, "tensor shape"));
  for (const auto& e : t.stride()) d.strides.push_back(eval(e, "tensor stride"));
  return d;
}

DeviceTensor Session::output(size_t i) const {
  const auto& o = plan_.outputs(static_cast<int>(i));
  if (o.is_symint()) fail("output {} ('{}') is a symbolic integer, not a tensor", i, o.name());
  return tensor(o.tensor());
}

void Session::prepare(cudaStream_t stream) {
  for (int i = 0; i < plan_.inputs_size(); ++i) {
    const auto& in = plan_.inputs(i);
    bool set = in.is_scalar() ? scalars_[static_cast<size_t>(i)].has_value() : inputs_[static_cast<size_t>(i)] != nullptr;
    if (!in.is_symint() && !set) fail("input {} ('{}') is not set", i, in.name());
  }
  steps_.clear();
  launches_ = 0;
  fused_algorithms_.clear();
  matmul_algorithms_.clear();
  prepareCollectives();
  for (int si = 0; si < plan_.steps_size(); ++si) {
    const pb::Step& st = plan_.steps(si);
    std::string where = fmt::format("step {} ({})", si, st.nodes_size() ? st.nodes(0) : st.comment());
    auto p = std::make_unique<Prepared>();
    if (st.has_kernel()) {
      const auto& kl = st.kernel();
      std::map<std::string, const pb::KernelArg*> args;
      for (const auto& a : kl.args()) args[a.name()] = &a;
      auto has = [&](const std::string& n) { return args.count(n) > 0; };
      auto T = [&](const std::string& n) -> DeviceTensor {
        auto it = args.find(n);
        if (it == args.end() || it->second->v_case() != pb::KernelArg::kTensor) fail("{}: missing tensor argument {}", where, n);
        return tensor(it->second->tensor());
      };
      auto Iv = [&](const std::string& n) -> int64_t {
        auto it = args.find(n);
        if (it == args.end()) fail("{}: missing argument {}", where, n);
        return eval(it->second->int_(), where);
      };
      auto F = [&](const std::string& n, double def) {
        if (!has(n)) return def;
        const pb::KernelArg& a = *args[n];
        if (a.v_case() != pb::KernelArg::kScalarInput) return a.real();
        return scalars_.at(static_cast<size_t>(a.scalar_input())).value();  // prepare() checked it is set
      };
      auto S = [&](const std::string& n, const std::string& def) { return has(n) ? args[n]->str() : def; };
      auto D = [&](const std::string& n) { return has(n) ? args[n]->dtype() : pb::DTYPE_UNSPECIFIED; };
      const std::string& name = kl.kernel();
      launches_++;
      if (name.rfind("gen.", 0) == 0) {
        const void* fn = program_.kernel(kl.generated());
        struct Gen {
          std::vector<void*> ptrs;
          std::vector<long long> ints;
          std::vector<void*> argv;
          dim3 grid, block;
        };
        auto g = std::make_shared<Gen>();
        for (const auto& a : kl.args()) {
          if (a.v_case() == pb::KernelArg::kTensor) g->ptrs.push_back(pointer(a.tensor()));
          else if (a.v_case() == pb::KernelArg::kInt) g->ints.push_back(eval(a.int_(), where));
        }
        for (auto& x : g->ptrs) g->argv.push_back(&x);
        for (auto& x : g->ints) g->argv.push_back(&x);
        int64_t gd[3] = {1, 1, 1}, bd[3] = {1, 1, 1};
        for (int q = 0; q < kl.grid_size() && q < 3; ++q) gd[q] = eval(kl.grid(q), where);
        for (int q = 0; q < kl.block_size() && q < 3; ++q) bd[q] = eval(kl.block(q), where);
        g->grid = dim3(static_cast<unsigned>(gd[0]), static_cast<unsigned>(gd[1]), static_cast<unsigned>(gd[2]));
        g->block = dim3(static_cast<unsigned>(bd[0]), static_cast<unsigned>(bd[1]), static_cast<unsigned>(bd[2]));
        bool empty = gd[0] * gd[1] * gd[2] == 0;
        if (empty) launches_--;
        p->run = [g, fn, where, empty](cudaStream_t s) {
          if (empty) return;
          check(cudaLaunchKernel(fn, g->grid, g->block, g->argv.data(), 0, s), where);
        };
      } else if (name == "lib.rms_norm") {
        k::RmsNormParams q;
        q.num_tokens = Iv("num_tokens");
        q.hidden_size = Iv("hidden_size");
        q.dtype = kdtype(D("dtype"), where);
        q.weight_dtype = has("weight_dtype") ? kdtype(D("weight_dtype"), where) : q.dtype;
        q.input = T("input").data;
        q.input_row_stride = Iv("input_row_stride");
        if (has("weight")) q.weight = T("weight").data;
        q.output = T("output").data;
        q.output_row_stride = Iv("output_row_stride");
        if (has("residual")) {
          q.residual = T("residual").data;
          q.residual_row_stride = Iv("residual_row_stride");
          q.residual_variance = S("residual_variance", "rounded_sum") == "rounded_sum" ? k::ResidualVariance::kRoundedSum
                                                                                       : k::ResidualVariance::kUnroundedSum;
        }
        q.epsilon = static_cast<float>(F("epsilon", 1e-6));
        k::Status cs = q.Check();
        if (!cs.ok()) fail("{}: {}", where, cs.ToString());
        p->run = [q, where](cudaStream_t s) {
          k::Status r = k::RmsNorm(q, s);
          if (!r.ok()) fail("{}: {}", where, r.ToString());
        };
      } else if (name == "lib.quant_fp8" || name == "lib.rms_norm_quant_fp8") {
        k::Fp8ScaleSpec sc;
        std::string kind = S("scale_kind", "static_per_tensor");
        sc.kind = kind == "static_per_tensor" ? k::Fp8ScaleKind::kStaticPerTensor
                  : kind == "dynamic_per_token" ? k::Fp8ScaleKind::kDynamicPerToken
                  : kind == "dynamic_per_tensor" ? k::Fp8ScaleKind::kDynamicPerTensor : k::Fp8ScaleKind::kDynamicPerGroup;
        sc.scale = static_cast<float*>(T("scale").data);
        if (has("group_size")) sc.group_size = static_cast<int>(Iv("group_size"));
        if (has("scale_ub")) sc.scale_upper_bound = static_cast<const float*>(T("scale_ub").data);
        sc.application = S("scale_application", "multiply_by_reciprocal") == "divide" ? k::ScaleApplication::kDivide
                                                                                      : k::ScaleApplication::kMultiplyByReciprocal;
        sc.min_abs = static_cast<float>(F("min_abs", 0.0));
        sc.min_scale = static_cast<float>(F("min_scale", k::kFp8MinScale));
        if (name == "lib.quant_fp8") {
          k::QuantFp8Params q;
          q.num_tokens = Iv("num_tokens");
          q.hidden_size = Iv("hidden_size");
          q.dtype = kdtype(D("dtype"), where);
          q.input = T("input").data;
          q.input_row_stride = Iv("input_row_stride");
          q.output = T("output").data;
          q.output_row_stride = Iv("output_row_stride");
          q.scale = sc;
          k::Status cs = q.Check();
          if (!cs.ok()) fail("{}: {}", where, cs.ToString());
          p->run = [q, where](cudaStream_t s) {
            k::Status r = k::QuantFp8(q, s);
            if (!r.ok()) fail("{}: {}", where, r.ToString());
          };
        } else {
          k::RmsNormQuantFp8Params q;
          q.num_tokens = Iv("num_tokens");
          q.hidden_size = Iv("hidden_size");
          q.dtype = kdtype(D("dtype"), where);
          q.weight_dtype = has("weight_dtype") ? kdtype(D("weight_dtype"), where) : q.dtype;
          q.input = T("input").data;
          q.input_row_stride = Iv("input_row_stride");
          if (has("weight")) q.weight = T("weight").data;
          if (has("residual")) {
            q.residual = T("residual").data;
            q.residual_row_stride = Iv("residual_row_stride");
            q.residual_variance = S("residual_variance", "rounded_sum") == "rounded_sum"
                                      ? k::ResidualVariance::kRoundedSum
                                      : k::ResidualVariance::kUnroundedSum;
          }
          q.epsilon = static_cast<float>(F("epsilon", 1e-6));
          q.output = T("output").data;
          q.output_row_stride = Iv("output_row_stride");
          q.scale = sc;
          k::Status cs = q.Check();
          if (!cs.ok()) fail("{}: {}", where, cs.ToString());
          p->run = [q, where](cudaStream_t s) {
            k::Status r = k::RmsNormQuantFp8(q, s);
            if (!r.ok()) fail("{}: {}", where, r.ToString());
          };
        }
      } else if (name == "lib.silu_and_mul") {
        k::SiluAndMulParams q;
        q.num_tokens = Iv("num_tokens");
        q.hidden_size = Iv("hidden_size");
        q.dtype = kdtype(D("dtype"), where);
        q.input = T("input").data;
        q.input_row_stride = Iv("input_row_stride");
        q.output_dtype = kdtype(D("output_dtype"), where);
        q.output = T("output").data;
        q.output_row_stride = Iv("output_row_stride");
        if (has("scale")) q.scale = static_cast<const float*>(T("scale").data);
        q.scale_application = S("scale_application", "multiply_by_reciprocal") == "divide"
                                  ? k::ScaleApplication::kDivide
                                  : k::ScaleApplication::kMultiplyByReciprocal;
        k::Status cs = q.Check();
        if (!cs.ok()) fail("{}: {}", where, cs.ToString());
        p->run = [q, where](cudaStream_t s) {
          k::Status r = k::SiluAndMul(q, s);
          if (!r.ok()) fail("{}: {}", where, r.ToString());
        };
      } else if (name == "rt.attention") {
        AttentionParams q;
        DeviceTensor tq = T("q"), tk = T("k"), tv = T("v"), to = T("out");
        for (auto* t : {&tq, &tk, &tv, &to})
          if (t->shape.size() != 4) fail("{}: attention operands must be 4-D", where);
        q.dtype = attnType(tq.dtype, where);
        q.q = tq.data;
        q.k = tk.data;
        q.v = tv.data;
        q.out = to.data;
        q.B = tq.shape[0];
        q.Hq = tq.shape[1];
        q.Sq = tq.shape[2];
        q.E = tq.shape[3];
        q.Hk = tk.shape[1];
        q.Sk = tk.shape[2];
        q.Ev = tv.shape[3];
        for (int d = 0; d < 4; ++d) {
          q.q_stride[d] = tq.strides[static_cast<size_t>(d)];
          q.k_stride[d] = tk.strides[static_cast<size_t>(d)];
          q.v_stride[d] = tv.strides[static_cast<size_t>(d)];
          q.o_stride[d] = to.strides[static_cast<size_t>(d)];
        }
        // Broadcast batch dims of K/V (size 1) read the same head for every batch.
        if (tk.shape[0] == 1) q.k_stride[0] = 0;
        if (tv.shape[0] == 1) q.v_stride[0] = 0;
        if (tq.shape[0] == 1) q.q_stride[0] = 0;
        if (to.shape[0] == 1) q.o_stride[0] = 0;
        q.scale = static_cast<float>(F("scale", 1.0 / std::sqrt(static_cast<double>(q.E))));
        q.causal = has("causal") && args["causal"]->flag();
        if (has("mask")) {
          DeviceTensor tm = T("mask");
          q.mask = tm.data;
          q.mask_dtype = attnType(tm.dtype, where);
          for (int d = 0; d < 4; ++d)
            q.mask_stride[d] = tm.shape[static_cast<size_t>(d)] == 1 ? 0 : tm.strides[static_cast<size_t>(d)];
        }
        q.out_dtype = attnType(to.dtype, where);
        q.round_dtype = has("round_dtype") ? attnType(D("round_dtype"), where) : q.dtype;
        if (has("out_scale")) q.out_scale = static_cast<const float*>(T("out_scale").data);
        std::function<cudaError_t(cudaStream_t)> fast;
        // $FXFUSE_ATTENTION=reference forces the reference kernel (A/B checks, docs/attention.md).
        const char* attn_env = std::getenv("FXFUSE_ATTENTION");
        const bool force_ref = attn_env && std::string(attn_env) == "reference";
        if (S("impl", "reference") == "sm90" && !force_ref) fast = sm90Attention(q, &p->cleanup);
        if (fast)
          p->run = [fast, where](cudaStream_t s) { check(fast(s), where); };
        else
          p->run = [q, where](cudaStream_t s) { check(LaunchAttention(q, s), where); };
      } else {
        fail("{}: unknown kernel '{}'", where, name);
      }
    } else if (st.has_matmul()) {
      const auto& mm = st.matmul();
      launches_++;
      const CublasLtApi& lt = cublasLt();
      if (!cublas_) {
        cublasLtHandle_t h;
        checkLt(lt.cublasLtCreate(&h), "cublasLtCreate");
        cublas_ = h;
      }
      if (!workspace_) {
        workspace_bytes_ = 32 << 20;
        check(cudaMalloc(&workspace_, static_cast<size_t>(workspace_bytes_)), "allocating the cuBLASLt workspace");
      }
      DeviceTensor A = tensor(mm.a()), B = tensor(mm.b()), Dt = tensor(mm.d());
      const int64_t M = eval(mm.m(), where), N = eval(mm.n(), where), K = eval(mm.k(), where);
      const int64_t batch = mm.has_batch() ? eval(mm.batch(), where) : 1;
      auto last2 = [](const DeviceTensor& t, int64_t* s0, int64_t* s1) {
        size_t r = t.shape.size();
        *s0 = t.strides[r - 2];
        *s1 = t.strides[r - 1];
      };
      int64_t as0, as1, bs0, bs1;
      last2(A, &as0, &as1);
      last2(B, &bs0, &bs1);
      // cuBLASLt (column-major): D^T[N, M] = op(X)[N, K] * op(Y)[K, M], X from B, Y from A.
      bool b_row = bs1 == 1 || N == 1;  // B row-major [K, N]: X = N x K "N"
      if (bs1 == 1 && bs0 == 1) b_row = true;
      cublasOperation_t opx = b_row ? CUBLAS_OP_N : CUBLAS_OP_T;
      int64_t ldx = b_row ? std::max<int64_t>(bs0, N) : std::max<int64_t>(bs1, K);
      if (!b_row && bs0 != 1 && K != 1) fail("{}: matmul B has no unit stride", where);
      bool a_row = as1 == 1 || K == 1;
      cublasOperation_t opy = a_row ? CUBLAS_OP_N : CUBLAS_OP_T;
      int64_t ldy = a_row ? std::max<int64_t>(as0, K) : std::max<int64_t>(as1, M);
      if (!a_row && as0 != 1 && M != 1) fail("{}: matmul A has no unit stride", where);
      cudaDataType_t ta = cudaType(mm.a_dtype(), where), tb = cudaType(mm.b_dtype(), where),
                     td = cudaType(mm.d_dtype(), where);
      bool fp8 = mm.a_dtype() == pb::F8E4M3FN || mm.a_dtype() == pb::F8E5M2;
      cudaDataType_t tc = td;
      if (fp8 && (td == CUDA_R_8F_E4M3 || td == CUDA_R_8F_E5M2)) tc = CUDA_R_16BF;
      struct Mm {
        cublasLtMatmulDesc_t desc = nullptr;
        cublasLtMatrixLayout_t lx = nullptr, ly = nullptr, lc = nullptr, ld = nullptr;
        cublasLtMatmulAlgo_t algo;
        float alpha = 1, beta = 0;
        const void *x = nullptr, *y = nullptr, *c = nullptr;
        void* d = nullptr;
      };
      auto m = std::make_shared<Mm>();
      checkLt(lt.cublasLtMatmulDescCreate(&m->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), where);
      auto setd = [&](cublasLtMatmulDescAttributes_t a, const void* v, size_t n) {
        checkLt(lt.cublasLtMatmulDescSetAttribute(m->desc, a, v, n), where);
      };
      setd(CUBLASLT_MATMUL_DESC_TRANSA, &opx, sizeof opx);
      setd(CUBLASLT_MATMUL_DESC_TRANSB, &opy, sizeof opy);
      if (mm.scale_mode() == pb::SCALE_PER_TENSOR) {
        void* sa = tensor(mm.scale_a()).data;  // cuBLASLt A is our B: scale_b; B is our A: scale_a
        void* sb = tensor(mm.scale_b()).data;
        setd(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sb, sizeof sb);
        setd(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sa, sizeof sa);
        if (mm.scale_d() >= 0) {
          void* sd = tensor(mm.scale_d()).data;
          setd(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &sd, sizeof sd);
        }
      }
      if (fp8) {
        int8_t fast = mm.fast_accum() ? 1 : 0;
        setd(CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
      }
      if (mm.epilogue() == pb::EPILOGUE_BIAS && mm.bias() >= 0) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        setd(CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep);
        void* bp = tensor(mm.bias()).data;
        setd(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp);
        cudaDataType_t bt = cudaType(plan_.tensors(mm.bias()).dtype(), where);
        setd(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
      }
      auto layout = [&](cublasLtMatrixLayout_t* l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ldv,
                        int64_t bstride) {
        checkLt(lt.cublasLtMatrixLayoutCreate(l, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ldv), where);
        if (batch > 1) {
          int32_t bc = static_cast<int32_t>(batch);
          checkLt(lt.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc), where);
          checkLt(lt.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &bstride,
                                                      sizeof bstride),
                  where);
        }
      };
      int64_t bsb = B.shape.size() == 3 ? B.strides[0] : 0, asb = A.shape.size() == 3 ? A.strides[0] : 0;
      layout(&m->lx, tb, opx == CUBLAS_OP_N ? N : K, opx == CUBLAS_OP_N ? K : N, ldx, bsb);
      layout(&m->ly, ta, opy == CUBLAS_OP_N ? K : M, opy == CUBLAS_OP_N ? M : K, ldy, asb);
      layout(&m->ld, td, N, M, N, M * N);
      layout(&m->lc, tc, N, M, N, M * N);
      m->alpha = static_cast<float>(mm.alpha() == 0 && mm.beta() == 0 ? 1.0 : mm.alpha());
      m->beta = static_cast<float>(mm.beta());
      m->x = B.data;
      m->y = A.data;
      m->d = Dt.data;
      m->c = mm.c() >= 0 ? tensor(mm.c()).data : Dt.data;
      cublasLtMatmulPreference_t pref;
      checkLt(lt.cublasLtMatmulPreferenceCreate(&pref), where);
      uint64_t ws = static_cast<uint64_t>(workspace_bytes_);
      checkLt(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
              where);
      cublasLtMatmulHeuristicResult_t res[kGemmCandidates];
      int found = 0;
      int want = 0;
      if (mm.algorithm().rfind("heuristic:", 0) == 0) want = std::stoi(mm.algorithm().substr(10));
      cublasStatus_t hs = lt.cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(cublas_), m->desc, m->lx, m->ly,
                                                            m->lc, m->ld, pref, kGemmCandidates, res, &found);
      lt.cublasLtMatmulPreferenceDestroy(pref);
      if (hs != CUBLAS_STATUS_SUCCESS || found == 0)
        fail("{}: cuBLASLt has no algorithm for this matmul (M={} N={} K={}, {} x {} -> {}): {}", where, M, N, K,
             pb::DType_Name(mm.a_dtype()), pb::DType_Name(mm.b_dtype()), pb::DType_Name(mm.d_dtype()),
             lt.cublasLtGetStatusString(hs));
      // "heuristic:N" pins the N-th result (no tuning); "heuristic" is tuned by measurement.
      const bool pinned = mm.algorithm() != "heuristic" && !mm.algorithm().empty();
      GemmCall call;
      call.handle = static_cast<cublasLtHandle_t>(cublas_);
      call.desc = m->desc;
      call.lx = m->lx;
      call.ly = m->ly;
      call.lc = m->lc;
      call.ld = m->ld;
      call.alpha = &m->alpha;
      call.beta = &m->beta;
      call.x = m->x;
      call.y = m->y;
      call.c = m->c;
      call.d = m->d;
      call.d_bytes = static_cast<size_t>(batch * M * N * bytesOf(mm.d_dtype()));
      call.workspace = workspace_;
      call.workspace_bytes = static_cast<size_t>(workspace_bytes_);
      int device = 0;
      cudaGetDevice(&device);
      // Everything that makes two calls the same problem for cuBLASLt (pointers excluded).
      const std::string key = fmt::format(
          "dev{} M{} N{} K{} b{} {}x{}->{} c{} ops{}{} ld{},{} bs{},{} scale{} fast{} ep{} bias{} beta{} ws{}", device, M, N,
          K, batch, static_cast<int>(ta), static_cast<int>(tb), static_cast<int>(td), static_cast<int>(tc),
          static_cast<int>(opx), static_cast<int>(opy), ldx, ldy, bsb, asb, static_cast<int>(mm.scale_mode()),
          mm.fast_accum() ? 1 : 0, static_cast<int>(mm.epilogue()),
          mm.bias() >= 0 ? static_cast<int>(plan_.tensors(mm.bias()).dtype()) : -1, m->beta, workspace_bytes_);
      GemmChoice choice = chooseGemmAlgorithm(call, res, found, want, gemm_tune_ && !pinned, stream, key, where);
      m->algo = choice.algo;
      matmul_algorithms_.push_back(fmt::format("{}: M={} N={} K={}{} {}x{}->{}: {}", where, M, N, K,
                                               batch > 1 ? fmt::format(" batch={}", batch) : "",
                                               pb::DType_Name(mm.a_dtype()), pb::DType_Name(mm.b_dtype()),
                                               pb::DType_Name(mm.d_dtype()), choice.summary));
      void* wsp = workspace_;
      size_t wsb = static_cast<size_t>(workspace_bytes_);
      void* handle = cublas_;
      p->run = [m, wsp, wsb, handle, where](cudaStream_t s) {
        checkLt(cublasLt().cublasLtMatmul(static_cast<cublasLtHandle_t>(handle), m->desc, &m->alpha, m->x, m->lx, m->y,
                                          m->ly, &m->beta, m->c, m->lc, m->d, m->ld, &m->algo, wsp, wsb, s),
                where);
      };
      p->cleanup.push_back([m] {
        const CublasLtApi& l = cublasLt();
        l.cublasLtMatrixLayoutDestroy(m->lx);
        l.cublasLtMatrixLayoutDestroy(m->ly);
        l.cublasLtMatrixLayoutDestroy(m->lc);
        l.cublasLtMatrixLayoutDestroy(m->ld);
        l.cublasLtMatmulDescDestroy(m->desc);
      });
    } else if (st.has_copy()) {
      void* src = pointer(st.copy().src());
      void* dst = pointer(st.copy().dst());
      size_t n = static_cast<size_t>(eval(st.copy().bytes(), where));
      p->run = [src, dst, n, where](cudaStream_t s) {
        if (n) check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s), where);
      };
    } else if (st.has_memset()) {
      void* dst = pointer(st.memset().dst());
      size_t n = static_cast<size_t>(eval(st.memset().bytes(), where));
      int v = st.memset().value();
      p->run = [dst, n, v, where](cudaStream_t s) {
        if (n) check(cudaMemsetAsync(dst, v, n, s), where);
      };
    } else if (st.has_collective()) {
      const auto& c = st.collective();
      if (c.op() != "all_reduce" || (c.reduce_op() != "sum" && !c.reduce_op().empty()))
        fail("{}: collective {}({}) is not supported (all_reduce sum only)", where, c.op(), c.reduce_op());
      if (!comm_ || !comm_->nccl())
        fail("{}: the plan is for world size {}: this step needs a communicator (fxfuse run --world-size {})", where,
             plan_.world_size(), plan_.world_size());
      const void* src = pointer(c.input());
      void* dst = pointer(c.output());
      size_t count = static_cast<size_t>(eval(c.count(), where));
      ncclDataType_t dt = ncclType(c.dtype(), where);
      ncclComm_t nc = comm_->nccl();
      launches_++;
      p->run = [src, dst, count, dt, nc, where](cudaStream_t s) {
        if (count) checkNcclCall(nccl().ncclAllReduce(src, dst, count, dt, ncclSum, nc, s), where);
      };
    } else if (st.has_fused_all_reduce_norm()) {
      p->run = prepareFusedAllReduceNorm(st.fused_all_reduce_norm(), where);
    }
    steps_.push_back(std::move(p));
  }
  dirty_ = false;
}

// Sizes the NCCL-fallback scratch buffer and maps the peer workspace (collective: every rank
// derives the same sizes from the same plan and symbols) before the steps are prepared.
void Session::prepareCollectives() {
  int64_t scratch = 0, max_tokens = 0, hidden = 0;
  bool any = false;
  for (int si = 0; si < plan_.steps_size(); ++si) {
    if (!plan_.steps(si).has_fused_all_reduce_norm()) continue;
    const auto& f = plan_.steps(si).fused_all_reduce_norm();
    std::string where = fmt::format("step {}", si);
    int64_t T = eval(f.num_tokens(), where), H = eval(f.hidden_size(), where);
    scratch = std::max(scratch, T * H * bytesOf(f.dtype()));
    max_tokens = std::max(max_tokens, f.max_tokens());
    hidden = std::max(hidden, H);
    any = true;
  }
  if (!any) return;
  const int ws = std::max(1, plan_.world_size());
  if (ws > 1 && (!comm_ || !comm_->nccl()))
    fail("the plan is for world size {}: its fused all-reduce steps need a communicator (fxfuse run --world-size {})",
         ws, ws);
  if (ws > 1 && scratch > scratch_bytes_) {
    if (scratch_) check(cudaFree(scratch_), "freeing the all-reduce scratch");
    scratch_ = nullptr;
    check(cudaMalloc(&scratch_, static_cast<size_t>(scratch)), "allocating the all-reduce scratch");
    scratch_bytes_ = scratch;
  }
  if (ws > 1 && Communicator::fusedKernelsAvailable() && allreduce_algorithm_ != k::AllReduceAlgorithm::kNcclFallback)
    comm_->workspace(max_tokens, hidden);
}

// One FusedAllReduceNorm step: the fused kernels when they take the call, else NCCL all-reduce
// (identity at world size 1) followed by the single-GPU fused add + RMSNorm (+ FP8 quant).
std::function<void(cudaStream_t)> Session::prepareFusedAllReduceNorm(const pb::FusedAllReduceNorm& f,
                                                                      const std::string& where) {
  const int ws = std::max(1, plan_.world_size());
  auto opt = [&](int t) -> void* { return t >= 0 ? pointer(t) : nullptr; };
  const int64_t T = eval(f.num_tokens(), where), H = eval(f.hidden_size(), where);
  const k::DType dt = kdtype(f.dtype(), where);
  void* input = pointer(f.input());
  void* residual = opt(f.residual());
  void* allreduce_out = opt(f.allreduce_out());
  const void* weight = opt(f.weight());
  void* norm_out = opt(f.norm_out());
  void* quant_out = opt(f.quant_out());
  const float* scale = static_cast<const float*>(opt(f.scale()));
  if (quant_out && !scale) fail("{}: FP8 output without a scale", where);
  const bool rounded = f.residual_variance() != "unrounded_sum";
  const bool divide = f.scale_application() == "divide";

  k::AllReduceAlgorithm algo = k::AllReduceAlgorithm::kNcclFallback;
#ifdef FXFUSE_HAVE_ALLREDUCE_KERNELS
  k::AllReduceRmsNormParams q;
  q.num_tokens = T;
  q.hidden_size = H;
  q.dtype = dt;
  q.input = input;
  q.residual = residual;
  q.allreduce_out = allreduce_out;
  q.weight = weight;
  q.epsilon = static_cast<float>(f.epsilon());
  q.norm_out = norm_out;
  q.quant_out = quant_out;
  q.scale = scale;
  q.algorithm = allreduce_algorithm_;
  // The workspace prepareCollectives() mapped for the whole plan (remapping here would leave
  // the steps prepared before with stale peer pointers); calls it cannot hold fall back.
  const k::AllReduceWorkspace* mapped = ws > 1 ? comm_->mappedWorkspace() : nullptr;
  if (mapped) q.workspace = *mapped;
  bool kernel_ok = allreduce_algorithm_ != k::AllReduceAlgorithm::kNcclFallback && (rounded || !residual) && !divide &&
                   (ws == 1 || mapped);
  if (kernel_ok) {
    k::Status cs = q.Check();
    if (!cs.ok()) fail("{}: {}", where, cs.ToString());
    algo = k::ResolveAllReduceAlgorithm(q);
  }
  if (algo != k::AllReduceAlgorithm::kNcclFallback) {
    q.algorithm = algo;
    fused_algorithms_.push_back(algorithmName(algo));
    launches_++;
    return [q, where](cudaStream_t s) {
      k::Status r = k::AllReduceRmsNorm(q, s);
      if (!r.ok()) fail("{}: {}", where, r.ToString());
    };
  }
#endif
  fused_algorithms_.push_back(algorithmName(algo));
  // Fallback: a = all_reduce(input) (into allreduce_out when the graph wants it, else scratch).
  const size_t count = static_cast<size_t>(T * H);
  void* a = input;
  std::function<void(cudaStream_t)> reduce;
  if (ws > 1) {
    a = allreduce_out ? allreduce_out : scratch_;
    ncclComm_t nc = comm_->nccl();
    ncclDataType_t nt = ncclType(f.dtype(), where);
    reduce = [input, a, count, nt, nc, where](cudaStream_t s) {
      if (count) checkNcclCall(nccl().ncclAllReduce(input, a, count, nt, ncclSum, nc, s), where);
    };
    launches_++;
  } else if (allreduce_out && allreduce_out != input) {
    size_t bytes = count * static_cast<size_t>(bytesOf(f.dtype()));
    reduce = [input, allreduce_out, bytes, where](cudaStream_t s) {
      if (bytes) check(cudaMemcpyAsync(allreduce_out, input, bytes, cudaMemcpyDeviceToDevice, s), where);
    };
  }
  const k::ResidualVariance variance = rounded ? k::ResidualVariance::kRoundedSum : k::ResidualVariance::kUnroundedSum;
  // The fields RmsNorm and RmsNormQuantFp8 share: rows of a (+ residual), weight, epsilon.
  auto rowsOf = [&](auto& n) {
    n.num_tokens = T;
    n.hidden_size = H;
    n.dtype = dt;
    n.weight_dtype = dt;
    n.input = a;
    n.input_row_stride = H;
    n.weight = weight;
    if (residual) {
      n.residual = residual;
      n.residual_row_stride = H;
      n.residual_variance = variance;
    }
    n.epsilon = static_cast<float>(f.epsilon());
  };
  std::function<void(cudaStream_t)> norm;
  if (quant_out) {
    k::RmsNormQuantFp8Params n;
    rowsOf(n);
    n.output = quant_out;
    n.output_row_stride = H;
    n.scale.kind = k::Fp8ScaleKind::kStaticPerTensor;
    n.scale.scale = const_cast<float*>(scale);
    n.scale.application = divide ? k::ScaleApplication::kDivide : k::ScaleApplication::kMultiplyByReciprocal;
    k::Status cs = n.Check();
    if (!cs.ok()) fail("{}: {}", where, cs.ToString());
    norm = [n, where](cudaStream_t s) {
      k::Status r = k::RmsNormQuantFp8(n, s);
      if (!r.ok()) fail("{}: {}", where, r.ToString());
    };
  } else {
    k::RmsNormParams n;
    rowsOf(n);
    n.output = norm_out;
    n.output_row_stride = H;
    k::Status cs = n.Check();
    if (!cs.ok()) fail("{}: {}", where, cs.ToString());
    norm = [n, where](cudaStream_t s) {
      k::Status r = k::RmsNorm(n, s);
      if (!r.ok()) fail("{}: {}", where, r.ToString());
    };
  }
  launches_++;
  return [reduce, norm](cudaStream_t s) {
    if (reduce) reduce(s);
    norm(s);
  };
}

void Session::run(cudaStream_t stream) {
  if (env_.empty() && plan_.symbols_size() > 0) fail("Session::run before bind()");
  if (dirty_) prepare(stream);
  for (auto& s : steps_) s->run(stream);
}

void Session::capture(cudaStream_t stream) {
  if (dirty_) prepare(stream);
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  if (graph_) cudaGraphDestroy(graph_);
  graph_exec_ = nullptr;
  graph_ = nullptr;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "beginning graph capture");
  try {
    for (auto& s : steps_) s->run(stream);
  } catch (...) {
    cudaGraph_t g;
    cudaStreamEndCapture(stream, &g);
    if (g) cudaGraphDestroy(g);
    throw;
  }
  check(cudaStreamEndCapture(stream, &graph_), "ending graph capture");
  check(cudaGraphInstantiate(&graph_exec_, graph_, 0), "instantiating the CUDA graph");
}

void Session::replay(cudaStream_t stream) {
  if (!graph_exec_) fail("Session::replay before capture()");
  check(cudaGraphLaunch(graph_exec_, stream), "launching the CUDA graph");
}

}  // namespace fxfuse::runtime
