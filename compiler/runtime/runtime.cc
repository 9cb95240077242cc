#include "compiler/runtime/runtime.h"

#include <algorithm>
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
#include "kernels/runtime/dense_paged_view.h"
#include "kernels/runtime/paged_attention.h"
#include "kernels/runtime/l2_prefetch.h"
#include "kernels/runtime/small_m_fp8_gemm.h"
#include "compiler/runtime/nvrtc_compile.h"
#include "compiler/runtime/paged_steps.h"
#include "compiler/runtime/weight_prefetch.h"
#include "ir/checked_math.h"
#include "ir/proto_io.h"
#include "ir/status.h"
#include "kernels/attention/attention.h"
#include "kernels/kernels.h"

namespace fxfuse::runtime {

namespace pb = fxfuse::plan::v1;
namespace irpb = fxfuse::ir::v1;  // the plan's dtype fields: the IR proto's DType
namespace k = fxfuse::kernels;

namespace {

void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) fail("CUDA error in {}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

void checkLt(cublasStatus_t s, const std::string& what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("cuBLASLt error in {}: {}", what, cublasLt().cublasLtGetStatusString(s));
}

int bytesOf(irpb::DType t) { return ir::dtypeBytes(lowering::fromPlanDType(t)); }

// A kernels-library step: its params checked now (one line naming the step on failure), then
// the closure that launches `launch(q, stream)` and turns a failed status into the same line.
template <typename Params, typename Launch>
std::function<void(cudaStream_t)> checkedLibraryLaunch(const Params& q, Launch launch, const std::string& where) {
  k::Status cs = q.Check();
  if (!cs.ok()) fail("{}: {}", where, cs.ToString());
  return [q, launch, where](cudaStream_t s) {
    k::Status r = launch(q, s);
    if (!r.ok()) fail("{}: {}", where, r.ToString());
  };
}

// The plan dtype `t` as the kernels library takes it (F16, BF16, F32 or F8E4M3FN).
k::DType kdtype(irpb::DType t, const std::string& what) {
  const DType d = lowering::fromPlanDType(t);
  if (!k::IsD16(d) && d != DType::F32 && d != DType::F8E4M3FN)
    fail("{}: dtype {} is not supported by the kernels library", what, irpb::DType_Name(t));
  return d;
}

cudaDataType_t cudaType(irpb::DType t, const std::string& what) {
  switch (t) {
    case irpb::BF16: return CUDA_R_16BF;
    case irpb::F16: return CUDA_R_16F;
    case irpb::F32: return CUDA_R_32F;
    case irpb::F8E4M3FN: return CUDA_R_8F_E4M3;
    case irpb::F8E5M2: return CUDA_R_8F_E5M2;
    default: fail("{}: dtype {} is not supported by cuBLASLt steps", what, irpb::DType_Name(t));
  }
}

ncclDataType_t ncclType(irpb::DType t, const std::string& what) {
  switch (t) {
    case irpb::BF16: return ncclBfloat16;
    case irpb::F16: return ncclFloat16;
    case irpb::F32: return ncclFloat32;
    case irpb::F64: return ncclFloat64;
    case irpb::I32: return ncclInt32;
    case irpb::I64: return ncclInt64;
    default: fail("{}: NCCL does not reduce dtype {}", what, irpb::DType_Name(t));
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

// A dtype as the reference attention kernel takes it (BF16, F16, F32, BOOL masks, F8E4M3FN
// outputs): a device tensor's, or a plan argument's.
DType attnType(DType d, const std::string& what) {
  if (!k::IsD16(d) && d != DType::F32 && d != DType::BOOL && d != DType::F8E4M3FN)
    fail("{}: attention does not support dtype {}", what, ir::dtypeName(d));
  return d;
}
DType attnType(irpb::DType t, const std::string& what) { return attnType(lowering::fromPlanDType(t), what); }

// A one-token decode over dense K/V (rt.attention, impl = "sm90") on the paged attention
// kernel through its identity view (kernels/runtime/dense_paged_view.h): the block table,
// lengths and query starts uploaded once here, freed with the step with the split workspace.
// The default: it beat the split-KV decode kernel and cuDNN on the H200's attention table
// (docs/benchmarks/attention.md). Except over a single key (a dense layer's first token), where
// the split-KV kernel's short chain measured faster (docs/attention.md "Dense decode on the
// paged kernel"). $FXFUSE_DENSE_DECODE=paged or =split forces one route for A/B runs. Empty
// where the view does not apply or the route is the split-KV kernel.
std::function<cudaError_t(cudaStream_t)> pagedDenseDecode(const AttentionParams& q,
                                                          std::vector<std::function<void()>>* cleanup) {
  const char* env = std::getenv("FXFUSE_DENSE_DECODE");
  const std::string route = env ? env : "";
  if (route != "paged" && route != "split" && !route.empty())
    fail("FXFUSE_DENSE_DECODE={} is not one of paged, split", route);
  if (route == "split" || (route.empty() && q.Sk == 1)) return {};
  DensePagedView view;
  if (!PagedViewOfDenseAttention(q, &view).empty()) return {};
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return {};
  PagedAttentionParams p;
  void* memory = nullptr;
  const cudaError_t prepared = PrepareDensePagedView(view, sms, &p, &memory);
  if (memory) cleanup->push_back([memory] { cudaFree(memory); });
  if (prepared != cudaSuccess) return {};
  return [p](cudaStream_t s) { return LaunchPagedAttention(p, s); };
}

// Attention over a single key as the copy of V it is (LaunchSingleKeyAttention), unless
// $FXFUSE_SINGLE_KEY_ATTENTION=0 (A/B runs). Empty where it does not apply.
std::function<cudaError_t(cudaStream_t)> singleKeyAttention(const AttentionParams& q) {
  const char* env = std::getenv("FXFUSE_SINGLE_KEY_ATTENTION");
  if ((env && std::string(env) == "0") || SingleKeyAttentionUnsupported(q)) return {};
  return [q](cudaStream_t s) { return LaunchSingleKeyAttention(q, s); };
}

bool ShortAttentionFromEnv() {
  const char* env = std::getenv("FXFUSE_SHORT_ATTENTION");
  return !(env && std::string(env) == "0");
}

// Attention over a short context on the kernel that holds it in shared memory
// (LaunchShortAttention), unless $FXFUSE_SHORT_ATTENTION=0 (A/B runs). Empty where it does not
// apply.
std::function<cudaError_t(cudaStream_t)> shortAttention(const AttentionParams& q) {
  if (!ShortAttentionFromEnv() || ShortAttentionUnsupported(q, nullptr)) return {};
  return [q](cudaStream_t s) { return LaunchShortAttention(q, nullptr, s); };
}

// The sm90 attention kernels for a rt.attention step (plan arg impl = "sm90"), in this order:
// attention over a single key as a copy of V (singleKeyAttention); a context of at most 16
// keys held in shared memory (shortAttention: a dense layer's T <= 16, measured faster than the
// routes below in the decoder layer, docs/attention.md "Short contexts"); a one-token decode
// over dense K/V on the paged kernel (pagedDenseDecode); else split-KV decode for a few query
// rows per KV head without a causal mask, or a causal one of a single token over a single key
// (torch's causal mask is top-left aligned: decode's bottom-right alignment agrees only when
// Sq == Sk); else the wgmma prefill kernel. A causal block of more than 16 tokens goes to
// prefill: the decode kernel took 79 µs for 8 causal tokens over their own 8 (ncu, H200,
// docs/benchmarks/decoder_layer.md, T = 8). Returns an empty function when the params do not
// fit (odd strides, misaligned pointers, mask, fp32, ...): the caller uses the reference kernel
// then. A decode workspace is allocated here and freed with the step.
std::function<cudaError_t(cudaStream_t)> sm90Attention(const AttentionParams& q, std::vector<std::function<void()>>* cleanup) {
  namespace fa = fxfuse::attention;
  if (q.mask_dtype != DType::DTYPE_UNSPECIFIED || q.E != q.Ev) return {};
  if (q.dtype != DType::BF16 && q.dtype != DType::F16) return {};
  if (q.B > (int64_t{1} << 16) || q.Hq > 65535 || q.Hk <= 0 || q.Hq % q.Hk != 0) return {};
  const fa::DType dt = q.dtype == DType::BF16 ? fa::DType::BF16 : fa::DType::F16;
  fa::DType out_dt;
  if (q.out_dtype == q.dtype) out_dt = dt;
  else if (q.out_dtype == DType::F8E4M3FN) out_dt = fa::DType::F8E4M3FN;
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
  if (auto single = singleKeyAttention(q)) return single;
  if (auto short_context = shortAttention(q)) return short_context;
  if (auto paged = pagedDenseDecode(q, cleanup)) return paged;
  const int64_t group = q.Hq / q.Hk;
  if (q.Sq <= 8 && group * q.Sq <= fa::kDecodeMaxRows && (!q.causal || (q.Sq == 1 && q.Sk == 1)) && q.Sk > 0) {
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
    const int generated = static_cast<int>(kernels_.size());
    const EmbeddedKernel* embedded = nullptr;
    for (size_t i = 0; i < opts.num_embedded && !embedded; ++i)
      if (gk.name() == opts.embedded[i].name) embedded = &opts.embedded[i];
    if (embedded) {
      kernels_.push_back(embedded->function);
      if (gk.index_sites_size() > 0) {
        if (!embedded->index_error) fail("plan kernel {}: its embedded form has no index-error record", gk.name());
        void* record = nullptr;
        check(cudaGetSymbolAddress(&record, embedded->index_error), "finding the index checks of kernel " + gk.name());
        index_errors_.push_back({generated, record});
      }
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
    if (gk.index_sites_size() > 0) {
      void* record = nullptr;
      size_t bytes = 0;
      check(cudaLibraryGetGlobal(&record, &bytes, lib, "fx_index_error"), "finding the index checks of kernel " + gk.name());
      index_errors_.push_back({generated, record});
    }
  }
}

void Program::checkIndexErrors() const {
  for (const IndexErrorRecord& r : index_errors_) {
    unsigned long long rec[3] = {0, 0, 0};
    check(cudaMemcpy(rec, r.device, sizeof rec, cudaMemcpyDeviceToHost), "reading the index checks");
    if (rec[0] == 0) continue;
    check(cudaMemset(r.device, 0, sizeof rec), "clearing the index checks");
    const auto& gk = plan_.kernels(r.generated);
    const auto site = static_cast<int>(std::min<unsigned long long>(rec[0] - 1, gk.index_sites_size()));
    const std::string node = site < gk.index_sites_size() ? gk.index_sites(site).node() : "?";
    const std::string op = site < gk.index_sites_size() ? gk.index_sites(site).op() : "index";
    fail("{}node '{}' ({}): index {} is out of bounds for size {} (generated kernel {}); the run's outputs are not valid",
         plan_.source().empty() ? "" : plan_.source() + ": ", node, op, static_cast<long long>(rec[1]),
         static_cast<long long>(rec[2]), gk.name());
  }
}

// ------------------------------------------------------------------------------ Session

struct Session::PreparedPrefetch {
  size_t fork_step = 0;
  const void* data = nullptr;
  int64_t bytes = 0;
  std::string where;
};

Session::Session(const Program& program, Communicator* comm)
    : program_(program),
      plan_(program.plan()),
      comm_(comm),
      allreduce_algorithm_(algorithmFromEnv()),
      gemm_tune_(gemmTuningFromEnv()) {
  paged_scratch_ = std::make_unique<PagedScratch>();
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
  if (fork_event_) cudaEventDestroy(fork_event_);
  if (join_event_) cudaEventDestroy(join_event_);
  if (prefetch_stream_) cudaStreamDestroy(prefetch_stream_);
  dropGraph("");
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
  dropGraph("bind() was called after it");
}

std::vector<int64_t> Session::inputShape(size_t i) const {
  std::vector<int64_t> s;
  for (const auto& d : plan_.inputs(static_cast<int>(i)).shape()) s.push_back(eval(d, "input shape"));
  return s;
}

void Session::setInput(size_t i, void* device_ptr) {
  if (i >= inputs_.size()) fail("input index {} out of range ({} inputs)", i, inputs_.size());
  if (inputs_[i] == device_ptr) return;  // the same memory: a captured graph still reads it
  inputs_[i] = device_ptr;
  dirty_ = true;
  dropGraph(
      fmt::format("input {} ('{}') was set to other memory after it", i, plan_.inputs(static_cast<int>(i)).name()));
}

void Session::setScalar(size_t i, double value) {
  if (i >= scalars_.size()) fail("input index {} out of range ({} inputs)", i, scalars_.size());
  const auto& in = plan_.inputs(static_cast<int>(i));
  if (!in.is_scalar()) fail("input {} ('{}') is not a lifted scalar", i, in.name());
  if (in.has_scalar_value() && !(value == in.scalar_value()))
    fail("input {} ('{}'): the plan was compiled for the value {}, got {} (recompile with --const {}={})", i, in.name(),
         in.scalar_value(), value, in.name(), value);
  if (scalars_[i] && *scalars_[i] == value) return;
  scalars_[i] = value;
  dirty_ = true;
  dropGraph(fmt::format("input {} ('{}') was set to {} after it", i, in.name(), value));
}

void Session::dropGraph(const std::string& why) {
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  if (graph_) cudaGraphDestroy(graph_);
  if ((graph_exec_ || graph_) && !why.empty()) dropped_because_ = why;
  graph_exec_ = nullptr;
  graph_ = nullptr;
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
  d.dtype = lowering::fromPlanDType(t.dtype());
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
  own_gemm_sites_.clear();
  cublas_sites_.clear();
  prepareCollectives();
  for (int si = 0; si < plan_.steps_size(); ++si) {
    const pb::Step& st = plan_.steps(si);
    std::string where = fmt::format("step {} ({})", si, st.nodes_size() ? st.nodes(0) : st.comment());
    auto p = std::make_unique<Prepared>();
    p->where = where;
    if (st.has_kernel()) {
      p->run = prepareKernel(st.kernel(), p.get());
    } else if (st.has_matmul()) {
      p->run = prepareMatmul(st.matmul(), stream, p.get());
    } else if (st.has_copy()) {
      p->run = prepareCopy(st.copy(), where);
    } else if (st.has_memset()) {
      p->run = prepareMemset(st.memset(), where);
    } else if (st.has_collective()) {
      p->run = prepareCollective(st.collective(), where);
    } else if (st.has_fused_all_reduce_norm()) {
      p->run = prepareFusedAllReduceNorm(st.fused_all_reduce_norm(), where);
    }
    steps_.push_back(std::move(p));
  }
  fuseGemmEpilogues();
  fuseAttentionPrologues();
  prepareWeightPrefetches();
  dirty_ = false;
}

// The weight prefetches of the plan (weight_prefetch.h) as byte ranges under the bound sizes,
// capped ($FXFUSE_PREFETCH_MB; none without it); the side stream and its fork/join events on
// first use.
void Session::prepareWeightPrefetches() {
  prefetches_.clear();
  prefetch_lines_.clear();
  int device = 0, l2 = 0;
  check(cudaGetDevice(&device), "querying the device");
  check(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device), "querying the L2 size");
  const int64_t cap = PrefetchCapBytes(l2);
  if (cap <= 0) return;
  prefetch_evict_last_ = PrefetchEvictLastFromEnv();
  for (const WeightPrefetch& w : PlanWeightPrefetches(plan_, PrefetchForkFromEnv())) {
    const DeviceTensor t = tensor(w.tensor);
    int64_t extent = 1;  // elements from the first to the last one, strides as laid out
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.shape[d] == 0) extent = 0;
      if (extent > 0) extent += (t.shape[d] - 1) * std::max<int64_t>(t.strides[d], 0);
    }
    const int64_t weight_bytes = extent * ir::dtypeBytes(t.dtype);
    const int64_t bytes = PrefetchBytes(weight_bytes, cap);
    if (bytes <= 0 || !t.data) continue;
    const pb::Step& st = plan_.steps(w.matmul_step);
    std::string where = fmt::format("step {} ({})", w.matmul_step, st.nodes_size() ? st.nodes(0) : st.comment());
    prefetch_lines_.push_back(fmt::format("step {} -> {}: {} of {} bytes", w.fork_step, where, bytes, weight_bytes));
    prefetches_.push_back({static_cast<size_t>(w.fork_step), t.data, bytes, "prefetching the weight of " + where});
  }
  if (prefetches_.empty() || prefetch_stream_) return;
  check(cudaStreamCreateWithFlags(&prefetch_stream_, cudaStreamNonBlocking), "creating the prefetch stream");
  check(cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming), "creating the prefetch fork event");
  check(cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming), "creating the prefetch join event");
}

