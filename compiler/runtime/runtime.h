// The fxfuse CUDA runtime: runs launch plans (proto/fxfuse_plan.proto) on one GPU.
//
//   auto prog = fxfuse::runtime::Program::load("layer.plan.pb");   // compiles generated kernels
//   fxfuse::runtime::Session s(*prog);
//   s.bind({{"s0", 64}});                  // symbols (others come from input shapes)
//   s.setInput(0, d_x); ...                // caller-owned device memory, one per plan input
//   s.run(stream);                         // or s.capture(stream) once, then s.replay(stream)
//   fxfuse::runtime::DeviceTensor y = s.output(0);
//
// Generated kernels come from NVRTC at load (cached on disk by source hash), or, for plans
// built by the Bazel macro fxfuse_plan(), from a table of nvcc-compiled kernels linked into
// the binary (EmbeddedKernels). docs/runtime.md describes the API and its errors.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/runtime/attention_prologue.h"
#include "compiler/runtime/communicator.h"
#include "compiler/runtime/embedded.h"
#include "compiler/runtime/gemm_epilogue.h"
#include "kernels/all_reduce_rms_norm.h"
#include "kernels/runtime/small_m_fp8_gemm.h"
#include "proto/dtype.h"
#include "proto/fxfuse_plan.pb.h"

namespace fxfuse::runtime {

// Checks that a CUDA device of compute capability 9.0 is present and the driver is recent
// enough for this runtime. Returns an empty string when usable, else a one-line reason.
std::string deviceProblem();

struct LoadOptions {
  bool use_cache = true;                       // NVRTC disk cache
  const EmbeddedKernel* embedded = nullptr;    // build-time kernels (fxfuse_plan macro)
  size_t num_embedded = 0;
};

class Program {
 public:
  static std::unique_ptr<Program> load(const std::string& path, const LoadOptions& opts = {});
  static std::unique_ptr<Program> fromPlan(fxfuse::plan::v1::Plan plan, const LoadOptions& opts = {});
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  const fxfuse::plan::v1::Plan& plan() const { return plan_; }
  const void* kernel(int generated) const { return kernels_.at(static_cast<size_t>(generated)); }
  int cacheHits() const { return cache_hits_; }

  // After the work of a run has finished (the caller synchronized its stream): throws an
  // FxError naming the first index read outside its dimension that a generated kernel recorded
  // (GeneratedKernel.index_sites), and clears the records. The outputs of such a run are not
  // valid: the bad reads took position 0.
  void checkIndexErrors() const;

