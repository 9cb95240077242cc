// `fxfuse run PLAN|GRAPH --device=cuda`: runs a launch plan (or a graph, compiled and
// lowered first) on the GPU with seeded inputs, prints output summaries and, with
// --compare-cpu, checks them against the CPU interpreter on the same inputs.
// `fxfuse bench PLAN|GRAPH --device=cuda`: warm-up, CUDA graph capture (default), median
// time of many replays, kernels per replay, arena size. docs/runtime.md.
//
// No usable GPU (none, an old driver, not Hopper): a one-line error and exit code 2.
#include "tools/cli/run.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>

#include <cuda_profiler_api.h>
#include <fmt/format.h>

#include "tools/cli/kv_options.h"
#include "tools/cli/node_check.h"
#include "tools/cli/progress.h"
#include "tools/cli/rank_link.h"
#include "tools/cli/tensor_files.h"
#include "tools/cli/timeline_report.h"
#include "tools/cli/multigpu.h"
#include "tools/interpreter/compare.h"
#include "tools/interpreter/interpreter.h"
#include "tools/interpreter/numerics.h"
#include "compiler/lowering/lowering.h"
#include "passes/pipeline/pipeline.h"
#include "kernels/runtime/fill.h"
#include "compiler/runtime/runtime.h"
#include "ir/io.h"
#include "ir/json_text.h"
#include "ir/output_set.h"
#include "ir/lifted_scalar.h"
#include "ir/status.h"
#include "ir/verifier.h"
#include "ir/world_size.h"
#include "tools/cli/flag_checks.h"

namespace fxfuse::cli {

namespace pb = fxfuse::plan::v1;
namespace rt = fxfuse::runtime;

namespace {

void cudaCheck(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) fail("CUDA error in {}: {}", what, cudaGetErrorString(e));
}

std::map<std::string, int64_t> parseBinds(const std::vector<std::string>& binds) {
  std::map<std::string, int64_t> out;
  for (const auto& b : binds) {
    auto eq = b.find('=');
    if (eq == std::string::npos || eq == 0) fail("--bind: expected SYMBOL=N, got '{}'", b);
    try {
      size_t used = 0;
      int64_t v = std::stoll(b.substr(eq + 1), &used);
      if (used != b.size() - eq - 1) throw std::invalid_argument("trailing");
      out[b.substr(0, eq)] = v;
    } catch (const std::exception&) {
      fail("--bind: '{}' is not SYMBOL=INTEGER", b);
    }
  }
  return out;
}

struct Loaded {
  std::unique_ptr<ir::Module> graph;  // the graph (for --compare-cpu); null when unavailable
  pb::Plan plan;
  lowering::LowerStats stats;
};

// The kv-cache options a plan was compiled with (its metadata, set by the paged-attention
// lowering); empty kv_cache_dtype for other plans.
compiler::CompileOptions kvOptionsOfPlan(const pb::Plan& plan, int world_size) {
  compiler::CompileOptions co;
  co.world_size = world_size;
  auto dtype = plan.metadata().find("kv_cache"), block = plan.metadata().find("kv_block_size");
  if (dtype == plan.metadata().end()) return co;
  co.kv_cache_dtype = dtype->second;
  if (block != plan.metadata().end()) co.kv_block_size = std::stoll(block->second);
  return co;
}

// `consts`: --const NAME=VALUE for lifted scalar inputs (the graph's, or the plan's source graph's).
// `kv`: --kv-cache/--kv-block-size for a graph input. The reference graph of a kv-cache plan or
// graph is always made (its inputs are the plan's: compileKvReference), else only for `need_graph`.
Loaded loadInput(const std::string& path, int world_size, bool need_graph, const std::vector<std::string>& passes = {},
                 const std::vector<std::string>& consts = {}, const compiler::CompileOptions& kv = {}) {
  Loaded l;
  progress::stage("reading " + path);
  if (lowering::isPlanFile(path)) {
    l.plan = lowering::loadPlan(path);
    const compiler::CompileOptions kv_plan = kvOptionsOfPlan(l.plan, world_size);
    if (need_graph || !kv_plan.kv_cache_dtype.empty()) {
      if (l.plan.source().empty()) fail("{}: the plan does not name its source graph; --compare-cpu needs it", path);
      l.graph = ir::loadModuleForCompute(l.plan.source());
      ir::applyConstFlags(*l.graph, consts);
      if (!kv_plan.kv_cache_dtype.empty()) compileKvReference(*l.graph, kv_plan);
    }
    return l;
  }
  auto m = ir::loadModuleForCompute(path);
  ir::applyConstFlags(*m, consts);
  compiler::CompileOptions co;
  co.world_size = world_size;
  co.passes = passes;  // empty: the default pipeline
  co.kv_cache_dtype = kv.kv_cache_dtype;
  co.kv_block_size = kv.kv_block_size;
  if (need_graph || !co.kv_cache_dtype.empty()) {  // reference: the graph as given, before any pass
    l.graph = ir::loadModuleForCompute(path);
    ir::applyConstFlags(*l.graph, consts);
    if (!co.kv_cache_dtype.empty()) compileKvReference(*l.graph, co);
  }
  progress::stage("compiling");
  const compiler::CompileResult compiled = compiler::compileModule(*m, co);
  progress::stage("lowering to a launch plan");
  lowering::LowerOptions lo;
  lo.world_size = world_size;
  lo.source = path;
  lo.reasons_left_by_passes = compiler::firstReasonLeftByNode(compiled);
  l.plan = lowering::lowerModule(*m, lo, &l.stats);
  return l;
}

// Lifted scalar inputs the reference graph has no value for take the value the plan was
// compiled for (so the interpreter's inputs pass the plan's check).
void useScalarsOfPlan(const pb::Plan& plan, ir::Module& ref) {
  const auto& gi = ref.entry().inputs();
  for (int i = 0; i < plan.inputs_size() && i < static_cast<int>(gi.size()); ++i) {
    ir::Value* v = gi[static_cast<size_t>(i)].value;
    if (plan.inputs(i).has_scalar_value() && ir::isLiftedScalarInput(v) && !v->scalar_value)
      v->scalar_value = plan.inputs(i).scalar_value();
  }
}

// Symbol values: --bind first, then the plan's hints; the interpreter uses the same values.
std::map<std::string, int64_t> symbolValues(const pb::Plan& plan, const std::map<std::string, int64_t>& binds) {
  std::map<std::string, int64_t> env = binds;
  for (const auto& s : plan.symbols()) {
    if (env.count(s.name())) continue;
    if (s.has_hint()) env[s.name()] = s.hint();
    else if (s.has_min()) env[s.name()] = std::max<int64_t>(s.min(), 16);
    else fail("symbol {} has no hint; pass --bind {}=N", s.name(), s.name());
  }
  return env;
}

int64_t spanElems(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t hi = 0;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0) return 0;
    hi += (shape[k] - 1) * std::abs(strides[k]);
  }
  return hi + 1;
}