// The named arguments of one KernelLaunch step, read as the kernel calls take them: required
// ones fail naming the step when missing, optional ones fall back to a default. Lives only
// while its step is prepared (it refers to the session and to `where`).
struct Session::KernelArgs {
  KernelArgs(const Session& session, const pb::KernelLaunch& launch, const std::string& where)
      : session(session), where(where) {
    for (const auto& a : launch.args()) args[a.name()] = &a;
  }

  // Whether the step passes argument n.
  bool has(const std::string& n) const { return args.count(n) > 0; }

  // A required tensor argument, laid out under the bound symbols.
  DeviceTensor tensor(const std::string& n) const {
    auto it = args.find(n);
    if (it == args.end() || it->second->v_case() != pb::KernelArg::kTensor)
      fail("{}: missing tensor argument {}", where, n);
    return session.tensor(it->second->tensor());
  }

  // A required integer argument, evaluated under the bound symbols.
  int64_t integer(const std::string& n) const {
    auto it = args.find(n);
    if (it == args.end()) fail("{}: missing argument {}", where, n);
    return session.eval(it->second->int_(), where);
  }

  // An optional real argument: a constant, or the value of a lifted scalar input.
  double real(const std::string& n, double def) const {
    if (!has(n)) return def;
    const pb::KernelArg& a = *args.at(n);
    if (a.v_case() != pb::KernelArg::kScalarInput) return a.real();
    return session.scalars_.at(static_cast<size_t>(a.scalar_input())).value();  // prepare() checked it is set
  }

