// The GPU's index checks (tag gpu): a generated kernel that reads an index outside its
// dimension records it, and Program::checkIndexErrors refuses the run in one line naming the
// node, the op, the index and the size, once per kernel that saw one (tests/plans/
// index_checks.fxg: embedding, index_select, gather, index and index_add, four kernels reading the ids).
// In-range indices (negative ones counted from the end where torch allows them) run clean and
// give torch's values.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/lowering/lowering.h"
#include "compiler/runtime/runtime.h"
#include "ir/io.h"
#include "ir/status.h"
#include "kernels/runtime/fill.h"
#include "passes/pipeline/pipeline.h"

using namespace fxfuse;
namespace rt = fxfuse::runtime;

namespace {

constexpr int64_t kTokens = 8, kVocab = 128, kHidden = 16;

struct Device {
  void* p = nullptr;
  explicit Device(size_t bytes) { REQUIRE(cudaMalloc(&p, bytes) == cudaSuccess); }
  ~Device() { cudaFree(p); }
};

// The plan of index_checks.fxg bound to 8 tokens, every input but `ids` random (the expert and
// table indices FillRandom writes are i % 7: in range), run once per call of runWith.
class IndexPlan {
 public:
  IndexPlan() {
    auto m = ir::loadModule("tests/plans/index_checks.fxg");
    compiler::compileModule(*m, compiler::CompileOptions{});
    lowering::LowerOptions lo;
    lo.source = "tests/plans/index_checks.fxg";
    prog_ = rt::Program::fromPlan(lowering::lowerModule(*m, lo));
    session_ = std::make_unique<rt::Session>(*prog_);
    session_->bind({{"s0", kTokens}});
    const auto& plan = prog_->plan();
    for (int i = 0; i < plan.inputs_size(); ++i) {
      const rt::DeviceTensor t = session_->tensor(plan.inputs(i).tensor());
      buffers_.push_back(std::make_unique<Device>(static_cast<size_t>(t.numel()) * 8));
      REQUIRE(rt::FillRandom(buffers_.back()->p, t.numel(), t.dtype, 11u + static_cast<unsigned>(i), nullptr) ==
              cudaSuccess);
      session_->setInput(static_cast<size_t>(i), buffers_.back()->p);
      if (plan.inputs(i).name() == "ids") ids_ = buffers_.back()->p;
      if (plan.inputs(i).name() == "embed_weight") weight_ = buffers_.back()->p;
    }
    REQUIRE(ids_ != nullptr);
    REQUIRE(weight_ != nullptr);
  }

  // Runs the plan with these token ids; returns the refusals checkIndexErrors gives, one per
  // call until it gives none.
  std::vector<std::string> runWith(const std::vector<int64_t>& ids) {
    REQUIRE(cudaMemcpy(ids_, ids.data(), ids.size() * 8, cudaMemcpyHostToDevice) == cudaSuccess);
    session_->run(nullptr);
    REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
    std::vector<std::string> refusals;
    for (int k = 0; k < 8; ++k) {
      try {
        prog_->checkIndexErrors();
        return refusals;
      } catch (const FxError& e) {
        refusals.push_back(e.what());
      }
    }
    FAIL("checkIndexErrors kept refusing");
    return refusals;
  }

  std::vector<float> output(const std::string& name) {
    const auto& plan = prog_->plan();
    for (int i = 0; i < plan.outputs_size(); ++i) {
      if (plan.outputs(i).name() != name) continue;
      const rt::DeviceTensor t = session_->output(static_cast<size_t>(i));
      std::vector<float> host(static_cast<size_t>(t.numel()));
      REQUIRE(cudaMemcpy(host.data(), t.data, host.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
      return host;
    }
    FAIL("no output " << name);
    return {};
  }

  std::vector<float> weight() {
    std::vector<float> host(static_cast<size_t>(kVocab * kHidden));
    REQUIRE(cudaMemcpy(host.data(), weight_, host.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    return host;
  }

 private:
  std::unique_ptr<rt::Program> prog_;
  std::unique_ptr<rt::Session> session_;
  std::vector<std::unique_ptr<Device>> buffers_;
  void* ids_ = nullptr;
  void* weight_ = nullptr;
};

bool anyContains(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& l : lines)
    if (l.find(text) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("in-range indices run clean and read the rows they name", "[gpu][runtime]") {
  const std::string why = rt::deviceProblem();
  if (!why.empty()) FAIL("no GPU: " << why);
  IndexPlan p;
  const std::vector<int64_t> ids = {0, 5, 127, 64, 3, 3, 100, 1};
  CHECK(p.runWith(ids).empty());
  const std::vector<float> w = p.weight(), rows = p.output("rows");
  REQUIRE(rows.size() == static_cast<size_t>(kTokens * kHidden));
  for (int64_t t = 0; t < kTokens; ++t)
    for (int64_t h = 0; h < kHidden; ++h)
      CHECK(rows[static_cast<size_t>(t * kHidden + h)] == w[static_cast<size_t>(ids[static_cast<size_t>(t)] * kHidden + h)]);
}

TEST_CASE("an index past its dimension is refused naming the node, op, index and size", "[gpu][runtime]") {
  const std::string why = rt::deviceProblem();
  if (!why.empty()) FAIL("no GPU: " << why);
  IndexPlan p;
  const std::vector<std::string> refused = p.runWith({0, 1, 2, 3, 4, 128, 6, 7});
  INFO(refused.size() << " refusals");
  for (const auto& r : refused) INFO(r);
  // Four kernels read the ids: each reports its first bad read.
  CHECK(refused.size() == 4);
  CHECK(anyContains(refused, "node 'rows' (index_select): index 128 is out of bounds for size 128"));
  CHECK(anyContains(refused, "node 'embed' (embedding): index 128 is out of bounds for size 128"));
  CHECK(anyContains(refused, "node 'lookup' (index): index 128 is out of bounds for size 128"));
  CHECK(anyContains(refused, "node 'added' (index_add): index 128 is out of bounds for size 128"));
  for (const auto& r : refused) CHECK(r.rfind("tests/plans/index_checks.fxg: node '", 0) == 0);  // the file first
  // The records were cleared: the next run with good ids is clean.
  CHECK(p.runWith({0, 1, 2, 3, 4, 5, 6, 7}).empty());
}

TEST_CASE("a negative index counts from the end where torch allows it, and only there", "[gpu][runtime]") {
  const std::string why = rt::deviceProblem();
  if (!why.empty()) FAIL("no GPU: " << why);
  IndexPlan p;
  // index_select, index and index_add wrap -1 (the last row / table entry); embedding does not.
  const std::vector<std::string> refused = p.runWith({-1, 1, 2, 3, 4, 5, 6, 7});
  REQUIRE(refused.size() == 1);
  CHECK(refused[0].find("node 'embed' (embedding): index -1 is out of bounds for size 128") != std::string::npos);
  const std::vector<float> w = p.weight(), rows = p.output("rows");
  for (int64_t h = 0; h < kHidden; ++h) CHECK(rows[static_cast<size_t>(h)] == w[static_cast<size_t>((kVocab - 1) * kHidden + h)]);
}