// Host tensor (interpreter values) -> device memory laid out with the plan's strides.
void* upload(const interp::Tensor& t, const rt::DeviceTensor& layout, std::vector<void*>& owned) {
  int eb = ir::dtypeBytes(t.dtype);
  int64_t span = spanElems(layout.shape, layout.strides);
  std::vector<unsigned char> host(static_cast<size_t>(std::max<int64_t>(span, 1) * eb), 0);
  std::vector<double> vals = t.values();
  const size_t r = layout.shape.size();
  std::vector<int64_t> idx(r, 0);
  for (size_t lin = 0; lin < vals.size(); ++lin) {
    int64_t off = 0;
    for (size_t k = 0; k < r; ++k) off += idx[k] * layout.strides[k];
    uint64_t bits = interp::toBits(vals[lin], t.dtype);
    std::memcpy(host.data() + off * eb, &bits, static_cast<size_t>(eb));  // little-endian low bytes
    for (size_t k = r; k-- > 0;) {
      if (++idx[k] < layout.shape[k]) break;
      idx[k] = 0;
    }
  }
  void* d = nullptr;
  cudaCheck(cudaMalloc(&d, host.size()), "allocating an input");
  owned.push_back(d);
  cudaCheck(cudaMemcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice), "uploading an input");
  return d;
}

interp::Tensor download(const rt::DeviceTensor& t) {
  ir::DType dt = t.dtype;
  int eb = ir::dtypeBytes(dt);
  int64_t span = spanElems(t.shape, t.strides);
  std::vector<unsigned char> host(static_cast<size_t>(std::max<int64_t>(span, 1) * eb));
  if (span > 0) cudaCheck(cudaMemcpy(host.data(), t.data, static_cast<size_t>(span * eb), cudaMemcpyDeviceToHost), "downloading an output");
  std::vector<double> vals(static_cast<size_t>(t.numel()));
  const size_t r = t.shape.size();
  std::vector<int64_t> idx(r, 0);
  for (size_t lin = 0; lin < vals.size(); ++lin) {
    int64_t off = 0;
    for (size_t k = 0; k < r; ++k) off += idx[k] * t.strides[k];
    uint64_t bits = 0;
    std::memcpy(&bits, host.data() + off * eb, static_cast<size_t>(eb));
    vals[lin] = interp::fromBits(bits, dt);
    for (size_t k = r; k-- > 0;) {
      if (++idx[k] < t.shape[k]) break;
      idx[k] = 0;
    }
  }
  return interp::Tensor::fromValues(t.shape, dt, vals);
}

std::string summary(const interp::Tensor& t) {
  std::vector<double> v = t.values();
  double sum = 0, amax = 0;
  int64_t nan = 0;
  for (double x : v) {
    if (std::isnan(x)) {
      ++nan;
      continue;
    }
    sum += x;
    amax = std::max(amax, std::abs(x));
  }
  return fmt::format("{}  mean {:.6g}  absmax {:.6g}  nan {}", t.describe(), v.empty() ? 0.0 : sum / static_cast<double>(v.size()), amax, nan);
}

// The first `limit` out-of-tolerance elements of a floating output: flat index, CPU, GPU.
void printMismatches(const interp::RValue& ref, const interp::Tensor& got, const interp::CompareOptions& co, int limit) {
  if (!ref.isTensor()) return;
  std::vector<double> r = ref.t.values(), g = got.values();
  interp::Tolerance tol = interp::defaultTolerance(got.dtype);
  double atol = co.atol.value_or(tol.atol), rtol = co.rtol.value_or(tol.rtol);
  std::string line;
  for (size_t k = 0; k < r.size() && k < g.size() && limit > 0; ++k) {
    if (std::abs(r[k] - g[k]) <= atol + rtol * std::abs(r[k]) || (std::isnan(r[k]) && std::isnan(g[k]))) continue;
    line += fmt::format(" [{}] cpu {:.6g} gpu {:.6g};", k, r[k], g[k]);
    --limit;
  }
  std::printf("   %s\n", line.c_str());
}

void requireDevice(const std::string& device) {
  if (device != "cuda") fail("--device={} is not supported (only cuda)", device);
  std::string why = rt::deviceProblem();
  if (!why.empty()) fail("cannot run on the GPU: {}", why);
}

// Device inputs for a session: interpreter values (run) or device-side random fill (bench).
struct Inputs {
  std::vector<void*> owned;
  ~Inputs() {
    for (void* p : owned) cudaFree(p);
  }
};

// The cuBLASLt algorithm of every matmul step of the last prepare (tuned or the heuristic's).
void printMatmulAlgorithms(const rt::Session& s) {
  if (s.matmulAlgorithms().empty()) return;
  std::printf("matmul algorithms (tuning %s):\n", s.gemmTuning() ? "on" : "off: --no-gemm-tune or FXFUSE_GEMM_TUNE=0");
  for (const auto& a : s.matmulAlgorithms()) std::printf("  %s\n", a.c_str());
}

// One line on the weight prefetches of the last prepare, when FXFUSE_PREFETCH_MB turned them
// on (docs/runtime.md "Weight prefetch").
void printWeightPrefetches(const rt::Session& s) {
  const auto& lines = s.weightPrefetches();
  if (lines.empty()) return;
  std::printf("weight prefetch: %zu matmul weights warmed in L2 on a side stream (first: %s)\n", lines.size(),
              lines.front().c_str());
}

// Steps the last prepare fused into the GEMM before them (bench --json's gemm_epilogues).
size_t fusedGemmEpilogues(const rt::Session& s) {
  const auto& lines = s.gemmEpilogues();
  return static_cast<size_t>(std::count_if(lines.begin(), lines.end(), [](const auto& l) { return l.fused; }));
}

// A line on the steps the last prepare fused into the small-M GEMMs before them, and one on those
// it could have fused with an epilogue that is switched off (docs/runtime.md "GEMM epilogues").
void printGemmEpilogues(const rt::Session& s) {
  const auto& lines = s.gemmEpilogues();
  if (lines.empty()) return;
  std::string done, possible;
  for (const auto& [kind, what] : {std::pair{rt::FusedEpilogue::kGatedSilu, "SiLU-and-mul + quant steps done by the gate/up GEMM"},
                                   std::pair{rt::FusedEpilogue::kRotaryCache, "rotary cache writes done by the q/k/v GEMM"}}) {
    for (const bool fused : {true, false}) {
      auto matches = [k = kind, fused](const rt::FusedEpilogue& l) { return l.kind == k && l.fused == fused; };
      const auto first = std::find_if(lines.begin(), lines.end(), matches);
      if (first == lines.end()) continue;
      std::string& text = fused ? done : possible;
      text += fmt::format("{}{} {} before them (first: {})", text.empty() ? "" : ", ",
                          std::count_if(lines.begin(), lines.end(), matches), what, first->steps);
    }
  }
  if (!done.empty())
    std::printf("GEMM epilogues (FXFUSE_GEMM_EPILOGUE=0: off, all: the rotary one too): %s\n", done.c_str());
  if (!possible.empty())
    std::printf("GEMM epilogues switched off (FXFUSE_GEMM_EPILOGUE=all turns them on; measured no faster: "
                "docs/runtime.md): %s could be\n",
                possible.c_str());
}