  // Optional string, dtype and flag arguments (absent: `def`, DTYPE_UNSPECIFIED, false).
  std::string str(const std::string& n, const std::string& def) const { return has(n) ? args.at(n)->str() : def; }
  irpb::DType dtype(const std::string& n) const { return has(n) ? args.at(n)->dtype() : irpb::DTYPE_UNSPECIFIED; }
  bool flag(const std::string& n) const { return has(n) && args.at(n)->flag(); }

  // The FP8 scale of lib.quant_fp8 and lib.rms_norm_quant_fp8 from their scale_* arguments.
  k::Fp8ScaleSpec fp8Scale() const {
    k::Fp8ScaleSpec sc;
    std::string kind = str("scale_kind", "static_per_tensor");
    sc.kind = kind == "static_per_tensor" ? k::Fp8ScaleKind::kStaticPerTensor
              : kind == "dynamic_per_token" ? k::Fp8ScaleKind::kDynamicPerToken
              : kind == "dynamic_per_tensor" ? k::Fp8ScaleKind::kDynamicPerTensor : k::Fp8ScaleKind::kDynamicPerGroup;
    sc.scale = static_cast<float*>(tensor("scale").data);
    if (has("group_size")) sc.group_size = static_cast<int>(integer("group_size"));
    if (has("scale_ub")) sc.scale_upper_bound = static_cast<const float*>(tensor("scale_ub").data);
    sc.application = str("scale_application", "multiply_by_reciprocal") == "divide"
                         ? k::ScaleApplication::kDivide
                         : k::ScaleApplication::kMultiplyByReciprocal;
    sc.min_abs = static_cast<float>(real("min_abs", 0.0));
    sc.min_scale = static_cast<float>(real("min_scale", k::kFp8MinScale));
    return sc;
  }

  const Session& session;
  const std::string& where;
  std::map<std::string, const pb::KernelArg*> args;
};

// One KernelLaunch step: a generated kernel ("gen.*"), a kernel-library call ("lib.*"), the
// runtime's attention ("rt.attention") or its paged KV-cache steps ("rt.reshape_and_cache",
// "rt.paged_attention"), by the kernel's name.
std::function<void(cudaStream_t)> Session::prepareKernel(const pb::KernelLaunch& kl, Prepared* step) {
  const std::string& where = step->where;
  const KernelArgs args(*this, kl, where);
  const std::string& name = kl.kernel();
  launches_++;
  if (name.rfind("gen.", 0) == 0) return prepareGeneratedKernel(kl, where);
  if (name == "lib.rms_norm") return prepareRmsNorm(args);
  if (name == "lib.quant_fp8") return prepareQuantFp8(args);
  if (name == "lib.rms_norm_quant_fp8") return prepareRmsNormQuantFp8(args);
  if (name == "lib.silu_and_mul") return prepareSiluAndMul(args, step);
  if (name == "rt.attention") return prepareAttention(args, step);
  if (name == "rt.reshape_and_cache" || name == "rt.paged_attention") return preparePagedKernel(name, args, step);
  fail("{}: unknown kernel '{}'", where, name);
}

// A generated kernel of the plan: its tensor and integer arguments in plan order, launched
// with the plan's grid and block (no launch, and none counted, for an empty grid).
std::function<void(cudaStream_t)> Session::prepareGeneratedKernel(const pb::KernelLaunch& kl,
                                                                  const std::string& where) {
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
  // Programmatic dependent launch only for a kernel whose source waits for the previous grid
  // (plans written before fxfuse's kernels did are launched plainly).
  const bool programmatic = k::ProgrammaticLaunchEnabled() &&
                            plan_.kernels(kl.generated()).source().find("griddepcontrol.wait") != std::string::npos;
  return [g, fn, where, empty, programmatic](cudaStream_t s) {
    if (empty) return;
    if (!programmatic) {
      check(cudaLaunchKernel(fn, g->grid, g->block, g->argv.data(), 0, s), where);
      return;
    }
    cudaLaunchConfig_t config = {};
    config.gridDim = g->grid;
    config.blockDim = g->block;
    config.stream = s;
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    check(cudaLaunchKernelExC(&config, fn, g->argv.data()), where);
  };
}

namespace {

// The residual operands of lib.rms_norm and lib.rms_norm_quant_fp8 (RmsNormParams and
// RmsNormQuantFp8Params name them alike): the residual, updated in place unless residual_out
// is given (the sum written there, the residual only read).
template <typename Args, typename Params>
void setResidualArgs(const Args& args, Params& q) {
  if (!args.has("residual")) return;
  q.residual = args.tensor("residual").data;
  q.residual_row_stride = args.integer("residual_row_stride");
  q.residual_variance = args.str("residual_variance", "rounded_sum") == "rounded_sum"
                            ? k::ResidualVariance::kRoundedSum
                            : k::ResidualVariance::kUnroundedSum;
  if (args.has("residual_out")) {
    q.residual_out = args.tensor("residual_out").data;
    q.residual_out_row_stride = args.integer("residual_out_row_stride");
  }
}

}  // namespace

// lib.rms_norm: RMSNorm of rows, optionally after adding a residual.
std::function<void(cudaStream_t)> Session::prepareRmsNorm(const KernelArgs& args) {
  const std::string& where = args.where;
  k::RmsNormParams q;
  q.num_tokens = args.integer("num_tokens");
  q.hidden_size = args.integer("hidden_size");
  q.dtype = kdtype(args.dtype("dtype"), where);
  q.weight_dtype = args.has("weight_dtype") ? kdtype(args.dtype("weight_dtype"), where) : q.dtype;
  q.input = args.tensor("input").data;
  q.input_row_stride = args.integer("input_row_stride");
  if (args.has("weight")) q.weight = args.tensor("weight").data;
  q.output = args.tensor("output").data;
  q.output_row_stride = args.integer("output_row_stride");
  setResidualArgs(args, q);
  q.epsilon = static_cast<float>(args.real("epsilon", 1e-6));
  return checkedLibraryLaunch(q, [](const auto& p, cudaStream_t s) { return k::RmsNorm(p, s); }, where);
}

// lib.quant_fp8: FP8 quantization of rows.
std::function<void(cudaStream_t)> Session::prepareQuantFp8(const KernelArgs& args) {
  const std::string& where = args.where;
  const k::Fp8ScaleSpec sc = args.fp8Scale();
  k::QuantFp8Params q;
  q.num_tokens = args.integer("num_tokens");
  q.hidden_size = args.integer("hidden_size");
  q.dtype = kdtype(args.dtype("dtype"), where);
  q.input = args.tensor("input").data;
  q.input_row_stride = args.integer("input_row_stride");
  q.output = args.tensor("output").data;
  q.output_row_stride = args.integer("output_row_stride");
  q.scale = sc;
  return checkedLibraryLaunch(q, [](const auto& p, cudaStream_t s) { return k::QuantFp8(p, s); }, where);
}

// lib.rms_norm_quant_fp8: RMSNorm of rows (optionally after adding a residual) quantized to FP8.
std::function<void(cudaStream_t)> Session::prepareRmsNormQuantFp8(const KernelArgs& args) {
  const std::string& where = args.where;
  const k::Fp8ScaleSpec sc = args.fp8Scale();
  k::RmsNormQuantFp8Params q;
  q.num_tokens = args.integer("num_tokens");
  q.hidden_size = args.integer("hidden_size");
  q.dtype = kdtype(args.dtype("dtype"), where);
  q.weight_dtype = args.has("weight_dtype") ? kdtype(args.dtype("weight_dtype"), where) : q.dtype;
  q.input = args.tensor("input").data;
  q.input_row_stride = args.integer("input_row_stride");
  if (args.has("weight")) q.weight = args.tensor("weight").data;
  setResidualArgs(args, q);
  q.epsilon = static_cast<float>(args.real("epsilon", 1e-6));
  q.output = args.tensor("output").data;
  q.output_row_stride = args.integer("output_row_stride");
  q.scale = sc;
  return checkedLibraryLaunch(q, [](const auto& p, cudaStream_t s) { return k::RmsNormQuantFp8(p, s); }, where);
}