 private:
  Program() = default;
  void compileKernels(const LoadOptions& opts);
  // Where kernel `generated` keeps its index-error record (the source's fx_index_error).
  struct IndexErrorRecord {
    int generated = 0;
    void* device = nullptr;
  };
  fxfuse::plan::v1::Plan plan_;
  std::vector<const void*> kernels_;  // cudaKernel_t or host stub, per Plan.kernels
  std::vector<void*> libraries_;      // cudaLibrary_t
  std::vector<IndexErrorRecord> index_errors_;
  int cache_hits_ = 0;
};

struct DeviceTensor {
  void* data = nullptr;
  DType dtype = DType::DTYPE_UNSPECIFIED;
  std::vector<int64_t> shape, strides;  // strides in elements
  int64_t numel() const;
};

class PagedScratch;  // paged_steps.h
struct GemmChoice;   // gemm_tune.h

class Session {
 public:
  // `comm`: this rank of a multi-GPU run (not owned; must outlive the session). Needed for
  // plans of world size > 1 (Collective and FusedAllReduceNorm steps); world size 1 plans run
  // without one. With a communicator, the first run()/capture() after bind() is a collective
  // call (it maps the peer workspace).
  explicit Session(const Program& program, Communicator* comm = nullptr);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Binds every symbol of the plan (Plan.symbols; each SymbolSource names the input dim the
  // caller reads it from), sizes the arena; steps are prepared on the next run/capture.
  // Throws FxError on a missing or out-of-range symbol.
  void bind(const std::map<std::string, int64_t>& symbols);
  const std::map<std::string, int64_t>& symbols() const { return env_; }
  // Shape of input i under the bound symbols (to allocate and fill it).
  std::vector<int64_t> inputShape(size_t i) const;
  // Binds input i to caller-owned device memory; the session prepares again on the next
  // run/capture when the pointer changed (the same pointer again changes nothing).
  void setInput(size_t i, void* device_ptr);
  // Binds lifted scalar input i (IoTensor.is_scalar: a Python number the graph takes as a
  // 0-d CPU tensor) to its host value. A plan specialized for a value (IoTensor.scalar_value)
  // refuses any other with a one-line FxError.
  void setScalar(size_t i, double value);

  // Enqueues every step on `stream`.
  void run(cudaStream_t stream);
  // Captures run() into a CUDA graph (inputs must be set; their pointers are baked in).
  void capture(cudaStream_t stream);
  // Replays the captured graph. bind(), and setInput/setScalar with another pointer or value,
  // drop it (a replay would read the old memory or value): replay() then fails, saying which
  // call did, until capture() runs again. Setting the same pointer or value keeps it.
  void replay(cudaStream_t stream);
  bool captured() const { return graph_exec_ != nullptr; }
  // Where the time goes: runs the steps `iters` times without a CUDA graph, with an event pair
  // around each step, and returns each step's median in microseconds (plan order). A step's
  // time includes its launch gap when the host falls behind the GPU, so steps of a few
  // microseconds read high; use replay() for the step's total.
  std::vector<double> profileSteps(cudaStream_t stream, int iters);
  // What-if timing (`fxfuse bench --ablate`): the median of `replays` CUDA graph replays of the
  // plan captured without the steps whose index is set in `left_out` (plan order), after two
  // untimed ones: what the step would take if those steps cost nothing. The replays compute
  // garbage (later steps read what the left-out ones did not write); the session's own graph is
  // dropped, so the next replay() needs a capture() of the whole plan. One GPU only.
  double medianReplayUsWithout(cudaStream_t stream, const std::vector<bool>& left_out, int replays);

  // How FusedAllReduceNorm steps reduce: kAuto (the thresholds table, kernels/allreduce),
  // kOneShot/kTwoShot (forced where the call fits the workspace), kNcclFallback (always NCCL +
  // the single-GPU fused norm). Default: $FXFUSE_ALLREDUCE (auto|oneshot|twoshot|nccl), else kAuto.
  void setAllReduceAlgorithm(kernels::AllReduceAlgorithm a);
  // Per fused step of the last prepare: the algorithm each one runs ("one_shot", "nccl_fallback", ...).
  const std::vector<std::string>& fusedAlgorithms() const { return fused_algorithms_; }

  // cuBLASLt algorithm selection for matmul steps (compiler/runtime/gemm_tune.h): on, each
  // matmul times up to 16 heuristic candidates on its own operands when the session prepares
  // (the first run/capture after bind or an input change; never inside a capture) and keeps the
  // fastest (cached per process by shape, dtypes, layouts, epilogue); off, cuBLASLt's first
  // heuristic result. Default: on unless $FXFUSE_GEMM_TUNE=0.
  void setGemmTuning(bool on);
  bool gemmTuning() const { return gemm_tune_; }
  // Whether fxfuse's own kernels are launched with programmatic dependent launch (on unless
  // $FXFUSE_PDL=0; docs/runtime.md "Programmatic dependent launch").
  static bool programmaticLaunch();
  // Per matmul step of the last prepare: "step 3 (node): M=64 N=6144 K=4096 ...: tuned ...".
  const std::vector<std::string>& matmulAlgorithms() const { return matmul_algorithms_; }

  // Re-decides the GEMM choices that timing each kernel alone cannot see (programmatic overlap
  // with the neighbours, what the neighbours leave in L2; docs/runtime.md "Timed in the step") by
  // timing the whole plan captured in a CUDA graph with each alternative, one at a time; a switch
  // is kept when the median replay is faster by more than 0.3 %. In order: fxfuse's own small-M
  // GEMM or cuBLASLt, per shape where both run and agree; per shape left on the own kernel's
  // mma.sync path, its weight copies' L2 prefetch size (kSmallMFp8L2PrefetchBytes or none); per
  // shape left on cuBLASLt, its tuned algorithm or a runner-up (GemmChoice::in_step). It replays
  // the plan on the bound inputs, so it is for callers that replay anyway (`fxfuse bench`); it
  // needs GEMM tuning on and leaves the session to re-prepare on the next run or capture. Returns
  // one line per shape and choice tried.
  std::vector<std::string> chooseGemmsInStep(cudaStream_t stream, int replays = 15);
  // Whether callers should (unless $FXFUSE_GEMM_IN_STEP=0).
  static bool gemmInStepChoice();

  DeviceTensor output(size_t i) const;
  DeviceTensor tensor(int id) const;
  int64_t arenaBytes() const { return arena_bytes_; }
  // Kernel launches one run() enqueues (kernels, matmuls, collectives; copies excluded).
  int launchesPerRun() const { return launches_; }
  // Per step the last prepare fused into the small-M GEMM before it as its epilogue
  // (compiler/runtime/gemm_epilogue.h), or could have where that epilogue is switched off
  // (`fused` false): its kind and "step 8 (silu_and_mul_quant) into step 7 (_scaled_mm_2)".
  const std::vector<FusedEpilogue>& gemmEpilogues() const { return epilogue_lines_; }
  // Per rotary step the last prepare fused into the attention after it
  // (compiler/runtime/attention_prologue.h): "step 2 (rotary) into step 3 (attn)".
  const std::vector<std::string>& attentionPrologues() const { return prologue_lines_; }
  // Per weight prefetch of the last prepare (compiler/runtime/weight_prefetch.h):
  // "step 5 -> step 7 (node): 16777216 of 16777216 bytes".
  const std::vector<std::string>& weightPrefetches() const { return prefetch_lines_; }

 private:
  // One prepared step: the closure that enqueues it, what frees its resources, and what the
  // epilogue fusion needs to know of it.
  struct Prepared {
    std::string where;  // "step 3 (node)"
    std::function<void(cudaStream_t)> run;
    std::vector<std::function<void()>> cleanup;
    std::optional<GatedSiluStep> gated_silu;      // a SiLU step a gate/up GEMM may take in
    std::optional<SmallMFp8GemmParams> own_gemm;  // the matmul runs fxfuse's small-M kernel
    std::optional<RotationStep> rotation;         // a rotary step an attention may take in
    std::optional<ReshapeAndCacheParams> rotary_cache_write;  // one a q/k/v GEMM may take in
    std::optional<AttentionStep> attention;       // an attention on the sm90 kernels
    Prepared() = default;
    Prepared(const Prepared&) = delete;
    Prepared& operator=(const Prepared&) = delete;
    ~Prepared() {
      for (auto& c : cleanup) c();
    }
  };
  struct PreparedPrefetch;  // one weight's L2 prefetch: its fork step and byte range
  void prepare(cudaStream_t stream);
  // Destroys the captured graph (if any); `why` ("input 2 ('x') was set to other memory after
  // it") is what replay() then says.
  void dropGraph(const std::string& why);
  // Fuses gated-SiLU and rotary cache-write steps into the small-M GEMMs before them
  // (gemm_epilogue.h), in steps_.
  void fuseGemmEpilogues();
  std::optional<SmallMFp8GemmParams> gatedSiluEpilogue(size_t si) const;  // of step si + 1 into step si
  // Fuses rotary steps into the short attentions after them (attention_prologue.h), in steps_.
  void fuseAttentionPrologues();
  void prepareCollectives();
  void prepareWeightPrefetches();
  // Enqueues every step on `stream`, forking the weight prefetches onto prefetch_stream_ and
  // joining it back at the end (run() and capture() both).
  void enqueueSteps(cudaStream_t stream);

  // Preparing one step (prepare()): each prepare* function checks a step and returns the
  // closure that enqueues it. `where` (or the step's) names the step in errors; `cleanup` (or
  // the step's) receives what frees the step's resources when the step is dropped.
  struct KernelArgs;         // the named arguments of a KernelLaunch step
  struct MatmulLaunch;       // a Matmul step's cuBLASLt descriptors, algorithm and call operands
  struct MatmulOperands;     // a Matmul step's operands as cuBLASLt reads them
  struct FusedNormOperands;  // a FusedAllReduceNorm step's operands
  std::function<void(cudaStream_t)> prepareKernel(const fxfuse::plan::v1::KernelLaunch& kl, Prepared* step);
  std::function<void(cudaStream_t)> prepareGeneratedKernel(const fxfuse::plan::v1::KernelLaunch& kl,
                                                           const std::string& where);
  static std::function<void(cudaStream_t)> prepareRmsNorm(const KernelArgs& args);
  static std::function<void(cudaStream_t)> prepareQuantFp8(const KernelArgs& args);
  static std::function<void(cudaStream_t)> prepareRmsNormQuantFp8(const KernelArgs& args);
  static std::function<void(cudaStream_t)> prepareSiluAndMul(const KernelArgs& args, Prepared* step);
  static std::function<void(cudaStream_t)> prepareAttention(const KernelArgs& args, Prepared* step);
  std::function<void(cudaStream_t)> preparePagedKernel(const std::string& name, const KernelArgs& args,
                                                       Prepared* step);
  std::function<void(cudaStream_t)> prepareCopy(const fxfuse::plan::v1::Copy& c, const std::string& where) const;
  std::function<void(cudaStream_t)> prepareMemset(const fxfuse::plan::v1::Memset& m, const std::string& where) const;
  std::function<void(cudaStream_t)> prepareCollective(const fxfuse::plan::v1::Collective& c, const std::string& where);
  std::function<void(cudaStream_t)> prepareMatmul(const fxfuse::plan::v1::Matmul& mm, cudaStream_t stream,
                                                  Prepared* step);
  // The parts of prepareMatmul.
  void ensureCublasLt();
  MatmulOperands matmulOperands(const fxfuse::plan::v1::Matmul& mm, const std::string& where) const;
  void createMatmulDesc(const fxfuse::plan::v1::Matmul& mm, const MatmulOperands& o, MatmulLaunch* m,
                        const std::string& where) const;
  void createMatmulLayouts(const MatmulOperands& o, MatmulLaunch* m, const std::string& where) const;
  std::optional<SmallMFp8GemmParams> smallMFp8Params(const fxfuse::plan::v1::Matmul& mm, const MatmulOperands& o,
                                                     const MatmulLaunch& m, const std::string& where) const;
  void chooseMatmulAlgorithm(const fxfuse::plan::v1::Matmul& mm, const MatmulOperands& o, MatmulLaunch* m,
                             cudaStream_t stream, const std::string& where);
  std::function<void(cudaStream_t)> prepareFusedAllReduceNorm(const fxfuse::plan::v1::FusedAllReduceNorm& f,
                                                              const std::string& where);
  // The parts of prepareFusedAllReduceNorm; fusedAllReduceNormKernel is defined only with the
  // fused all-reduce kernels (FXFUSE_HAVE_ALLREDUCE_KERNELS).
  std::function<void(cudaStream_t)> fusedAllReduceNormKernel(const fxfuse::plan::v1::FusedAllReduceNorm& f,
                                                             const FusedNormOperands& o, const std::string& where);
  std::function<void(cudaStream_t)> allReduceThenNorm(const fxfuse::plan::v1::FusedAllReduceNorm& f,
                                                      const FusedNormOperands& o, const std::string& where);

  int64_t eval(const fxfuse::ir::v1::SymExpr& e, const std::string& what) const;
  void* pointer(int tensor) const;

  const Program& program_;
  const fxfuse::plan::v1::Plan& plan_;
  std::map<std::string, int64_t> env_;
  std::vector<void*> inputs_;
  std::vector<std::optional<double>> scalars_;  // lifted scalar inputs, by input index
  void* arena_ = nullptr;
  int64_t arena_bytes_ = 0;
  void* workspace_ = nullptr;
  int64_t workspace_bytes_ = 0;
  std::unique_ptr<PagedScratch> paged_scratch_;  // split-KV partials of the paged-attention steps
  void* cublas_ = nullptr;
  std::vector<std::unique_ptr<Prepared>> steps_;
  std::vector<PreparedPrefetch> prefetches_;  // by fork step
  std::vector<bool> left_out_;                // steps enqueueSteps skips (medianReplayUsWithout)
  struct OwnGemmSite {
    bool own = false;  // the kernel the last prepare chose
    bool mma_sync = false;  // the own kernel's mma.sync path (M <= 16), whose copies take an L2 prefetch size
    std::string what;  // "M=8 N=4096 K=4096"
  };
  std::map<std::string, OwnGemmSite> own_gemm_sites_;  // GEMM key -> site, where either kernel may run
  std::map<std::string, bool> own_gemm_in_step_;       // GEMM key -> own kernel, chosen in the step
  std::map<std::string, int> own_gemm_prefetch_in_step_;  // GEMM key -> its L2 prefetch size, chosen in the step
  struct CublasSite {
    int chosen = 0;  // the index into `candidates` the last prepare ran
    std::vector<std::string> candidates;  // GemmChoice::in_step's descriptions
    std::string what;  // "M=64 N=6144 K=4096"
  };
  std::map<std::string, CublasSite> cublas_sites_;   // GEMM key -> site, where the step runs cuBLASLt
  std::map<std::string, int> cublas_algo_in_step_;   // GEMM key -> index into GemmChoice::in_step, chosen in the step
  std::string cublasAlgorithmInStep(const std::string& key, const GemmChoice& choice, const std::string& what,
                                    MatmulLaunch* m);
  std::vector<std::string> chooseOwnGemmsInStep(cudaStream_t stream, int replays, double* best_us);
  std::vector<std::string> chooseOwnGemmPrefetchInStep(cudaStream_t stream, int replays, double* best_us);
  std::vector<std::string> chooseCublasAlgorithmsInStep(cudaStream_t stream, int replays, double* best_us);
  double medianReplayUs(cudaStream_t stream, int replays);
  double inStepBaselineUs(cudaStream_t stream, int replays, double best_us);
  std::vector<std::string> prefetch_lines_;
  std::vector<FusedEpilogue> epilogue_lines_;
  std::vector<std::string> prologue_lines_;
  cudaStream_t prefetch_stream_ = nullptr;
  cudaEvent_t fork_event_ = nullptr, join_event_ = nullptr;
  bool prefetch_evict_last_ = false;
  bool dirty_ = true;
  int launches_ = 0;
  Communicator* comm_ = nullptr;
  kernels::AllReduceAlgorithm allreduce_algorithm_ = kernels::AllReduceAlgorithm::kAuto;
  std::vector<std::string> fused_algorithms_;
  bool gemm_tune_ = true;
  std::vector<std::string> matmul_algorithms_;
  void* scratch_ = nullptr;  // the all-reduce result of fused steps on the NCCL fallback
  int64_t scratch_bytes_ = 0;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
  std::string dropped_because_;  // why the last capture's graph is gone (replay's error)
};

}  // namespace fxfuse::runtime