// One line on the rotary steps the last prepare took into the attention after them
// (docs/runtime.md "Attention prologues").
void printAttentionPrologues(const rt::Session& s) {
  const auto& lines = s.attentionPrologues();
  if (lines.empty()) return;
  std::printf("attention prologues (FXFUSE_ATTENTION_PROLOGUE=0: off): %zu rotary steps done by the short attention "
              "after them (first: %s)\n",
              lines.size(), lines.front().c_str());
}

// What --describe says about matmul steps: the algorithm is chosen when a session prepares.
std::string describeMatmulSelection(const pb::Plan& plan) {
  int n = 0;
  for (const auto& st : plan.steps()) n += st.has_matmul() ? 1 : 0;
  if (n == 0) return "";
  return fmt::format("matmul algorithms: {} cuBLASLt step(s); \"heuristic\" steps time up to 16 heuristic candidates on "
                     "their own operands at the first run and keep the fastest (FXFUSE_GEMM_TUNE=0 or --no-gemm-tune: "
                     "the first candidate); `fxfuse bench` prints the choices\n", n);
}

// A kv-cache plan's batch metadata inputs (slot_mapping, block_table, seq_lens,
// query_start_loc) written from `kv` (planKvBatchOfPlan): random metadata would index outside
// the caches.
void setKvMetadata(const pb::Plan& plan, rt::Session& s, Inputs& owned, const interp::KvBatchPlan& kv) {
  for (const auto& [arg, input] : pagedPlanInputs(plan)) {
    if (arg == "key_cache") continue;
    const rt::DeviceTensor layout = s.tensor(plan.inputs(input).tensor());
    s.setInput(static_cast<size_t>(input), upload(interp::kvMetadataTensor(kv, arg, layout.shape, layout.dtype), layout, owned.owned));
  }
}

}  // namespace