// lib.silu_and_mul: SiLU(gate) * up of rows, optionally scaled into an FP8 output; `step`
// learns whether the small-M GEMM before it could do it as its epilogue.
std::function<void(cudaStream_t)> Session::prepareSiluAndMul(const KernelArgs& args, Prepared* step) {
  const std::string& where = args.where;
  k::SiluAndMulParams q;
  q.num_tokens = args.integer("num_tokens");
  q.hidden_size = args.integer("hidden_size");
  q.dtype = kdtype(args.dtype("dtype"), where);
  q.input = args.tensor("input").data;
  q.input_row_stride = args.integer("input_row_stride");
  q.output_dtype = kdtype(args.dtype("output_dtype"), where);
  q.output = args.tensor("output").data;
  q.output_row_stride = args.integer("output_row_stride");
  if (args.has("scale")) q.scale = static_cast<const float*>(args.tensor("scale").data);
  q.scale_application = args.str("scale_application", "multiply_by_reciprocal") == "divide"
                            ? k::ScaleApplication::kDivide
                            : k::ScaleApplication::kMultiplyByReciprocal;
  auto launch = checkedLibraryLaunch(q, [](const auto& p, cudaStream_t s) { return k::SiluAndMul(p, s); }, where);
  step->gated_silu = GatedSiluOf(q, args.args.at("input")->tensor(), args.args.at("output")->tensor());
  return launch;
}

// rt.attention: scaled dot-product attention of 4-D [batch, heads, seq, head_size] operands,
// on the sm90 kernels when the step asks for them (impl = "sm90") and they take the call,
// else on the reference kernel. The step's cleanup receives the sm90 decode workspace; an sm90
// step records its operands for fuseAttentionPrologues.
std::function<void(cudaStream_t)> Session::prepareAttention(const KernelArgs& args, Prepared* step) {
  const std::string& where = args.where;
  AttentionParams q;
  DeviceTensor tq = args.tensor("q"), tk = args.tensor("k"), tv = args.tensor("v"), to = args.tensor("out");
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
  q.scale = static_cast<float>(args.real("scale", 1.0 / std::sqrt(static_cast<double>(q.E))));
  q.causal = args.flag("causal");
  if (args.has("mask")) {
    DeviceTensor tm = args.tensor("mask");
    q.mask = tm.data;
    q.mask_dtype = attnType(tm.dtype, where);
    for (int d = 0; d < 4; ++d)
      q.mask_stride[d] = tm.shape[static_cast<size_t>(d)] == 1 ? 0 : tm.strides[static_cast<size_t>(d)];
  }
  q.out_dtype = attnType(to.dtype, where);
  q.round_dtype = args.has("round_dtype") ? attnType(args.dtype("round_dtype"), where) : q.dtype;
  if (args.has("out_scale")) q.out_scale = static_cast<const float*>(args.tensor("out_scale").data);
  std::function<cudaError_t(cudaStream_t)> fast;
  // $FXFUSE_ATTENTION=reference forces the reference kernel (A/B checks, docs/attention.md).
  const char* attn_env = std::getenv("FXFUSE_ATTENTION");
  const bool force_ref = attn_env && std::string(attn_env) == "reference";
  if (args.str("impl", "reference") == "sm90" && !force_ref) {
    fast = sm90Attention(q, &step->cleanup);
    if (ShortAttentionFromEnv()) step->attention = AttentionStep{q, args.args.at("out")->tensor()};
  }
  if (fast) return [fast, where](cudaStream_t s) { check(fast(s), where); };
  return [q, where](cudaStream_t s) { check(LaunchAttention(q, s), where); };
}

// rt.reshape_and_cache / rt.paged_attention: the paged KV-cache steps (paged_steps.h), their
// tensor arguments by name.
std::function<void(cudaStream_t)> Session::preparePagedKernel(const std::string& name, const KernelArgs& args,
                                                              Prepared* step) {
  PagedOperands t;
  for (const auto& [arg, a] : args.args)
    if (a->v_case() == pb::KernelArg::kTensor) t[arg] = args.tensor(arg);
  // Whether every operand named is present and a tensor no step of the plan writes: the
  // metadata a kernel may then read before it waits for the preceding step (a graph that
  // computes seq_lens or positions, say, has a step that writes them).
  auto readOnly = [&](std::initializer_list<const char*> names) {
    return std::all_of(names.begin(), names.end(), [&](const char* operand_name) {
      const auto a = args.args.find(operand_name);
      return a != args.args.end() && a->second->v_case() == pb::KernelArg::kTensor &&
             lowering::readOnlyInPlan(plan_, a->second->tensor());
    });
  };
  if (name == "rt.reshape_and_cache") {
    // $FXFUSE_ROTARY_EARLY_METADATA=0 keeps every read after the wait (A/B runs).
    const char* early_env = std::getenv("FXFUSE_ROTARY_EARLY_METADATA");
    const bool metadata_read_only =
        !(early_env && early_env[0] == '0') && (args.has("slot_mapping")
                                                    ? readOnly({"positions", "slot_mapping", "cos_sin_cache"})
                                                    : readOnly({"positions", "cos_sin_cache"}));
    ReshapeAndCacheParams launched;
    auto run = prepareReshapeAndCacheStep(t, args.flag("is_neox"), metadata_read_only, args.where, &launched);
    if (launched.heads_kv == 0 && launched.query_out)
      step->rotation = RotationStep{launched, args.args.at("query_out")->tensor()};
    if (launched.heads_kv > 0 && launched.positions) step->rotary_cache_write = launched;
    return run;
  }
  std::optional<double> scale;
  if (args.has("scale")) scale = args.real("scale", 0.0);
  const bool metadata_read_only = readOnly({"block_table", "seq_lens", "query_start_loc"});
  int kernels = 1;
  auto run = preparePagedAttentionStep(t, scale, metadata_read_only, *paged_scratch_, kernels, args.where);
  launches_ += kernels - 1;  // prepareKernel counted one
  return run;
}

// The cuBLASLt state of one matmul step: descriptors, layouts, the chosen algorithm, and the
// scalars and pointers of the call. Shared by the step's launch closure and its cleanup.
struct Session::MatmulLaunch {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t lx = nullptr, ly = nullptr, lc = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo;
  float alpha = 1, beta = 0;
  const void *x = nullptr, *y = nullptr, *c = nullptr;
  void* d = nullptr;
  std::optional<SmallMFp8GemmParams> small_m;  // set: the small-M FP8 kernel runs the step instead
};

// A matmul step's operands under the bound symbols and how cuBLASLt (column-major) reads
// them: D^T[N, M] = op(X)[N, K] * op(Y)[K, M], X from B, Y from A.
struct Session::MatmulOperands {
  DeviceTensor A, B, Dt;
  int64_t M = 0, N = 0, K = 0, batch = 1;
  cublasOperation_t opx = CUBLAS_OP_N, opy = CUBLAS_OP_N;
  int64_t ldx = 0, ldy = 0;
  int64_t bsb = 0, asb = 0;  // batch strides of B and A (0 when not 3-D)
  cudaDataType_t ta = CUDA_R_32F, tb = CUDA_R_32F, td = CUDA_R_32F;
  cudaDataType_t tc = CUDA_R_32F;  // C: D's type, bf16 for an FP8 output of FP8 operands
  bool fp8 = false;                // A (so the call) is FP8
};

