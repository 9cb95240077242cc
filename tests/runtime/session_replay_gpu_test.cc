// Session::replay after the inputs change (tag gpu): a captured graph has its pointers and
// lifted scalars baked in, so setInput with other memory, setScalar with another value and
// bind() drop it and replay() fails naming the call, while setting the same pointer or value
// keeps it (tests/plans/lifted_eps.fxg: two RMSNorms, one eps a runtime scalar). And the GEMM
// choices that `fxfuse bench` times in the captured step (tests/plans/decoder_fp8.fxg), and the
// kernel recorder of `bench --timeline` on a replay of that plan.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "compiler/lowering/lowering.h"
#include "compiler/runtime/cupti_recorder.h"
#include "compiler/runtime/kernel_timeline.h"
#include "compiler/runtime/runtime.h"
#include "ir/io.h"
#include "ir/status.h"
#include "kernels/runtime/fill.h"
#include "passes/pipeline/pipeline.h"

using namespace fxfuse;
namespace rt = fxfuse::runtime;

namespace {

// Device memory for `n` random elements of `dtype`, freed at scope exit.
struct Buffer {
  void* p = nullptr;
  Buffer(int64_t n, DType dtype, unsigned seed) {
    REQUIRE(cudaMalloc(&p, static_cast<size_t>(n) * 4) == cudaSuccess);  // room for any dtype up to 4 bytes
    REQUIRE(rt::FillRandom(p, n, dtype, seed, nullptr) == cudaSuccess);
  }
  ~Buffer() { cudaFree(p); }
};

// The launch plan of a .fxg file as `fxfuse compile` makes it (default options).
std::unique_ptr<rt::Program> compiledProgram(const std::string& path) {
  auto m = ir::loadModule(path);
  compiler::compileModule(*m, compiler::CompileOptions{});
  return rt::Program::fromPlan(lowering::lowerModule(*m, lowering::LowerOptions{}));
}

std::string replayError(rt::Session& s, cudaStream_t stream) {
  try {
    s.replay(stream);
  } catch (const FxError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("replay refuses a graph whose inputs changed since capture", "[gpu][runtime]") {
  const std::string why = rt::deviceProblem();
  if (!why.empty()) FAIL("no GPU: " << why);
  const std::unique_ptr<rt::Program> prog = compiledProgram("tests/plans/lifted_eps.fxg");
  const auto& plan = prog->plan();
  rt::Session s(*prog);
  s.bind({{"s0", 8}});
  Buffer x(8 * 128, DType::BF16, 1), x2(8 * 128, DType::BF16, 2), w(128, DType::BF16, 3);
  int eps = -1;
  for (int i = 0; i < plan.inputs_size(); ++i) {
    const std::string& name = plan.inputs(i).name();
    if (name == "x") s.setInput(static_cast<size_t>(i), x.p);
    if (name == "w") s.setInput(static_cast<size_t>(i), w.p);
    if (name == "eps") eps = i;
    if (name == "eps") s.setScalar(static_cast<size_t>(i), 1e-6);
    if (name == "eps2") s.setScalar(static_cast<size_t>(i), 1e-5);
  }
  REQUIRE(eps >= 0);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  s.capture(stream);
  CHECK(replayError(s, stream).empty());
  // The same pointer and value again: the graph stays.
  for (int i = 0; i < plan.inputs_size(); ++i)
    if (plan.inputs(i).name() == "x") s.setInput(static_cast<size_t>(i), x.p);
  s.setScalar(static_cast<size_t>(eps), 1e-6);
  CHECK(replayError(s, stream).empty());
  // Other memory for x: the graph would read the old buffer.
  for (int i = 0; i < plan.inputs_size(); ++i)
    if (plan.inputs(i).name() == "x") s.setInput(static_cast<size_t>(i), x2.p);
  CHECK(replayError(s, stream).find("input 0 ('x') was set to other memory after it); capture() again") !=
        std::string::npos);
  s.capture(stream);
  CHECK(replayError(s, stream).empty());
  // Another eps: the graph holds the old value as a kernel argument.
  s.setScalar(static_cast<size_t>(eps), 1e-3);
  CHECK(replayError(s, stream).find("was set to 0.001 after it") != std::string::npos);
  s.capture(stream);
  CHECK(replayError(s, stream).empty());
  // A new binding reallocates the arena.
  s.bind({{"s0", 4}});
  CHECK(replayError(s, stream).find("bind() was called after it") != std::string::npos);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  cudaStreamDestroy(stream);
}

namespace {

// `plan`'s inputs bound to random device memory (scalars to their recorded value or 1).
std::vector<std::unique_ptr<Buffer>> bindRandomInputs(rt::Session& s, const fxfuse::plan::v1::Plan& plan) {
  std::vector<std::unique_ptr<Buffer>> inputs;
  for (int i = 0; i < plan.inputs_size(); ++i) {
    const auto& pi = plan.inputs(i);
    if (pi.is_symint()) continue;
    if (pi.is_scalar()) {
      s.setScalar(static_cast<size_t>(i), pi.has_scalar_value() ? pi.scalar_value() : 1.0);
      continue;
    }
    const rt::DeviceTensor t = s.tensor(pi.tensor());
    inputs.push_back(std::make_unique<Buffer>(t.numel(), t.dtype, 100u + static_cast<unsigned>(i)));
    s.setInput(static_cast<size_t>(i), inputs.back()->p);
  }
  return inputs;
}

// What Session::chooseGemmsInStep's lines chose, per shape ("M=8 N=512 K=256"). Every line must
// be one of the three forms.
struct InStepChoices {
  std::map<std::string, bool> own;                  // ends on the own kernel
  std::map<std::string, std::string> prefetch;      // the own kernel's L2 prefetch size kept
  std::map<std::string, std::string> cublas_alone;  // the cuBLASLt algorithm the alone timing chose
  std::map<std::string, std::string> cublas;        // the cuBLASLt algorithm kept
};

InStepChoices parseInStepLines(const std::vector<std::string>& lines) {
  const std::regex kernel_line(R"((M=\d+ N=\d+ K=\d+): (own kernel|cuBLASLt) [0-9.]+ us per step, (own kernel|cuBLASLt) [0-9.]+ us: (switched|kept))");
  const std::regex prefetch_line(R"((M=\d+ N=\d+ K=\d+): own kernel, L2 prefetch (\d+) bytes [0-9.]+ us per step, (\d+) bytes [0-9.]+ us: (switched|kept))");
  const std::regex cublas_line(R"((M=\d+ N=\d+ K=\d+): cuBLASLt (id .+? us alone\)) [0-9.]+ us per step, (id .+? us alone\)) [0-9.]+ us: (switched|kept))");
  InStepChoices c;
  for (const std::string& line : lines) {
    INFO(line);
    std::smatch g;
    if (std::regex_match(line, g, kernel_line)) {
      c.own[g[1]] = (g[4] == "switched" ? g[3] : g[2]) == "own kernel";
    } else if (std::regex_match(line, g, prefetch_line)) {
      CHECK(c.own.at(g[1]));
      c.prefetch[g[1]] = g[4] == "switched" ? g[3] : g[2];
    } else {
      REQUIRE(std::regex_match(line, g, cublas_line));
      CHECK((c.own.count(g[1]) == 0 || !c.own.at(g[1])));  // the shape ended on cuBLASLt
      if (!c.cublas_alone.count(g[1])) c.cublas_alone[g[1]] = g[2];
      CHECK(g[2] == (c.cublas.count(g[1]) ? c.cublas[g[1]] : c.cublas_alone[g[1]]));  // tried against the kept one
      c.cublas[g[1]] = g[4] == "switched" ? g[3] : g[2];
    }
  }
  return c;
}

// The next prepare's matmul summaries name what the step chose: the prefetch size kept for each
// own-kernel shape, and the cuBLASLt algorithm where the step switched from the alone choice.
void checkNextPrepareRuns(rt::Session& s, cudaStream_t stream, const InStepChoices& c) {
  s.run(stream);  // prepares again with the choices
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  auto summaries_naming = [&](const std::string& shape, const std::string& text) {
    int named = 0;
    for (const std::string& algo : s.matmulAlgorithms())
      named += algo.find(shape + " ") != std::string::npos && algo.find(text) != std::string::npos;
    return named;
  };
  for (const auto& [shape, bytes] : c.prefetch) {
    INFO(shape);
    CHECK(summaries_naming(shape, fmt::format("L2 prefetch {} bytes in the step", bytes)) >= 1);
  }
  for (const auto& [shape, algo] : c.cublas) {
    INFO(shape << ": " << algo);
    if (algo == c.cublas_alone.at(shape)) CHECK(summaries_naming(shape, ", in the step: id") == 0);
    else CHECK(summaries_naming(shape, ", in the step: " + algo) >= 1);
  }
}

// tests/plans/decoder_fp8.fxg bound at `tokens` with random inputs and run once; then the GEMM
// choices Session::chooseGemmsInStep times in the step, checked by `expect`, and what the next
// prepare runs (checkNextPrepareRuns).
void checkInStepChoices(int64_t tokens, const std::function<void(const InStepChoices&)>& expect) {
  const std::string why = rt::deviceProblem();
  if (!why.empty()) FAIL("no GPU: " << why);
  const std::unique_ptr<rt::Program> prog = compiledProgram("tests/plans/decoder_fp8.fxg");
  rt::Session s(*prog);
  REQUIRE(s.gemmTuning());
  s.bind({{"s0", tokens}});
  const auto inputs = bindRandomInputs(s, prog->plan());
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  s.run(stream);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  const InStepChoices c = parseInStepLines(s.chooseGemmsInStep(stream, 5));
  expect(c);
  checkNextPrepareRuns(s, stream, c);
  cudaStreamDestroy(stream);
}

}  // namespace

// At 8 tokens: every shape where both GEMM kernels run gets an own-kernel/cuBLASLt line, every
// shape left on the own kernel's mma.sync path a prefetch line, and the next prepare runs
// exactly what the lines chose.
TEST_CASE("the GEMM choices timed in the step are what the next prepare runs", "[gpu][runtime]") {
  checkInStepChoices(8, [](const InStepChoices& c) {
    REQUIRE(!c.own.empty());
    for (const auto& [shape, is_own] : c.own) CHECK(c.prefetch.count(shape) == (is_own ? 1u : 0u));
  });
}

// At 128 tokens no own kernel runs (it takes at most 64 rows): every matmul is cuBLASLt, and
// the shapes with runner-up algorithms get one line per runner-up.
TEST_CASE("the cuBLASLt algorithms timed in the step are what the next prepare runs", "[gpu][runtime]") {
  checkInStepChoices(128, [](const InStepChoices& c) {
    CHECK(c.own.empty());
    REQUIRE(!c.cublas.empty());
  });
}

// `fxfuse bench --timeline`'s recorder on a real replay: every replay records the same kernels,
// at least one per launch the plan counts (a cuBLASLt call may run two), each span well formed,
// and the holding times add up to the busy time. Needs libcupti (the device bundle carries it).
TEST_CASE("the kernel recorder sees every kernel of a CUDA graph replay", "[gpu][runtime][timeline]") {
  const std::string why = rt::deviceProblem();
  if (!why.empty()) FAIL("no GPU: " << why);
  const std::unique_ptr<rt::Program> prog = compiledProgram("tests/plans/decoder_fp8.fxg");
  rt::Session s(*prog);
  s.bind({{"s0", 8}});
  const auto inputs = bindRandomInputs(s, prog->plan());
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  s.run(stream);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  constexpr int kReplays = 4;
  std::vector<std::vector<rt::KernelSpan>> replays;
  {
    rt::KernelRecorder recorder;
    CHECK_THROWS_WITH(rt::KernelRecorder(), Catch::Contains("already live"));
    s.capture(stream);
    std::vector<uint64_t> marks;
    for (int i = 0; i < kReplays; ++i) {
      marks.push_back(recorder.now());
      s.replay(stream);
      REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    }
    replays = rt::splitReplays(recorder.collect(), marks);
  }
  REQUIRE(replays.size() == static_cast<size_t>(kReplays));
  CHECK(replays[0].size() >= static_cast<size_t>(s.launchesPerRun()));
  for (const auto& r : replays) {
    CHECK(r.size() == replays[0].size());
    for (const rt::KernelSpan& k : r) CHECK(k.end_ns > k.start_ns);
    const rt::ReplayTimes t = rt::measureReplay(r);
    double holding = 0;
    for (double h : t.holding_us) holding += h;
    CHECK(holding == Approx(t.busy_us).epsilon(1e-6));
    CHECK(t.busy_us <= t.span_us + 1e-6);
  }
  rt::KernelRecorder again;  // the first one's end released the process's recorder
  cudaStreamDestroy(stream);
}