namespace {

// The flags of `fxfuse run` (static storage: CLI11 writes them when it parses).
struct RunFlags {
  std::string input, device = "cuda";
  std::vector<std::string> binds, consts;
  uint64_t seed = 0;
  bool compare = false, describe = false, no_cache = false, cpu_only = false, check_nodes = false, strict = false,
       no_gemm_tune = false;
  int world_size = kDefaultWorldSize;
  std::vector<std::string> passes, input_files;
  std::string save_outputs, save_inputs;
  double rtol = -1, atol = -1, mismatch_frac = 0.001;
  MultiGpuFlags mg;
  std::string kv_cache;
  int64_t kv_block_size = compiler::CompileOptions::kDefaultKvBlockSize;
  interp::KvBatchOptions kv_batch;
};

void addRunFlags(CLI::App* cmd, RunFlags& f) {
  cmd->add_option("input", f.input, "launch plan (binary or text) or graph (.pt2, .json, .pb, .fxg, FX text); recognized by content")->required();
  cmd->add_option("--input", f.input_files,
                  "NAME=FILE: graph input NAME from raw little-endian data of its dtype and shape, instead of "
                  "seeded values (repeatable)");
  cmd->add_option("--save-outputs", f.save_outputs,
                  "write each tensor output as DIR/output_<i>.f32 (float32, little-endian) and DIR/outputs.json");
  cmd->add_option("--save-inputs", f.save_inputs,
                  "write each tensor input the run uses as DIR/input_<i>.bin (its dtype, the format --input reads) "
                  "and DIR/inputs.json");
  cmd->add_option("--device", f.device, "device to run on (cuda)");
  cmd->add_option("--bind", f.binds, "symbol value SYMBOL=N (repeatable; default: the symbol's hint)");
  cmd->add_option("--seed", f.seed, "seed of the random inputs");
  cmd->add_option("--const", f.consts,
                  "value of a lifted scalar input (0-d CPU tensor), e.g. --const arg3_1=1e-06 (repeatable)");
  cmd->add_option("--world-size", f.world_size, "tensor-parallel world size (graphs only)")->check(WorldSizeRange());
  cmd->add_option("--passes", f.passes, "compiler passes for a graph input (default: the full pipeline)")->delimiter(',');
  cmd->add_flag("--compare-cpu", f.compare, "compare the outputs with the CPU interpreter on the same inputs");
  cmd->add_option("--rtol", f.rtol, "relative tolerance (default: per dtype, as fxfuse verify)")->check(FiniteRange(0, 1e30));
  cmd->add_option("--atol", f.atol, "absolute tolerance (default: per dtype)")->check(FiniteRange(0, 1e30));
  cmd->add_option("--mismatch-frac", f.mismatch_frac, "fraction of out-of-tolerance elements allowed (default 0.001)")
      ->check(FiniteRange(0, 1));
  cmd->add_flag("--describe", f.describe, "print the plan's steps and arena report, then exit (no GPU needed)");
  cmd->add_flag("--no-kernel-cache", f.no_cache, "compile generated kernels without the disk cache");
  cmd->add_flag("--cpu-only", f.cpu_only, "everything but the GPU: lower, make the inputs, run the CPU interpreter");
  cmd->add_flag("--check-nodes", f.check_nodes,
                "graphs only, with --compare-cpu: also run the node-by-node check when the outputs match");
  cmd->add_flag("--strict", f.strict, "with --compare-cpu: the outputs must match; no node-by-node proof");
  cmd->add_flag("--no-gemm-tune", f.no_gemm_tune, "cuBLASLt's first heuristic algorithm for matmuls (no timing)");
  addKvCacheFlags(cmd, f.kv_cache, f.kv_block_size);
  addKvBatchFlags(cmd, f.kv_batch);
  addMultiGpuFlags(cmd, f.mg);
}

// The plan's inputs bound to the host values the interpreter made (symbolic inputs are bound
// through the symbols; lifted scalars by value).
void setHostInputs(rt::Session& s, const pb::Plan& plan, const std::vector<interp::RValue>& host, Inputs& owned) {
  for (int i = 0; i < plan.inputs_size(); ++i) {
    const auto& pi = plan.inputs(i);
    if (pi.is_symint()) continue;
    const interp::RValue& v = host.at(static_cast<size_t>(i));
    if (!v.isTensor()) fail("input {} ('{}') is not a tensor in the graph", i, pi.name());
    if (pi.is_scalar()) {
      s.setScalar(static_cast<size_t>(i), v.t.item());
      continue;
    }
    s.setInput(static_cast<size_t>(i), upload(v.t, s.tensor(pi.tensor()), owned.owned));
  }
}

// --save-outputs: the plan's outputs (null: not a tensor) under their names.
void saveRunOutputs(const std::string& dir, const pb::Plan& plan, const std::vector<const interp::Tensor*>& tensors) {
  if (dir.empty()) return;
  std::vector<SavedOutput> outs;
  for (int i = 0; i < plan.outputs_size(); ++i)
    outs.push_back({plan.outputs(i).name(), i < static_cast<int>(tensors.size()) ? tensors[static_cast<size_t>(i)] : nullptr});
  saveOutputs(dir, outs);
}

// --cpu-only: the interpreter's outputs, printed (and saved); at world size > 1 every rank's, in
// lockstep.
void runCpuOnly(const RunFlags& f, const pb::Plan& plan, ir::Module& ref_module, interp::Interpreter& in,
                const interp::Options& io, int world, const std::vector<interp::RValue>& host_inputs) {
  if (world > 1) {
    auto all = lockstepReference(ref_module, io, world, f.seed);
    progress::end();
    for (int r = 0; r < world; ++r)
      for (int i = 0; i < plan.outputs_size() && i < static_cast<int>(all[static_cast<size_t>(r)].size()); ++i)
        if (all[static_cast<size_t>(r)][static_cast<size_t>(i)].isTensor())
          std::printf("cpu rank %d output %d %s: %s\n", r, i, plan.outputs(i).name().c_str(),
                      summary(all[static_cast<size_t>(r)][static_cast<size_t>(i)].t).c_str());
    return;
  }
  std::vector<interp::RValue> ref = in.run(host_inputs);
  progress::end();
  std::vector<const interp::Tensor*> saved;
  for (int i = 0; i < plan.outputs_size() && i < static_cast<int>(ref.size()); ++i) {
    saved.push_back(ref[static_cast<size_t>(i)].isTensor() ? &ref[static_cast<size_t>(i)].t : nullptr);
    if (ref[static_cast<size_t>(i)].isTensor())
      std::printf("cpu output %d %s: %s\n", i, plan.outputs(i).name().c_str(), summary(ref[static_cast<size_t>(i)].t).c_str());
  }
  saveRunOutputs(f.save_outputs, plan, saved);
}

// The plan's outputs downloaded into `got_all` (empty for symbolic ones) and printed; with
// --compare-cpu each is compared with `ref`. Returns whether every comparison passed.
bool printAndCompareOutputs(const RunFlags& f, const pb::Plan& plan, const rt::Session& s,
                            const std::vector<interp::RValue>& ref, const interp::CompareOptions& co,
                            std::vector<std::optional<interp::Tensor>>* got_all) {
  bool all_pass = true;
  for (int i = 0; i < plan.outputs_size(); ++i) {
    const auto& po = plan.outputs(i);
    got_all->emplace_back();
    if (po.is_symint()) continue;
    interp::Tensor got = download(s.output(static_cast<size_t>(i)));
    got_all->back() = got;
    std::printf("output %d %s: %s\n", i, po.name().c_str(), summary(got).c_str());
    if (!f.compare) continue;
    auto rep = interp::compareValues(po.name(), ref.at(static_cast<size_t>(i)), interp::RValue::ofTensor(got), co);
    std::printf("  vs cpu: %s  max_abs %.4g  max_rel %.4g  mismatches %lld/%lld%s  (%s)%s%s\n",
                rep.pass ? "PASS" : "FAIL", rep.max_abs, rep.max_rel, static_cast<long long>(rep.mismatches),
                static_cast<long long>(rep.elements),
                rep.fp8_differing ? fmt::format("  fp8 differing {} (max {} steps)", rep.fp8_differing, rep.fp8_max_step).c_str() : "",
                rep.tolerance.c_str(), rep.note.empty() ? "" : "  ", rep.note.c_str());
    if (!rep.pass) printMismatches(ref.at(static_cast<size_t>(i)), got, co, 6);
    all_pass = all_pass && rep.pass;
  }
  return all_pass;
}

// What the node-by-node check needs of the run so far.
struct DeviceRun {
  const RunFlags& f;
  const rt::Session& session;  // the plan's session: the node plan runs with its tuning choice
  rt::Communicator* comm;
  const interp::Options& io;
  int world;
  const std::vector<interp::RValue>& host_inputs;
  const std::map<std::string, int64_t>& env;
  const rt::LoadOptions& load;
  cudaStream_t stream;
};

// Outputs differ (or --check-nodes): is every kernel right on its own inputs, the difference
// only rounding carried forward? Runs the node-exposing plan on the GPU (node_check.h;
// docs/runtime.md "Parity"). Returns whether it proved so.
bool proveOnDevice(const DeviceRun& r, const std::vector<interp::RValue>& ref,
                   const std::vector<std::optional<interp::Tensor>>& got_all, const interp::CompareOptions& co,
                   bool all_pass) {
  const RunFlags& f = r.f;
  compiler::CompileOptions cop;
  cop.world_size = f.world_size;
  cop.passes = f.passes;
  cop.kv_cache_dtype = f.kv_cache;
  cop.kv_block_size = f.kv_block_size;
  auto run_plan = [&](const pb::Plan& plan) {
    auto program = rt::Program::fromPlan(plan, r.load);
    rt::Session s(*program, r.comm);
    if (f.mg.allreduce != "auto") s.setAllReduceAlgorithm(allReduceAlgorithm(f.mg));
    s.setGemmTuning(r.session.gemmTuning());  // the same algorithms (tuned choices are cached per shape)
    s.bind(r.env);
    Inputs owned;
    setHostInputs(s, plan, r.host_inputs, owned);
    s.run(r.stream);
    cudaCheck(cudaStreamSynchronize(r.stream), "running the node-exposing plan");
    program->checkIndexErrors();
    std::vector<std::optional<interp::Tensor>> vals;
    for (int i = 0; i < plan.outputs_size(); ++i) {
      vals.emplace_back();
      if (!plan.outputs(i).is_symint()) vals.back() = download(s.output(static_cast<size_t>(i)));
    }
    return vals;
  };
  RankLink link = rankLink(r.comm, r.io, r.world, f.seed);
  NodeProof np = proveByNodes(f.input, cop, r.io, r.host_inputs, ref, got_all, run_plan, co, r.world > 1 ? &link : nullptr);
  std::fputs(np.report.c_str(), stdout);
  if (!all_pass || f.check_nodes)
    std::printf("node check (rank %d of %d): %s%s\n", std::max(0, f.mg.rank), r.world,
                np.proven ? "PROVEN: every node within one rounding step on its own inputs" : "not proven",
                np.proven && !all_pass ? "; the output differences are rounding carried forward" : "");
  return np.proven;
}

// The plan on the GPU: load, bind the host inputs, one run, the summary lines, the outputs
// (compared with the interpreter under --compare-cpu, then proven node by node where they
// differ). Returns the exit code.
int runOnDevice(const RunFlags& f, const Loaded& l, ir::Module& ref_module, interp::Interpreter& in,
                const interp::Options& io, int world, rt::Communicator* comm,
                const std::vector<interp::RValue>& host_inputs, const std::map<std::string, int64_t>& env) {
  rt::LoadOptions lo;
  lo.use_cache = !f.no_cache;
  auto t0 = std::chrono::steady_clock::now();
  auto prog = rt::Program::fromPlan(l.plan, lo);
  double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  rt::Session s(*prog, comm);
  if (f.mg.allreduce != "auto") s.setAllReduceAlgorithm(allReduceAlgorithm(f.mg));
  if (f.no_gemm_tune) s.setGemmTuning(false);
  s.bind(env);
  Inputs owned;
  setHostInputs(s, l.plan, host_inputs, owned);
  cudaStream_t stream;
  cudaCheck(cudaStreamCreate(&stream), "creating a stream");
  s.run(stream);
  cudaCheck(cudaStreamSynchronize(stream), "running the plan");
  prog->checkIndexErrors();
  std::string binds_s;
  for (const auto& [k, v] : env) binds_s += fmt::format(" {}={}", k, v);
  progress::clear();
  std::printf("plan: %d steps, %d launches, %d generated kernels (%d from cache, load %.0f ms), arena %lld bytes;%s\n",
              l.plan.steps_size(), s.launchesPerRun(), l.plan.kernels_size(), prog->cacheHits(), load_ms,
              static_cast<long long>(s.arenaBytes()), binds_s.c_str());
  if (!s.fusedAlgorithms().empty()) {
    std::string algos;
    for (const auto& a : s.fusedAlgorithms()) algos += (algos.empty() ? "" : ", ") + a;
    std::printf("fused all-reduce steps (world size %d): %s\n", world, algos.c_str());
  }
  printMatmulAlgorithms(s);
  printGemmEpilogues(s);
  printAttentionPrologues(s);
  std::vector<interp::RValue> ref;
  if (f.compare)
    ref = world > 1 ? lockstepReference(ref_module, io, world, f.seed).at(static_cast<size_t>(f.mg.rank)) : in.run(host_inputs);
  interp::CompareOptions co;
  if (f.rtol >= 0) co.rtol = f.rtol;
  if (f.atol >= 0) co.atol = f.atol;
  co.max_mismatch_frac = f.mismatch_frac;
  progress::end();  // the rest prints as it goes
  std::vector<std::optional<interp::Tensor>> got_all;
  const bool all_pass = printAndCompareOutputs(f, l.plan, s, ref, co, &got_all);
  {
    std::vector<const interp::Tensor*> saved;
    for (const auto& g : got_all) saved.push_back(g ? &*g : nullptr);
    saveRunOutputs(f.save_outputs, l.plan, saved);
  }
  // World size > 1: every rank takes the same decision (any rank's outputs differ -> all run
  // the check, whose gathers are collective); node_check_collective.h.
  const bool any_differ = f.compare && comm && world > 1 ? !allRanksPass(*comm, all_pass) : !all_pass;
  bool proven = false;
  if (f.compare && !lowering::isPlanFile(f.input) && ((any_differ && !f.strict) || f.check_nodes))
    proven = proveOnDevice({f, s, comm, io, world, host_inputs, env, lo, stream}, ref, got_all, co, all_pass);
  cudaStreamDestroy(stream);
  if (f.compare)
    std::printf("%s\n", all_pass ? "compare-cpu: PASS" : proven ? "compare-cpu: PASS (node-by-node)" : "compare-cpu: FAIL");
  return all_pass || proven ? 0 : 1;
}

// One `fxfuse run`: load (and compile) the input; --describe prints the plan; otherwise the
// interpreter makes the inputs (and binds the symbols), which run on the CPU (--cpu-only) or
// the GPU. Returns the exit code.
int runCommand(const RunFlags& f) {
  // World size > 1: this process launches one rank per GPU and waits (multigpu.h).
  const int world = runWorldSize(f.input, lowering::isPlanFile(f.input), f.world_size);
  int launched_exit = 0;
  if (!f.describe && !f.cpu_only && launchRanks(f.mg, world, launched_exit)) return launched_exit;
  if (f.check_nodes && (lowering::isPlanFile(f.input) || !f.compare)) fail("--check-nodes needs a graph input and --compare-cpu");
  compiler::CompileOptions kv;
  kv.kv_cache_dtype = f.kv_cache;
  kv.kv_block_size = f.kv_block_size;
  Loaded l = loadInput(f.input, f.world_size, f.compare && !f.describe, f.passes, f.consts, kv);
  if (f.describe) {
    progress::end();
    std::fputs(lowering::describePlan(l.plan).c_str(), stdout);
    std::fputs(describeMatmulSelection(l.plan).c_str(), stdout);
    return 0;
  }
  if (!f.cpu_only) requireDevice(f.device);
  std::unique_ptr<rt::Communicator> comm = f.cpu_only ? nullptr : rankCommunicator(f.mg, world);  // selects GPU `rank`
  // Inputs from the interpreter (same values for both sides). It binds the symbols: --bind,
  // then what the graph's shape equations determine, then hints.
  std::unique_ptr<ir::Module> ref_module = l.graph ? std::move(l.graph) : ir::loadModuleForCompute(f.input);
  ir::applyConstFlags(*ref_module, f.consts);
  useScalarsOfPlan(l.plan, *ref_module);
  interp::Options io;
  io.bind = parseBinds(f.binds);
  io.seed = f.seed;
  io.world_size = std::max(1, l.plan.world_size());
  io.rank = std::max(0, f.mg.rank);  // activations depend on the rank (lockstep.h)
  io.kv = f.kv_batch;  // paged attention: the serving batch (both sides get the same metadata)
  interp::Interpreter in(*ref_module, io);
  std::vector<std::string> input_names;
  for (const auto& pi : l.plan.inputs()) input_names.push_back(pi.name());
  progress::stage("making inputs");
  std::vector<interp::RValue> host_inputs = in.makeInputs(f.seed, inputFileIndices(f.input_files, input_names));
  if (static_cast<int>(host_inputs.size()) != l.plan.inputs_size())
    fail("the graph has {} inputs, the plan {}", host_inputs.size(), l.plan.inputs_size());
  auto env = symbolValues(l.plan, in.bindings());
  if (!f.input_files.empty()) applyInputFiles(f.input_files, input_names, host_inputs);
  if (!f.save_inputs.empty()) saveInputs(f.save_inputs, input_names, host_inputs);
  progress::stage(f.compare || f.cpu_only ? "running the CPU interpreter" : "running the plan");
  if (f.cpu_only) {
    runCpuOnly(f, l.plan, *ref_module, in, io, world, host_inputs);
    return 0;
  }
  return runOnDevice(f, l, *ref_module, in, io, world, comm.get(), host_inputs, env);
}

}  // namespace