// One Matmul step: a cuBLASLt matmul with the step's scales and epilogue, its algorithm chosen
// (tuned on `stream` when tuning is on) now. `step` gets the cleanup that frees the descriptors.
std::function<void(cudaStream_t)> Session::prepareMatmul(const pb::Matmul& mm, cudaStream_t stream, Prepared* step) {
  const std::string& where = step->where;
  launches_++;
  ensureCublasLt();
  const MatmulOperands o = matmulOperands(mm, where);
  auto m = std::make_shared<MatmulLaunch>();
  createMatmulDesc(mm, o, m.get(), where);
  createMatmulLayouts(o, m.get(), where);
  m->alpha = static_cast<float>(mm.alpha() == 0 && mm.beta() == 0 ? 1.0 : mm.alpha());
  m->beta = static_cast<float>(mm.beta());
  m->x = o.B.data;
  m->y = o.A.data;
  m->d = o.Dt.data;
  m->c = mm.c() >= 0 ? tensor(mm.c()).data : o.Dt.data;
  chooseMatmulAlgorithm(mm, o, m.get(), stream, where);
  void* wsp = workspace_;
  size_t wsb = static_cast<size_t>(workspace_bytes_);
  void* handle = cublas_;
  step->cleanup.push_back([m] {
    const CublasLtApi& l = cublasLt();
    l.cublasLtMatrixLayoutDestroy(m->lx);
    l.cublasLtMatrixLayoutDestroy(m->ly);
    l.cublasLtMatrixLayoutDestroy(m->lc);
    l.cublasLtMatrixLayoutDestroy(m->ld);
    l.cublasLtMatmulDescDestroy(m->desc);
  });
  step->own_gemm = m->small_m;
  if (m->small_m)
    return [p = *m->small_m, where](cudaStream_t s) { check(LaunchSmallMFp8Gemm(p, s), where); };
  return [m, wsp, wsb, handle, where](cudaStream_t s) {
    checkLt(cublasLt().cublasLtMatmul(static_cast<cublasLtHandle_t>(handle), m->desc, &m->alpha, m->x, m->lx, m->y,
                                      m->ly, &m->beta, m->c, m->lc, m->d, m->ld, &m->algo, wsp, wsb, s),
            where);
  };
}

// The session's cuBLASLt handle and workspace, made by the first matmul step that needs them.
void Session::ensureCublasLt() {
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
}

// The operands of a matmul step: sizes, transposes and leading dimensions from the tensors'
// strides (each operand needs a unit stride in one of its last two dims), and the data types.
Session::MatmulOperands Session::matmulOperands(const pb::Matmul& mm, const std::string& where) const {
  MatmulOperands o;
  o.A = tensor(mm.a());
  o.B = tensor(mm.b());
  o.Dt = tensor(mm.d());
  o.M = eval(mm.m(), where);
  o.N = eval(mm.n(), where);
  o.K = eval(mm.k(), where);
  o.batch = mm.has_batch() ? eval(mm.batch(), where) : 1;
  const int64_t M = o.M, N = o.N, K = o.K;
  auto last2 = [](const DeviceTensor& t, int64_t* s0, int64_t* s1) {
    size_t r = t.shape.size();
    *s0 = t.strides[r - 2];
    *s1 = t.strides[r - 1];
  };
  int64_t as0, as1, bs0, bs1;
  last2(o.A, &as0, &as1);
  last2(o.B, &bs0, &bs1);
  bool b_row = bs1 == 1 || N == 1;  // B row-major [K, N]: X = N x K "N"
  if (bs1 == 1 && bs0 == 1) b_row = true;
  o.opx = b_row ? CUBLAS_OP_N : CUBLAS_OP_T;
  o.ldx = b_row ? std::max<int64_t>(bs0, N) : std::max<int64_t>(bs1, K);
  if (!b_row && bs0 != 1 && K != 1) fail("{}: matmul B has no unit stride", where);
  bool a_row = as1 == 1 || K == 1;
  o.opy = a_row ? CUBLAS_OP_N : CUBLAS_OP_T;
  o.ldy = a_row ? std::max<int64_t>(as0, K) : std::max<int64_t>(as1, M);
  if (!a_row && as0 != 1 && M != 1) fail("{}: matmul A has no unit stride", where);
  o.ta = cudaType(mm.a_dtype(), where);
  o.tb = cudaType(mm.b_dtype(), where);
  o.td = cudaType(mm.d_dtype(), where);
  o.fp8 = mm.a_dtype() == irpb::F8E4M3FN || mm.a_dtype() == irpb::F8E5M2;
  o.tc = o.td;
  if (o.fp8 && (o.td == CUDA_R_8F_E4M3 || o.td == CUDA_R_8F_E5M2)) o.tc = CUDA_R_16BF;
  o.bsb = o.B.shape.size() == 3 ? o.B.strides[0] : 0;
  o.asb = o.A.shape.size() == 3 ? o.A.strides[0] : 0;
  return o;
}

// The matmul descriptor of a step: transposes, FP8 scale pointers and fast accumulation, and
// the bias epilogue.
void Session::createMatmulDesc(const pb::Matmul& mm, const MatmulOperands& o, MatmulLaunch* m,
                               const std::string& where) const {
  const CublasLtApi& lt = cublasLt();
  checkLt(lt.cublasLtMatmulDescCreate(&m->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), where);
  auto setd = [&](cublasLtMatmulDescAttributes_t a, const void* v, size_t n) {
    checkLt(lt.cublasLtMatmulDescSetAttribute(m->desc, a, v, n), where);
  };
  setd(CUBLASLT_MATMUL_DESC_TRANSA, &o.opx, sizeof o.opx);
  setd(CUBLASLT_MATMUL_DESC_TRANSB, &o.opy, sizeof o.opy);
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
  if (o.fp8) {
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
}

// The matrix layouts of a matmul step's X, Y, D and C (strided batches when batch > 1).
void Session::createMatmulLayouts(const MatmulOperands& o, MatmulLaunch* m, const std::string& where) const {
  const CublasLtApi& lt = cublasLt();
  const int64_t M = o.M, N = o.N, K = o.K;
  auto layout = [&](cublasLtMatrixLayout_t* l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ldv,
                    int64_t bstride) {
    checkLt(lt.cublasLtMatrixLayoutCreate(l, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ldv), where);
    if (o.batch > 1) {
      int32_t bc = static_cast<int32_t>(o.batch);
      checkLt(lt.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc), where);
      checkLt(lt.cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &bstride,
                                                  sizeof bstride),
              where);
    }
  };
  layout(&m->lx, o.tb, o.opx == CUBLAS_OP_N ? N : K, o.opx == CUBLAS_OP_N ? K : N, o.ldx, o.bsb);
  layout(&m->ly, o.ta, o.opy == CUBLAS_OP_N ? K : M, o.opy == CUBLAS_OP_N ? M : K, o.ldy, o.asb);
  layout(&m->ld, o.td, N, M, N, M * N);
  layout(&m->lc, o.tc, N, M, N, M * N);
}

// The small-M FP8 kernel's view of a matmul step when it can take it: one e4m3 x e4m3 product
// with per-tensor scales, alpha 1 and no C, at most kSmallMFp8MaxRows rows, the activations
// row-major and the weight column-major (vLLM's layout), the output row-major.
std::optional<SmallMFp8GemmParams> Session::smallMFp8Params(const pb::Matmul& mm, const MatmulOperands& o,
                                                            const MatmulLaunch& m, const std::string& where) const {
  const bool e4m3 = mm.a_dtype() == irpb::F8E4M3FN && mm.b_dtype() == irpb::F8E4M3FN;
  if (!e4m3 || o.batch != 1 || o.M > kSmallMFp8MaxRows || mm.scale_mode() != pb::SCALE_PER_TENSOR ||
      mm.scale_d() >= 0 || m.beta != 0 || m.alpha != 1 || o.opy != CUBLAS_OP_N || o.opx != CUBLAS_OP_T)
    return std::nullopt;
  const DeviceTensor sa = tensor(mm.scale_a()), sb = tensor(mm.scale_b());
  auto elements = [](const DeviceTensor& t) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    return n;
  };
  if (elements(sa) != 1 || elements(sb) != 1) return std::nullopt;
  SmallMFp8GemmParams p;
  p.M = o.M, p.N = o.N, p.K = o.K;
  p.x = o.A.data, p.x_row_stride = o.ldy;
  p.w = o.B.data, p.w_row_stride = o.ldx;
  p.w_read_only = lowering::readOnlyInPlan(plan_, mm.b());  // read before the wait only then
  p.scale_x = static_cast<const float*>(sa.data);
  p.scale_w = static_cast<const float*>(sb.data);
  if (mm.epilogue() == pb::EPILOGUE_BIAS && mm.bias() >= 0) {
    p.bias = tensor(mm.bias()).data;
    p.bias_dtype = kdtype(plan_.tensors(mm.bias()).dtype(), where);
  }
  p.out = o.Dt.data, p.out_row_stride = o.N, p.out_dtype = kdtype(mm.d_dtype(), where);
  if (SmallMFp8GemmUnsupported(p)) return std::nullopt;
  return p;
}

namespace {
// The largest power of two up to 256 dividing `p`'s address: cuBLASLt's heuristic assumes 256
// for every operand unless told otherwise, and a view into a buffer may start less aligned.
uint32_t pointerAlignment(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}
}  // namespace

