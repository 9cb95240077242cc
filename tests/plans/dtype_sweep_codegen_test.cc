// Every op of the built-in schema registry with all its tensor arguments (and its outputs) of
// one dtype — bf16, f16, f32, f64, i64, i32, bool, f8e4m3fn — or of one edge shape (0-d, empty,
// ranks 2 and 3) or symbolic shape ([s0], [s0, 3], [2, s0]) in f32, lowered after the pass
// pipeline:
// a refusal (FxError) or a plan whose generated kernels compile with NVRTC for sm_90a. An
// unusual dtype must not produce CUDA code that fails only when a GPU compiles it.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "compiler/lowering/lowering.h"
#include "compiler/runtime/nvrtc_compile.h"
#include "ir/fxg.h"
#include "ir/status.h"
#include "passes/pipeline/pipeline.h"
#include "tests/op_sweep.h"

TEST_CASE("every op in every dtype and edge shape lowers to compiling kernels or is refused", "[lowering][codegen]") {
  std::set<std::string> sources;  // generated kernels, by source (many ops share one)
  struct Kernel {
    std::string graph, source, name;
  };
  std::vector<Kernel> kernels;
  int lowered = 0, refused = 0;
  auto cases = fxfuse::test::dtypeCases([](const fxfuse::ir::OpSchema&) { return true; });
  // Edge and symbolic shapes in f32 only: their kernels differ from the [4] ones in the size
  // expressions, not the element type (which the dtype cases cover), and NVRTC takes ~0.1 s a
  // kernel; the interpreter and lowering-only sweeps take them in bf16 too.
  auto all = [](const fxfuse::ir::OpSchema&) { return true; };
  for (auto& c : fxfuse::test::shapeCases(all, {"f32"})) cases.push_back(std::move(c));
  for (auto& c : fxfuse::test::symbolicCases(all, {"f32"})) cases.push_back(std::move(c));
  for (const auto& c : cases) {
    INFO(c.graph);
    try {
      auto m = fxfuse::ir::parseFxg("fxfuse.module {\n" + c.header + c.graph + "}\n", "<dtype sweep>");
      fxfuse::compiler::compileModule(*m, fxfuse::compiler::CompileOptions{});
      auto plan = fxfuse::lowering::lowerModule(*m, fxfuse::lowering::LowerOptions{});
      ++lowered;
      for (const auto& k : plan.kernels())
        if (sources.insert(k.source()).second) kernels.push_back({c.graph, k.source(), k.name()});
    } catch (const fxfuse::FxError&) {
      ++refused;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (const Kernel& k : kernels) {
    INFO(k.graph);
    INFO(k.source);
    try {
      CHECK(fxfuse::runtime::compileKernel(k.source, k.name, "sm_90a", /*use_cache=*/false).cubin.size() > 100);
    } catch (const fxfuse::FxError& e) {
      FAIL_CHECK(e.what());
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  WARN(fmt::format("{} lowered, {} refused, {} distinct kernels compiled in {:.1f} s", lowered, refused, kernels.size(), s));
  CHECK(lowered > 100);
  CHECK(kernels.size() > 50);
}