void registerRun(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("run", "Run a launch plan (or a graph) on the GPU; optionally compare with the CPU");
  static RunFlags flags;
  addRunFlags(cmd, flags);
  cmd->callback([&exit_code] { exit_code = runCommand(flags); });
}

constexpr size_t kProfileGroupsShown = 25;

// A generated kernel's source as it computes: without comments (they name the graph nodes),
// the entry point's name removed and the helper functions (fx_n<k>) renumbered in order of
// first appearance, so the same fusion in two layers reads the same.
std::string canonicalKernelSource(const pb::GeneratedKernel& k) {
  const std::string& src = k.source();
  std::map<std::string, std::string> renamed;
  std::string out;
  for (size_t i = 0; i < src.size();) {
    if (src.compare(i, 2, "//") == 0) {  // a comment, up to the end of the line
      i = src.find('\n', i);
      if (i == std::string::npos) break;
      continue;
    }
    if (!k.name().empty() && src.compare(i, k.name().size(), k.name()) == 0) {
      i += k.name().size();
      continue;
    }
    size_t digits = i + 4;
    while (digits < src.size() && std::isdigit(static_cast<unsigned char>(src[digits]))) ++digits;
    if (src.compare(i, 4, "fx_n") == 0 && digits > i + 4) {  // a helper function fx_n<k>
      auto [name, inserted] = renamed.emplace(src.substr(i, digits - i), "");
      if (inserted) name->second = "fx_n" + std::to_string(renamed.size());
      out += name->second;
      i = digits;
      continue;
    }
    out += src[i++];
  }
  return out;
}