// Sets m->algo: cuBLASLt's heuristic candidates for the call, the pinned one ("heuristic:N")
// or the fastest measured (chooseGemmAlgorithm), and records the choice in matmulAlgorithms().
void Session::chooseMatmulAlgorithm(const pb::Matmul& mm, const MatmulOperands& o, MatmulLaunch* m,
                                    cudaStream_t stream, const std::string& where) {
  const CublasLtApi& lt = cublasLt();
  const int64_t M = o.M, N = o.N, K = o.K, batch = o.batch;
  cublasLtMatmulPreference_t pref;
  checkLt(lt.cublasLtMatmulPreferenceCreate(&pref), where);
  uint64_t ws = static_cast<uint64_t>(workspace_bytes_);
  checkLt(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
          where);
  // Only algorithms that work at the operands' real alignments (cuBLASLt's A and B are X and Y).
  const uint32_t align[4] = {pointerAlignment(m->x), pointerAlignment(m->y), pointerAlignment(m->c),
                             pointerAlignment(m->d)};
  const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    checkLt(lt.cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &align[i], sizeof align[i]), where);
  cublasLtMatmulHeuristicResult_t res[kGemmCandidates];
  int found = 0;
  int want = 0;
  if (mm.algorithm().rfind("heuristic:", 0) == 0) want = std::stoi(mm.algorithm().substr(10));
  cublasStatus_t hs = lt.cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(cublas_), m->desc, m->lx, m->ly,
                                                        m->lc, m->ld, pref, kGemmCandidates, res, &found);
  lt.cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0)
    fail("{}: cuBLASLt has no algorithm for this matmul (M={} N={} K={}, {} x {} -> {}): {}", where, M, N, K,
         irpb::DType_Name(mm.a_dtype()), irpb::DType_Name(mm.b_dtype()), irpb::DType_Name(mm.d_dtype()),
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
  const std::string key =
      fmt::format("dev{} M{} N{} K{} b{} {}x{}->{} c{} ops{}{} ld{},{} bs{},{} scale{} fast{} ep{} bias{} beta{} ws{} "
                  "align{}",
                  device, M, N, K, batch, static_cast<int>(o.ta), static_cast<int>(o.tb), static_cast<int>(o.td),
                  static_cast<int>(o.tc), static_cast<int>(o.opx), static_cast<int>(o.opy), o.ldx, o.ldy, o.bsb, o.asb,
                  static_cast<int>(mm.scale_mode()), mm.fast_accum() ? 1 : 0, static_cast<int>(mm.epilogue()),
                  mm.bias() >= 0 ? static_cast<int>(plan_.tensors(mm.bias()).dtype()) : -1, m->beta, workspace_bytes_,
                  fmt::join(align, ","));
  GemmChoice choice = chooseGemmAlgorithm(call, res, found, want, gemm_tune_ && !pinned, stream, key, where);
  m->algo = choice.algo;
  if (std::optional<SmallMFp8GemmParams> small = smallMFp8Params(mm, o, *m, where)) {
    // Every K split (and above 16 rows every tile height) the kernel can take is a candidate:
    // its rules model waves of equal CTAs, which the GPU's tail, cluster scheduling and L2 do
    // not follow exactly.
    const std::vector<SmallMFp8GemmParams> shapes = SmallMFp8GemmConfigurations(*small);
    std::vector<OwnGemmCandidate> candidates;
    for (const SmallMFp8GemmParams& shape : shapes)
      candidates.push_back({SmallMFp8GemmConfigurationName(shape), [p = shape](void* d, cudaStream_t s) {
                              SmallMFp8GemmParams q = p;
                              q.out = d;
                              return LaunchSmallMFp8Gemm(q, s);
                            }});
    OwnGemmChoice own = chooseOwnGemm(call, choice, candidates, o.td, gemm_tune_ && !pinned, stream, key, where);
    if (own.candidate >= 0) *small = shapes[static_cast<size_t>(own.candidate)];
    bool use = own.use;
    if (own.eligible) {
      const auto forced = own_gemm_in_step_.find(key);
      if (forced != own_gemm_in_step_.end() && forced->second != use) {
        use = forced->second;
        own.summary += fmt::format(", {} in the step", use ? "own kernel" : "cuBLASLt");
      }
      own_gemm_sites_[key] = {use, M <= kSmallMFp8MmaSyncMaxRows, fmt::format("M={} N={} K={}", M, N, K)};
    }
    choice.summary += own.summary;
    const auto prefetch = own_gemm_prefetch_in_step_.find(key);
    if (use && prefetch != own_gemm_prefetch_in_step_.end()) {
      small->l2_prefetch_bytes = prefetch->second;
      choice.summary += fmt::format(", L2 prefetch {} bytes in the step", prefetch->second);
    }
    if (use) m->small_m = small;
  }
  if (!m->small_m) choice.summary += cublasAlgorithmInStep(key, choice, fmt::format("M={} N={} K={}", M, N, K), m);
  matmul_algorithms_.push_back(fmt::format("{}: M={} N={} K={}{} {}x{}->{}: {}", where, M, N, K,
                                           batch > 1 ? fmt::format(" batch={}", batch) : "",
                                           irpb::DType_Name(mm.a_dtype()), irpb::DType_Name(mm.b_dtype()),
                                           irpb::DType_Name(mm.d_dtype()), choice.summary));
}

// A matmul that runs cuBLASLt with runner-up algorithms is a site chooseCublasAlgorithmsInStep
// may re-decide; runs the candidate the step chose. Returns the summary's suffix naming it.
std::string Session::cublasAlgorithmInStep(const std::string& key, const GemmChoice& choice, const std::string& what,
                                           MatmulLaunch* m) {
  if (choice.in_step.size() < 2) return "";
  const auto chosen = cublas_algo_in_step_.find(key);
  int index = chosen != cublas_algo_in_step_.end() ? chosen->second : 0;
  if (index < 0 || index >= static_cast<int>(choice.in_step.size())) index = 0;
  CublasSite& site = cublas_sites_[key];
  site = {index, {}, what};
  for (const GemmCandidate& c : choice.in_step) site.candidates.push_back(c.what);
  if (index == 0) return "";
  m->algo = choice.in_step[static_cast<size_t>(index)].algo;
  return fmt::format(", in the step: {}", choice.in_step[static_cast<size_t>(index)].what);
}

bool Session::programmaticLaunch() { return k::ProgrammaticLaunchEnabled(); }

bool Session::gemmInStepChoice() { return gemmInStepFromEnv(); }

// One Copy step: a device-to-device copy (nothing enqueued for 0 bytes).
std::function<void(cudaStream_t)> Session::prepareCopy(const pb::Copy& c, const std::string& where) const {
  void* src = pointer(c.src());
  void* dst = pointer(c.dst());
  size_t n = static_cast<size_t>(eval(c.bytes(), where));
  return [src, dst, n, where](cudaStream_t s) {
    if (n) check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s), where);
  };
}

// One Memset step: bytes of the destination set to the step's value (nothing enqueued for 0 bytes).
std::function<void(cudaStream_t)> Session::prepareMemset(const pb::Memset& m, const std::string& where) const {
  void* dst = pointer(m.dst());
  size_t n = static_cast<size_t>(eval(m.bytes(), where));
  int v = m.value();
  return [dst, n, v, where](cudaStream_t s) {
    if (n) check(cudaMemsetAsync(dst, v, n, s), where);
  };
}

