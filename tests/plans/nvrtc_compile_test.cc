// Generated kernels compile with NVRTC for sm_90a (no GPU needed): every generated kernel of
// the plans lowered from the fixtures in tests/data and tests/plans.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/lowering/lowering.h"
#include "passes/pipeline/pipeline.h"
#include "compiler/runtime/nvrtc_compile.h"
#include "ir/io.h"

namespace {

fxfuse::plan::v1::Plan lowerFile(const std::string& path) {
  auto m = fxfuse::ir::loadModule(path);
  fxfuse::compiler::CompileOptions co;
  fxfuse::compiler::compileModule(*m, co);
  fxfuse::lowering::LowerOptions lo;
  lo.source = path;
  return fxfuse::lowering::lowerModule(*m, lo);
}

// Every plan golden of tests/plans except the refusal tests (marked `// PARITY: refused`).
std::vector<std::string> planGoldens() {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("tests/plans")) {
    if (e.path().extension() != ".fxg") continue;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    if (text.str().find("\n// PARITY: refused") == std::string::npos) out.insert(e.path().string());
  }
  return {out.begin(), out.end()};
}

}  // namespace

// Compiles every generated kernel of `file`'s plan; returns how many there were.
size_t compileKernels(const std::string& file) {
  INFO(file);
  auto plan = lowerFile(file);
  for (const auto& k : plan.kernels()) {
    INFO(k.name());
    auto ck = fxfuse::runtime::compileKernel(k.source(), k.name(), "sm_90a", /*use_cache=*/false);
    REQUIRE(ck.cubin.size() > 100);
  }
  return static_cast<size_t>(plan.kernels_size());
}

TEST_CASE("every plan golden's generated kernels compile with NVRTC for sm_90a") {
  std::vector<std::string> files = planGoldens();
  REQUIRE(files.size() > 15);
  size_t compiled = 0;
  for (const auto& f : files) compiled += compileKernels(f);
  CHECK(compiled > 20);
}

TEST_CASE("the fixtures' generated kernels compile with NVRTC for sm_90a") {
  for (const char* f : {"tests/data/vllm/vllm_llama32_fp8_native.post_grad.fxg.json",
                        "tests/data/vllm/vllm_fusion_native_dyntoken_eps1e-5.post_grad.fxg.json",
                        "tests/data/hf/hf_gemma.core_aten.fxg.json", "tests/data/hf/hf_qwen3.post_grad.fxg.json",
                        "tests/data/hf/hf_llama.train_ir.pt2"}) {  // the last: aten.diff + cumsum mask
    CHECK(compileKernels(f) > 0);
  }
}

TEST_CASE("NVRTC reports a broken kernel with its log") {
  REQUIRE_THROWS_WITH(fxfuse::runtime::compileKernel("extern \"C\" __global__ void k() { undefined_fn(); }", "k",
                                                     "sm_90a", false),
                      Catch::Contains("undefined_fn"));
}