// The profile group of each generated kernel (by its index in Plan.kernels): kernels with the
// same canonical source (the same fusion in every layer) share one, named after the first of
// them with its kind and its first fused node.
std::vector<std::string> generatedKernelGroups(const pb::Plan& plan) {
  std::map<std::string, std::string> by_source;
  std::vector<std::string> groups;
  for (const auto& k : plan.kernels()) {
    auto [it, inserted] = by_source.emplace(canonicalKernelSource(k), "");
    if (inserted)
      it->second = fmt::format("gen.{} ({}{})", k.name(), k.kind().empty() ? "generated" : k.kind(),
                               k.nodes().empty() ? "" : ": " + k.nodes(0));
    groups.push_back(it->second);
  }
  return groups;
}

// The profile group of each step of the plan (plan order): what it does (describeStep), or
// for a generated kernel its group of the same source (generatedKernelGroups).
std::vector<std::string> stepGroups(const pb::Plan& plan) {
  const std::vector<std::string> generated = generatedKernelGroups(plan);
  std::vector<std::string> groups;
  for (const pb::Step& step : plan.steps()) {
    const bool gen = step.has_kernel() && step.kernel().kernel().rfind("gen.", 0) == 0 &&
                     step.kernel().generated() >= 0 && step.kernel().generated() < static_cast<int>(generated.size());
    groups.push_back(gen ? generated[step.kernel().generated()] : lowering::describeStep(step));
  }
  return groups;
}

// `bench --profile`: the steps' median times grouped by what they do (stepGroups), largest
// first, as a table on stdout; returns the same groups as a JSON array for --json.
std::string printStepProfile(const pb::Plan& plan, const std::vector<double>& step_us, double replay_us) {
  struct Group {
    int steps = 0;
    double us = 0;
  };
  std::map<std::string, Group> groups;
  const std::vector<std::string> group_of = stepGroups(plan);
  double total = 0;
  for (size_t i = 0; i < step_us.size(); ++i) {
    Group& g = groups[group_of[i]];
    g.steps++;
    g.us += step_us[i];
    total += step_us[i];
  }
  std::vector<std::pair<std::string, Group>> sorted(groups.begin(), groups.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.us > b.second.us; });
  std::printf("profile (per-step medians without a CUDA graph; sum %.1f us, CUDA graph replay %.1f us):\n", total,
              replay_us);
  std::string json;
  size_t shown = 0;
  for (const auto& [what, g] : sorted) {
    if (shown++ == kProfileGroupsShown)
      std::printf("  ... %zu more groups (all of them in --json)\n", sorted.size() - kProfileGroupsShown);
    if (shown <= kProfileGroupsShown)
      std::printf("  %9.1f us %5.1f %%  %4d steps  %s\n", g.us, total > 0 ? 100.0 * g.us / total : 0.0, g.steps,
                  what.c_str());
    json += fmt::format("{}{{\"what\": \"{}\", \"steps\": {}, \"us\": {:.3f}}}", json.empty() ? "" : ", ",
                        ir::jsonEscaped(what), g.steps, g.us);
  }
  return "[" + json + "]";
}

// `bench --ablate N`: per profile group (stepGroups), the median of N replays of the plan
// captured without that group's steps, against the same measurement of the whole plan taken
// before and after them (their mean; the two show the drift): a group's share of the step as
// the step runs, overlaps included (a step that runs alone for 5 us may cost the replay 1 us,
// or more than 5 where it delays the weight stream of the next). Printed largest saving first;
// returns the same as a JSON object for --json: before_us, after_us and the groups' rows.
std::string printAblation(const pb::Plan& plan, rt::Session& s, cudaStream_t stream, int replays) {
  const std::vector<std::string> group_of = stepGroups(plan);
  std::map<std::string, std::vector<bool>> masks;
  for (size_t i = 0; i < group_of.size(); ++i) {
    std::vector<bool>& m = masks.try_emplace(group_of[i], group_of.size(), false).first->second;
    m[i] = true;
  }
  struct Row {
    std::string what;
    int steps;
    double without_us;
  };
  const std::vector<bool> none(group_of.size(), false);
  const double before_us = s.medianReplayUsWithout(stream, none, replays);
  std::vector<Row> rows;
  for (const auto& [what, mask] : masks)
    rows.push_back({what, static_cast<int>(std::count(mask.begin(), mask.end(), true)),
                    s.medianReplayUsWithout(stream, mask, replays)});
  const double after_us = s.medianReplayUsWithout(stream, none, replays);
  const double replay_us = (before_us + after_us) / 2;
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.without_us < b.without_us; });
  std::printf("ablation (median of %d CUDA graph replays without each group's steps; outputs not the plan's; "
              "all steps %.1f us before, %.1f after):\n", replays, before_us, after_us);
  std::string json;
  for (const Row& r : rows) {
    const double saved = replay_us - r.without_us;
    std::printf("  %9.1f us without  %+9.1f us %5.1f %%  %4d steps  %s\n", r.without_us, -saved,
                replay_us > 0 ? 100.0 * saved / replay_us : 0.0, r.steps, r.what.c_str());
    json += fmt::format("{}{{\"what\": \"{}\", \"steps\": {}, \"without_us\": {:.3f}, \"saved_us\": {:.3f}}}",
                        json.empty() ? "" : ", ", ir::jsonEscaped(r.what), r.steps, r.without_us, saved);
  }
  return fmt::format("{{\"before_us\": {:.3f}, \"after_us\": {:.3f}, \"groups\": [{}]}}", before_us, after_us, json);
}