// One Collective step: an NCCL all-reduce (sum) over the session's communicator.
std::function<void(cudaStream_t)> Session::prepareCollective(const pb::Collective& c, const std::string& where) {
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
  return [src, dst, count, dt, nc, where](cudaStream_t s) {
    if (count) checkNcclCall(nccl().ncclAllReduce(src, dst, count, dt, ncclSum, nc, s), where);
  };
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

// A FusedAllReduceNorm step's operands under the bound symbols (null: an absent optional tensor).
struct Session::FusedNormOperands {
  int world_size = 1;
  int64_t T = 0, H = 0;  // tokens, hidden size
  k::DType dt = k::DType::BF16;
  void* input = nullptr;
  void* residual = nullptr;
  void* allreduce_out = nullptr;
  const void* weight = nullptr;
  void* norm_out = nullptr;
  void* quant_out = nullptr;
  const float* scale = nullptr;
  bool rounded = true;  // the residual variance is that of the rounded sum
  bool divide = false;  // the FP8 scale is applied by division
};

// One FusedAllReduceNorm step: the fused kernels when they take the call, else NCCL all-reduce
// (identity at world size 1) followed by the single-GPU fused add + RMSNorm (+ FP8 quant).
std::function<void(cudaStream_t)> Session::prepareFusedAllReduceNorm(const pb::FusedAllReduceNorm& f,
                                                                      const std::string& where) {
  FusedNormOperands o;
  o.world_size = std::max(1, plan_.world_size());
  auto opt = [&](int t) -> void* { return t >= 0 ? pointer(t) : nullptr; };
  o.T = eval(f.num_tokens(), where);
  o.H = eval(f.hidden_size(), where);
  o.dt = kdtype(f.dtype(), where);
  o.input = pointer(f.input());
  o.residual = opt(f.residual());
  o.allreduce_out = opt(f.allreduce_out());
  o.weight = opt(f.weight());
  o.norm_out = opt(f.norm_out());
  o.quant_out = opt(f.quant_out());
  o.scale = static_cast<const float*>(opt(f.scale()));
  if (o.quant_out && !o.scale) fail("{}: FP8 output without a scale", where);
  o.rounded = f.residual_variance() != "unrounded_sum";
  o.divide = f.scale_application() == "divide";
#ifdef FXFUSE_HAVE_ALLREDUCE_KERNELS
  if (auto fused = fusedAllReduceNormKernel(f, o, where)) return fused;
#endif
  fused_algorithms_.push_back(algorithmName(k::AllReduceAlgorithm::kNcclFallback));
  return allReduceThenNorm(f, o, where);
}

#ifdef FXFUSE_HAVE_ALLREDUCE_KERNELS
// The fused all-reduce + RMSNorm kernels for a FusedAllReduceNorm step, or an empty function
// when the call goes to the NCCL fallback: the algorithm is set to NCCL, the step wants an
// unrounded residual variance or a divided scale (the kernels do neither), no workspace is
// mapped at world size > 1, or the kernels' own algorithm choice is the fallback.
std::function<void(cudaStream_t)> Session::fusedAllReduceNormKernel(const pb::FusedAllReduceNorm& f,
                                                                    const FusedNormOperands& o,
                                                                    const std::string& where) {
  k::AllReduceAlgorithm algo = k::AllReduceAlgorithm::kNcclFallback;
  k::AllReduceRmsNormParams q;
  q.num_tokens = o.T;
  q.hidden_size = o.H;
  q.dtype = o.dt;
  q.input = o.input;
  q.residual = o.residual;
  q.allreduce_out = o.allreduce_out;
  q.weight = o.weight;
  q.epsilon = static_cast<float>(f.epsilon());
  q.norm_out = o.norm_out;
  q.quant_out = o.quant_out;
  q.scale = o.scale;
  q.algorithm = allreduce_algorithm_;
  // The workspace prepareCollectives() mapped for the whole plan (remapping here would leave
  // the steps prepared before with stale peer pointers); calls it cannot hold fall back.
  const k::AllReduceWorkspace* mapped = o.world_size > 1 ? comm_->mappedWorkspace() : nullptr;
  if (mapped) q.workspace = *mapped;
  bool kernel_ok = allreduce_algorithm_ != k::AllReduceAlgorithm::kNcclFallback && (o.rounded || !o.residual) &&
                   !o.divide && (o.world_size == 1 || mapped);
  if (kernel_ok) {
    k::Status cs = q.Check();
    if (!cs.ok()) fail("{}: {}", where, cs.ToString());
    algo = k::ResolveAllReduceAlgorithm(q);
  }
  if (algo == k::AllReduceAlgorithm::kNcclFallback) return {};
  q.algorithm = algo;
  fused_algorithms_.push_back(algorithmName(algo));
  launches_++;
  return [q, where](cudaStream_t s) {
    k::Status r = k::AllReduceRmsNorm(q, s);
    if (!r.ok()) fail("{}: {}", where, r.ToString());
  };
}
#endif

// The NCCL fallback of a FusedAllReduceNorm step: a = all_reduce(input) (into allreduce_out
// when the graph wants it, else the scratch buffer; at world size 1 the input itself, copied
// to allreduce_out when that is another buffer), then the single-GPU fused add + RMSNorm
// (+ FP8 quant) of a.
std::function<void(cudaStream_t)> Session::allReduceThenNorm(const pb::FusedAllReduceNorm& f,
                                                             const FusedNormOperands& o, const std::string& where) {
  void* const input = o.input;
  void* const allreduce_out = o.allreduce_out;
  const int64_t H = o.H;
  const size_t count = static_cast<size_t>(o.T * H);
  void* a = input;
  std::function<void(cudaStream_t)> reduce;
  if (o.world_size > 1) {
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
  const k::ResidualVariance variance =
      o.rounded ? k::ResidualVariance::kRoundedSum : k::ResidualVariance::kUnroundedSum;
  // The fields RmsNorm and RmsNormQuantFp8 share: rows of a (+ residual), weight, epsilon.
  auto rowsOf = [&](auto& n) {
    n.num_tokens = o.T;
    n.hidden_size = H;
    n.dtype = o.dt;
    n.weight_dtype = o.dt;
    n.input = a;
    n.input_row_stride = H;
    n.weight = o.weight;
    if (o.residual) {
      n.residual = o.residual;
      n.residual_row_stride = H;
      n.residual_variance = variance;
    }
    n.epsilon = static_cast<float>(f.epsilon());
  };
  std::function<void(cudaStream_t)> norm;
  if (o.quant_out) {
    k::RmsNormQuantFp8Params n;
    rowsOf(n);
    n.output = o.quant_out;
    n.output_row_stride = H;
    n.scale.kind = k::Fp8ScaleKind::kStaticPerTensor;
    n.scale.scale = const_cast<float*>(o.scale);
    n.scale.application = o.divide ? k::ScaleApplication::kDivide : k::ScaleApplication::kMultiplyByReciprocal;
    k::Status cs = n.Check();
    if (!cs.ok()) fail("{}: {}", where, cs.ToString());
    norm = [n, where](cudaStream_t s) {
      k::Status r = k::RmsNormQuantFp8(n, s);
      if (!r.ok()) fail("{}: {}", where, r.ToString());
    };
  } else {
    k::RmsNormParams n;
    rowsOf(n);
    n.output = o.norm_out;
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
  enqueueSteps(stream);
}

// The prefetch stream waits for the main stream at each fork step, then issues that step's
// prefetches; nothing on the main stream waits for a prefetch until the end of the run, where
// the join makes the run one unit (a captured graph must join every stream it forked).
void Session::enqueueSteps(cudaStream_t stream) {
  size_t next = 0;
  for (size_t i = 0; i < steps_.size(); ++i) {
    if (next < prefetches_.size() && prefetches_[next].fork_step == i) {
      check(cudaEventRecord(fork_event_, stream), "recording the prefetch fork");
      check(cudaStreamWaitEvent(prefetch_stream_, fork_event_, 0), "forking the prefetch stream");
      for (; next < prefetches_.size() && prefetches_[next].fork_step == i; ++next)
        check(LaunchL2Prefetch(prefetches_[next].data, prefetches_[next].bytes, prefetch_evict_last_, prefetch_stream_),
              prefetches_[next].where);
    }
    if (i < left_out_.size() && left_out_[i]) continue;
    steps_[i]->run(stream);
  }
  if (next == 0) return;
  check(cudaEventRecord(join_event_, prefetch_stream_), "recording the prefetch join");
  check(cudaStreamWaitEvent(stream, join_event_, 0), "joining the prefetch stream");
}

void Session::capture(cudaStream_t stream) {
  if (dirty_) prepare(stream);
  dropGraph("");
  dropped_because_.clear();
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "beginning graph capture");
  try {
    enqueueSteps(stream);
  } catch (...) {
    cudaGraph_t g;
    cudaStreamEndCapture(stream, &g);
    if (g) cudaGraphDestroy(g);
    throw;
  }
  check(cudaStreamEndCapture(stream, &graph_), "ending graph capture");
  check(cudaGraphInstantiate(&graph_exec_, graph_, 0), "instantiating the CUDA graph");
}

std::vector<double> Session::profileSteps(cudaStream_t stream, int iters) {
  if (env_.empty() && plan_.symbols_size() > 0) fail("Session::profileSteps before bind()");
  if (dirty_) prepare(stream);
  std::vector<cudaEvent_t> marks(steps_.size() + 1);
  for (auto& e : marks) check(cudaEventCreate(&e), "creating a profiling event");
  std::vector<std::vector<float>> per_step(steps_.size());
  for (int it = 0; it < iters; ++it) {
    check(cudaEventRecord(marks[0], stream), "recording a profiling event");
    for (size_t i = 0; i < steps_.size(); ++i) {
      steps_[i]->run(stream);
      check(cudaEventRecord(marks[i + 1], stream), "recording a profiling event");
    }
    check(cudaEventSynchronize(marks.back()), "profiling the steps");
    for (size_t i = 0; i < steps_.size(); ++i) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, marks[i], marks[i + 1]), "reading a profiling event");
      per_step[i].push_back(ms);
    }
  }
  for (auto& e : marks) cudaEventDestroy(e);
  std::vector<double> median_us;
  for (auto& v : per_step) {
    std::sort(v.begin(), v.end());
    median_us.push_back(v.empty() ? 0.0 : 1000.0 * v[v.size() / 2]);
  }
  return median_us;
}