void registerBench(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("bench", "Time a launch plan (or a graph) on the GPU: median of CUDA graph replays");
  static std::string input, device = "cuda", json;
  static std::vector<std::string> binds;
  static int warmup = 20, iters = 200, world_size = kDefaultWorldSize, profile = 0, ablate = 0, timeline = 0;
  static std::string trace;
  static bool no_graph = false, no_gemm_tune = false;
  static MultiGpuFlags mg;
  cmd->add_option("input", input, "launch plan (binary or text) or graph; recognized by content")->required();
  cmd->add_option("--device", device, "device to run on (cuda)");
  cmd->add_option("--bind", binds, "symbol value SYMBOL=N (repeatable; default: the symbol's hint)");
  cmd->add_option("--warmup", warmup, "untimed runs first (default 20)")->check(CLI::Range(0, 1000000));
  cmd->add_option("--iters", iters, "timed replays (default 200)")->check(CLI::Range(1, 10000000));
  cmd->add_option("--world-size", world_size, "tensor-parallel world size (graphs only)")->check(WorldSizeRange());
  cmd->add_flag("--no-graph", no_graph, "time plain run() launches instead of CUDA graph replays");
  cmd->add_flag("--no-gemm-tune", no_gemm_tune, "cuBLASLt's first heuristic algorithm for matmuls (no timing)");
  cmd->add_option("--json", json, "also write the result as JSON to this file");
  cmd->add_option("--profile", profile, "then time each step over this many plain runs and print where the time goes")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--ablate", ablate,
                  "then, per group of steps, time this many CUDA graph replays without them: what each group costs "
                  "the step as it runs (one GPU; the outputs of those replays are garbage)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--timeline", timeline,
                  "then record this many CUDA graph replays with CUPTI and print each kernel's share of the step and "
                  "the gaps where none ran (one GPU; needs libcupti)")
      ->check(CLI::Range(0, kMaxTimelineReplays));
  cmd->add_option("--trace", trace, "with --timeline: write its median replay as a Chrome trace (JSON) to this file");
  static std::string kv_cache;
  static int64_t kv_block_size = compiler::CompileOptions::kDefaultKvBlockSize;
  static interp::KvBatchOptions kv_batch;
  addKvCacheFlags(cmd, kv_cache, kv_block_size);
  addKvBatchFlags(cmd, kv_batch);
  addMultiGpuFlags(cmd, mg);
  cmd->callback([&exit_code] {
    const int world = runWorldSize(input, lowering::isPlanFile(input), world_size);
    if (ablate > 0 && (no_graph || world > 1))
      fail("{}: bench --ablate times CUDA graph replays on one GPU ({})", input,
           no_graph ? "not with --no-graph" : "not with --world-size > 1");
    if (timeline > 0 && (no_graph || world > 1))
      fail("{}: bench --timeline records CUDA graph replays on one GPU ({})", input,
           no_graph ? "not with --no-graph" : "not with --world-size > 1");
    if (!trace.empty() && timeline == 0) fail("{}: bench --trace needs --timeline N", input);
    if (launchRanks(mg, world, exit_code)) return;
    requireDevice(device);
    std::unique_ptr<rt::Communicator> comm = rankCommunicator(mg, world);  // selects GPU `rank`
    compiler::CompileOptions kv;
    kv.kv_cache_dtype = kv_cache;
    kv.kv_block_size = kv_block_size;
    Loaded l = loadInput(input, world_size, false, {}, {}, kv);
    // A kv-cache plan: the serving batch binds the token and cache symbols (random cache
    // contents, consistent metadata).
    std::map<std::string, int64_t> given = parseBinds(binds);
    const std::optional<interp::KvBatchPlan> batch = planKvBatchOfPlan(l.plan, given, kv_batch, 1234u);
    auto env = symbolValues(l.plan, given);
    auto prog = rt::Program::fromPlan(l.plan);
    rt::Session s(*prog, comm.get());
    if (mg.allreduce != "auto") s.setAllReduceAlgorithm(allReduceAlgorithm(mg));
    if (no_gemm_tune) s.setGemmTuning(false);
    s.bind(env);
    Inputs owned;
    for (int i = 0; i < l.plan.inputs_size(); ++i) {
      const auto& pi = l.plan.inputs(i);
      if (pi.is_symint()) continue;
      if (pi.is_scalar()) {  // the value the plan was compiled for; 1.0 when it takes any
        s.setScalar(static_cast<size_t>(i), pi.has_scalar_value() ? pi.scalar_value() : 1.0);
        continue;
      }
      rt::DeviceTensor t = s.tensor(pi.tensor());
      int eb = ir::dtypeBytes(t.dtype);
      int64_t span = std::max<int64_t>(spanElems(t.shape, t.strides), 1);
      void* d = nullptr;
      cudaCheck(cudaMalloc(&d, static_cast<size_t>(span * eb)), "allocating an input");
      owned.owned.push_back(d);
      cudaCheck(rt::FillRandom(d, span, t.dtype, 1234u + static_cast<unsigned>(i), nullptr), "filling an input");
      s.setInput(static_cast<size_t>(i), d);
    }
    if (batch) setKvMetadata(l.plan, s, owned, *batch);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream), "creating a stream");
    for (int i = 0; i < warmup; ++i) s.run(stream);
    cudaCheck(cudaStreamSynchronize(stream), "warm-up");
    prog->checkIndexErrors();  // the inputs are the bench's own, but a plan's constants may not be
    // The GEMM choices timed in the captured step (one rank: the ranks' choices could differ by
    // noise).
    std::vector<std::string> in_step;
    if (!no_graph && !comm && s.gemmTuning() && rt::Session::gemmInStepChoice()) in_step = s.chooseGemmsInStep(stream);
    size_t graph_kernels = 0;
    if (!no_graph) {
      s.capture(stream);
      s.replay(stream);
      cudaCheck(cudaStreamSynchronize(stream), "first replay");
    }
    if (comm) comm->barrier(stream);  // the ranks start timing together
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> ms;
    // A profiler started with a capture range (nsys --capture-range=cudaProfilerApi, ncu
    // --profile-from-start off) sees the timed replays only, not the warm-up and the choices.
    cudaProfilerStart();
    for (int i = 0; i < iters; ++i) {
      cudaEventRecord(a, stream);
      if (no_graph) s.run(stream);
      else s.replay(stream);
      cudaEventRecord(b, stream);
      cudaCheck(cudaEventSynchronize(b), "timed replay");
      float t = 0;
      cudaEventElapsedTime(&t, a, b);
      ms.push_back(t);
    }
    cudaProfilerStop();
    std::sort(ms.begin(), ms.end());
    double med = ms.empty() ? 0 : ms[ms.size() / 2];
    double p10 = ms.empty() ? 0 : ms[ms.size() / 10], p90 = ms.empty() ? 0 : ms[ms.size() * 9 / 10];
    std::string binds_s;
    for (const auto& [k, v] : env) binds_s += fmt::format("{}{}={}", binds_s.empty() ? "" : " ", k, v);
    (void)graph_kernels;
    std::printf("bench %s [%s]: median %.2f us (p10 %.2f, p90 %.2f) over %d %s; %d kernels per replay; arena %lld bytes (no reuse %lld at hints); programmatic launch %s\n",
                input.c_str(), binds_s.c_str(), med * 1000.0, p10 * 1000.0, p90 * 1000.0, iters,
                no_graph ? "runs" : "CUDA graph replays", s.launchesPerRun(), static_cast<long long>(s.arenaBytes()),
                static_cast<long long>(l.plan.arena().no_reuse_bytes_at_hint()),
                rt::Session::programmaticLaunch() ? "on" : "off");
    if (batch) std::printf("serving batch: %s\n", batch->describe().c_str());
    if (mg.rank <= 0) printMatmulAlgorithms(s);
    if (!in_step.empty()) {
      std::printf("GEMM choices timed in the step (FXFUSE_GEMM_IN_STEP=0: alone only):\n");
      for (const auto& line : in_step) std::printf("  %s\n", line.c_str());
    }
    if (mg.rank <= 0) printWeightPrefetches(s);
    if (mg.rank <= 0) printGemmEpilogues(s);
    if (mg.rank <= 0) printAttentionPrologues(s);
    std::string profile_json = "[]";
    if (profile > 0) profile_json = printStepProfile(l.plan, s.profileSteps(stream, profile), med * 1000.0);
    std::string timeline_json = "null";
    if (timeline > 0) timeline_json = printTimeline(s, stream, timeline, trace, med * 1000.0);
    std::string ablation_json = "null";
    if (ablate > 0) ablation_json = printAblation(l.plan, s, stream, ablate);
    if (!json.empty() && mg.rank <= 0)  // one file: rank 0's numbers
      ir::writeOutputFile(json, fmt::format("{{\"input\": \"{}\", \"binds\": \"{}\", \"median_us\": {:.3f}, \"p10_us\": {:.3f}, "
                                            "\"p90_us\": {:.3f}, \"iters\": {}, \"cuda_graph\": {}, \"kernels\": {}, "
                                            "\"arena_bytes\": {}, \"gemm_tune\": {}, \"programmatic_launch\": {}, "
                                            "\"gemm_epilogues\": {}, \"attention_prologues\": {}, \"kv_batch\": \"{}\", \"profile\": {}, "
                                            "\"ablation\": {}, \"timeline\": {}}}\n",
                                            ir::jsonEscaped(input), ir::jsonEscaped(binds_s), med * 1000.0, p10 * 1000.0,
                                            p90 * 1000.0, iters,
                                            no_graph ? "false" : "true", s.launchesPerRun(), s.arenaBytes(),
                                            s.gemmTuning() ? "true" : "false",
                                            rt::Session::programmaticLaunch() ? "true" : "false",
                                            fusedGemmEpilogues(s), s.attentionPrologues().size(),
                                            ir::jsonEscaped(batch ? batch->describe() : ""), profile_json,
                                            ablation_json, timeline_json));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaStreamDestroy(stream);
    exit_code = 0;
  });
}

void registerEmbed(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "embed", "Write C++/CUDA sources embedding a launch plan and its kernels (for the fxfuse_plan Bazel macro)");
  static std::string plan_path, name, cu, cc, header, include;
  cmd->add_option("plan", plan_path, "launch plan (binary or text)")->required();
  cmd->add_option("--name", name, "C identifier: load_NAME() is what user code calls")->required();
  cmd->add_option("--cu", cu, "output .cu: every generated kernel, compiled by nvcc")->required();
  cmd->add_option("--cc", cc, "output .cc: the plan bytes and load_NAME()")->required();
  cmd->add_option("--header", header, "output .h declaring load_NAME()")->required();
  cmd->add_option("--include", include, "how the .cc includes the header (default: the header's file name)");
  cmd->callback([&exit_code] {
    for (char c : name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) fail("--name '{}' is not a C identifier", name);
    // Both are written into the generated sources (a comment, an #include): a line break, quote
    // or backslash there would change the code.
    auto requireSourceSafe = [](const std::string& text, const char* what) {
      for (size_t i = 0; i < text.size(); ++i)
        if (static_cast<unsigned char>(text[i]) < 0x20 || text[i] == '"' || text[i] == '\\')
          fail("{} has a control character, quote or backslash at byte {}, which the generated sources cannot hold",
               what, i);
    };
    requireSourceSafe(plan_path, "the plan path");
    requireSourceSafe(include.empty() ? header : include, include.empty() ? "--header" : "--include");
    pb::Plan plan = lowering::loadPlan(plan_path);
    // Kernels: each source keeps its own helpers in a namespace; entry points get a prefix so
    // several plans can live in one binary.
    std::string cu_s = "// Generated by `fxfuse embed` from " + plan_path + ". Do not edit.\n";
    cu_s += "#include \"compiler/runtime/embedded.h\"\n\n";
    std::string table;
    for (int i = 0; i < plan.kernels_size(); ++i) {
      const auto& k = plan.kernels(i);
      std::string src = k.source();
      std::string entry = name + "_" + k.name();
      size_t pos = src.find(" " + k.name() + "(");
      if (pos == std::string::npos) fail("kernel {} has no entry point in its source", k.name());
      src.replace(pos + 1, k.name().size(), entry);
      cu_s += fmt::format("namespace {}_k{} {{\n{}}}  // namespace\n\n", name, i, src);
      const std::string index_error =
          k.index_sites_size() > 0 ? fmt::format("reinterpret_cast<const void*>(&{}_k{}::fx_index_error)", name, i) : "nullptr";
      table += fmt::format("    {{\"{}\", reinterpret_cast<const void*>(&{}_k{}::{}), {}}},\n", k.name(), name, i, entry,
                           index_error);
    }
    cu_s += fmt::format("extern const fxfuse::runtime::EmbeddedKernel {}_kernels[] = {{\n{}    {{nullptr, nullptr, nullptr}}}};\n",
                        name, table);
    cu_s += fmt::format("extern const unsigned long {}_num_kernels = {};\n", name, plan.kernels_size());
    std::string bytes = lowering::planToBinary(plan);
    std::string arr;
    for (size_t i = 0; i < bytes.size(); ++i) {
      arr += fmt::format("{},", static_cast<unsigned>(static_cast<unsigned char>(bytes[i])));
      if (i % 24 == 23) arr += "\n";
    }
    std::string inc = include.empty() ? header.substr(header.find_last_of('/') + 1) : include;
    std::string cc_s = fmt::format(
        "// Generated by `fxfuse embed` from {0}. Do not edit.\n"
        "#include \"{1}\"\n\n#include \"compiler/lowering/lowering.h\"\n\n"
        "extern const fxfuse::runtime::EmbeddedKernel {2}_kernels[];\nextern const unsigned long {2}_num_kernels;\n\n"
        "namespace {{\nconst unsigned char kPlan[] = {{\n{3}}};\n}}  // namespace\n\n"
        "std::unique_ptr<fxfuse::runtime::Program> load_{2}() {{\n"
        "  fxfuse::runtime::LoadOptions o;\n  o.embedded = {2}_kernels;\n  o.num_embedded = {2}_num_kernels;\n"
        "  return fxfuse::runtime::Program::fromPlan(\n"
        "      fxfuse::lowering::parsePlan(std::string(reinterpret_cast<const char*>(kPlan), sizeof kPlan), false, \"{2}\"), o);\n"
        "}}\n",
        plan_path, inc, name, arr);
    std::string h_s = fmt::format(
        "// Generated by `fxfuse embed` from {0}. Do not edit.\n#pragma once\n\n#include <memory>\n\n"
        "#include \"compiler/runtime/runtime.h\"\n\n"
        "// The launch plan {1} with its kernels compiled at build time (no NVRTC at load).\n"
        "std::unique_ptr<fxfuse::runtime::Program> load_{1}();\n",
        plan_path, name);
    ir::writeOutputFile(cu, cu_s);
    ir::writeOutputFile(cc, cc_s);
    ir::writeOutputFile(header, h_s);
    exit_code = 0;
  });
}

}  // namespace fxfuse::cli