void Session::replay(cudaStream_t stream) {
  if (!graph_exec_)
    fail("Session::replay before capture(){}",
         dropped_because_.empty() ? "" : fmt::format(": the last capture's graph was dropped ({}); capture() again",
                                                     dropped_because_));
  check(cudaGraphLaunch(graph_exec_, stream), "launching the CUDA graph");
}

// Captures the plan as prepared and returns the median of `replays` timed replays (after two
// untimed ones), in microseconds.
double Session::medianReplayUs(cudaStream_t stream, int replays) {
  capture(stream);
  for (int i = 0; i < 2; ++i) replay(stream);
  cudaEvent_t a = nullptr, b = nullptr;
  check(cudaEventCreate(&a), "creating a timing event");
  check(cudaEventCreate(&b), "creating a timing event");
  std::vector<float> ms;
  for (int i = 0; i < replays; ++i) {
    check(cudaEventRecord(a, stream), "recording a timing event");
    replay(stream);
    check(cudaEventRecord(b, stream), "recording a timing event");
    check(cudaEventSynchronize(b), "timing a replay");
    float t = 0;
    check(cudaEventElapsedTime(&t, a, b), "reading a replay time");
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms.empty() ? 0.0 : 1000.0 * ms[ms.size() / 2];
}

double Session::medianReplayUsWithout(cudaStream_t stream, const std::vector<bool>& left_out, int replays) {
  if (comm_) fail("Session::medianReplayUsWithout: ablation timing is for one GPU (ranks would leave out collectives)");
  if (env_.empty() && plan_.symbols_size() > 0) fail("Session::medianReplayUsWithout before bind()");
  if (left_out.size() != static_cast<size_t>(plan_.steps_size()))
    fail("Session::medianReplayUsWithout: {} step flags for a plan of {} steps", left_out.size(), plan_.steps_size());
  if (dirty_) prepare(stream);
  struct Restore {  // the whole plan again, whatever happens
    Session& s;
    ~Restore() {
      s.left_out_.clear();
      s.dropGraph("a what-if capture without some steps replaced it");
    }
  } restore{*this};
  left_out_ = left_out;
  return medianReplayUs(stream, replays);
}

namespace {
constexpr double kInStepMargin = 0.003;  // a switch in the step must beat the replay-to-replay noise
}  // namespace

std::vector<std::string> Session::chooseGemmsInStep(cudaStream_t stream, int replays) {
  std::vector<std::string> lines;
  if (!gemm_tune_ || replays < 1) return lines;
  if (env_.empty() && plan_.symbols_size() > 0) fail("Session::chooseGemmsInStep before bind()");
  if (dirty_) prepare(stream);
  if (own_gemm_sites_.empty() && cublas_sites_.empty()) return lines;
  double best = medianReplayUs(stream, replays);
  for (auto choose : {&Session::chooseOwnGemmsInStep, &Session::chooseOwnGemmPrefetchInStep,
                       &Session::chooseCublasAlgorithmsInStep})
    for (std::string& line : (this->*choose)(stream, replays, &best)) lines.push_back(std::move(line));
  return lines;
}

// What an in-step trial's candidate must beat (by kInStepMargin): the best time so far, or, with
// gemmInStepFreshBaselineFromEnv, the step as it stands timed again just before the candidate
// (a baseline taken once compares later candidates with a GPU whose clocks may have moved).
double Session::inStepBaselineUs(cudaStream_t stream, int replays, double best_us) {
  return gemmInStepFreshBaselineFromEnv() ? medianReplayUs(stream, replays) : best_us;
}

// Per GEMM shape where both kernels may run: the other kernel than the one the alone timing
// chose, timed in the step (the alone timing cannot see programmatic overlap).
std::vector<std::string> Session::chooseOwnGemmsInStep(cudaStream_t stream, int replays, double* best_us) {
  std::vector<std::string> lines;
  if (dirty_) prepare(stream);
  const std::map<std::string, OwnGemmSite> sites = own_gemm_sites_;  // prepare() refills it
  for (const auto& [key, site] : sites) {
    const double base = inStepBaselineUs(stream, replays, *best_us);
    own_gemm_in_step_[key] = !site.own;
    dirty_ = true;
    const double t = medianReplayUs(stream, replays);
    const bool keep = t < base * (1.0 - kInStepMargin);
    lines.push_back(fmt::format("{}: {} {:.1f} us per step, {} {:.1f} us: {}", site.what,
                                site.own ? "own kernel" : "cuBLASLt", base, site.own ? "cuBLASLt" : "own kernel", t,
                                keep ? "switched" : "kept"));
    if (keep) *best_us = t;
    else own_gemm_in_step_[key] = site.own;
  }
  dirty_ = true;
  return lines;
}

// Per shape that the own kernel's mma.sync path runs in the step: its weight copies with the
// default L2 prefetch size against none (or kSmallMFp8L2PrefetchBytes where the default is
// none). The hint halves the DRAM requests of the weight stream, which helps the step as a whole
// but not every GEMM timed alone (docs/benchmarks/decode_step.md, thirtieth session), so the
// step decides per shape.
std::vector<std::string> Session::chooseOwnGemmPrefetchInStep(cudaStream_t stream, int replays, double* best_us) {
  std::vector<std::string> lines;
  if (dirty_) prepare(stream);
  const std::map<std::string, OwnGemmSite> sites = own_gemm_sites_;
  for (const auto& [key, site] : sites) {
    if (!site.own || !site.mma_sync) continue;
    const auto chosen = own_gemm_prefetch_in_step_.find(key);
    const int current = chosen != own_gemm_prefetch_in_step_.end() ? chosen->second : SmallMFp8DefaultL2PrefetchBytes();
    const int other = current == 0 ? kSmallMFp8L2PrefetchBytes : 0;
    const double base = inStepBaselineUs(stream, replays, *best_us);
    own_gemm_prefetch_in_step_[key] = other;
    dirty_ = true;
    const double t = medianReplayUs(stream, replays);
    const bool keep = t < base * (1.0 - kInStepMargin);
    lines.push_back(fmt::format("{}: own kernel, L2 prefetch {} bytes {:.1f} us per step, {} bytes {:.1f} us: {}",
                                site.what, current, base, other, t, keep ? "switched" : "kept"));
    if (keep) *best_us = t;
    else own_gemm_prefetch_in_step_[key] = current;
  }
  dirty_ = true;
  return lines;
}

// Per shape that runs cuBLASLt in the step: each other candidate of GemmChoice::in_step (the
// tuned pick and the runner-ups timed alone within kInStepGemmWindow of it) in place of the one
// running. Timed alone with L2 flushed, algorithms within a few percent of each other rank
// differently than in the step, where each follows a kernel that left its output in L2 and
// overlaps its neighbours, so the step decides.
std::vector<std::string> Session::chooseCublasAlgorithmsInStep(cudaStream_t stream, int replays, double* best_us) {
  std::vector<std::string> lines;
  if (dirty_) prepare(stream);
  const std::map<std::string, CublasSite> sites = cublas_sites_;
  for (const auto& [key, site] : sites) {
    int current = site.chosen;
    for (int other = 0; other < static_cast<int>(site.candidates.size()); ++other) {
      if (other == current) continue;
      const double base = inStepBaselineUs(stream, replays, *best_us);
      cublas_algo_in_step_[key] = other;
      dirty_ = true;
      const double t = medianReplayUs(stream, replays);
      const bool keep = t < base * (1.0 - kInStepMargin);
      lines.push_back(fmt::format("{}: cuBLASLt {} {:.1f} us per step, {} {:.1f} us: {}", site.what,
                                  site.candidates[static_cast<size_t>(current)], base,
                                  site.candidates[static_cast<size_t>(other)], t, keep ? "switched" : "kept"));
      if (keep) {
        *best_us = t;
        current = other;
      }
    }
    cublas_algo_in_step_[key] = current;
  }
  dirty_ = true;
  return lines;
}

}  // namespace fxfuse::runtime
