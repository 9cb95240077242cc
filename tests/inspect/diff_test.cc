// Unit tests of the structural diff (tools/inspect/graph_diff.h) and the DOT writer:
// renamed/reordered nodes still match, a fusion is exactly one rewritten region per site
// (also on real vLLM-shaped FP8 graphs run through the pipeline), and repeated layers are
// collapsed in pictures.
#include <catch2/catch.hpp>

#include <map>
#include <numeric>
#include <string>

#include "tools/inspect/diff_format.h"
#include "tools/inspect/draw.h"
#include "tools/inspect/graph_diff.h"
#include "tools/inspect/html_report.h"
#include "tools/inspect/module_util.h"
#include "tools/inspect/node_text.h"
#include "passes/pipeline/pipeline.h"
#include "ir/fxg.h"
#include "ir/io.h"

using namespace fxfuse;
using inspect::DiffRegion;

namespace {

std::unique_ptr<ir::Module> fxg(const std::string& text) { return ir::parseFxg(text, "test.fxg"); }

std::string data(const std::string& f) { return "tests/inspect/data/" + f; }

// Added nodes of a region that are fxfuse ops.
int fxfuseAdded(const DiffRegion& r) {
  int k = 0;
  for (const ir::Node* n : r.added)
    if (!inspect::fxfuseShortName(n->target).empty()) ++k;
  return k;
}

int64_t total(const std::map<std::string, int64_t>& m) {
  return std::accumulate(m.begin(), m.end(), int64_t{0}, [](int64_t a, const auto& p) { return a + p.second; });
}

const char* kSmall = R"(fxfuse.module {
  graph @main {
    input %1 "x": f32[8, 16]
    input %2 "w": f32[16]
    %3: f32[8, 16] = aten.relu.default(self=%1)  // relu
    %4: f32[8, 16] = aten.neg.default(self=%1)  // neg
    %5: f32[8, 16] = aten.mul.Tensor(self=%3, other=%2)  // mul
    %6: f32[8, 16] = aten.add.Tensor(self=%5, other=%4)  // add
    output %6
  }
}
)";

// Same computation: every name changed, independent nodes in another order, the operands
// of the commutative add swapped.
const char* kSmallRenamed = R"(fxfuse.module {
  graph @main {
    input %1 "primals_1": f32[8, 16]
    input %2 "primals_2": f32[16]
    %3: f32[8, 16] = aten.neg.default(self=%1)  // neg_17
    %4: f32[8, 16] = aten.relu.default(self=%1)  // relu_3
    %5: f32[8, 16] = aten.mul.Tensor(self=%4, other=%2)  // mul_143
    %6: f32[8, 16] = aten.add.Tensor(self=%3, other=%5)  // add_99
    output %6
  }
}
)";

}  // namespace

TEST_CASE("renamed and reordered nodes still match", "[diff]") {
  auto a = fxg(kSmall);
  auto b = fxg(kSmallRenamed);
  auto d = inspect::diffGraphs(a->entry(), b->entry());
  CHECK(d.identical());
  CHECK(d.matched() == 4);
  for (const auto& [na, nb] : d.a_to_b) CHECK(na->target == nb->target);
}

TEST_CASE("renamed real graph matches completely", "[diff]") {
  auto a = ir::loadModule(data("fusion_before.fxg"));
  auto b = ir::loadModule(data("fusion_before_renamed.fxg"));
  auto d = inspect::diffGraphs(a->entry(), b->entry());
  CHECK(d.identical());
  CHECK(d.matched() == a->entry().numNodes());
  // Matching is by structure: the renamed twin of each node has a different name.
  for (const auto& [na, nb] : d.a_to_b) CHECK(na->name != nb->name);
}

TEST_CASE("a changed op shows as one rewritten region", "[diff]") {
  auto a = fxg(kSmall);
  std::string t = kSmall;
  t.replace(t.find("aten.neg.default"), 16, "aten.abs.default");
  auto b = fxg(t);
  auto d = inspect::diffGraphs(a->entry(), b->entry());
  REQUIRE(d.regions.size() == 1);
  CHECK(d.regions[0].kind == DiffRegion::Kind::Rewritten);
  CHECK(d.regions[0].summary() == "neg -> abs");
  CHECK(d.matched() == 3);  // relu, mul and add (downstream of the change) still match
}

TEST_CASE("a fusion is exactly one rewritten region per site", "[diff]") {
  auto a = ir::loadModule(data("fusion_before_renamed.fxg"));
  auto b = ir::loadModule(data("fusion_after.fxg"));
  auto d = inspect::diffGraphs(a->entry(), b->entry());
  REQUIRE(d.regions.size() == 4);
  std::vector<std::string> added;
  for (const auto& r : d.regions) {
    CHECK(r.kind == DiffRegion::Kind::Rewritten);
    REQUIRE(r.added.size() == 1);
    added.push_back(inspect::fxfuseShortName(r.added[0]->target));
  }
  CHECK(added == std::vector<std::string>{"rms_norm_quant", "fused_add_rms_norm_quant", "fused_add_rms_norm_quant",
                                          "fused_add_rms_norm"});
  // rms_norm + quant with their two output buffers; the chained fused-add sites stay apart.
  CHECK(d.regions[0].removed.size() == 4);
  CHECK(d.regions[1].removed.size() == 3);
  CHECK(d.regions[2].removed.size() == 3);
  CHECK(d.regions[3].removed.size() == 1);
  // Source locations travel with the region.
  CHECK(d.regions[0].locations() ==
        std::vector<std::string>{"model/vllm_ops.py:211", "model/vllm_ops.py:212", "model/vllm_ops.py:219",
                                 "model/vllm_ops.py:220"});
  auto j = inspect::diffJson(d, "a", "b");
  CHECK(j["rewritten"].size() == 4);
  CHECK(j["removed"].empty());
  CHECK(j["added"].empty());
  CHECK(j["rewritten"][0]["added"][0]["loc"]["line"] == 212);
}

TEST_CASE("pipeline on vLLM-shaped FP8 graphs: one region per fused site", "[diff][pipeline]") {
  for (const char* f : {"tests/data/vllm/vllm_llama32_fp8_custom.post_grad.fxg.json",
                        "tests/data/vllm/vllm_fusion_native_dyntoken_eps1e-5.post_grad.fxg.json",
                        "tests/data/vllm/vllm_fusion_native_static_eps1e-6.post_grad.fxg.json",
                        "tests/data/vllm/vllm_fusion_custom_static_eps1e-5_afv2.post_grad.fxg.json"}) {
    INFO(f);
    auto before = ir::loadModule(f);
    auto after = inspect::cloneModule(*before);
    compiler::CompileOptions opts;
    auto result = compiler::compileModule(*after, opts);
    auto d = inspect::diffGraphs(before->entry(), after->entry());
    int fused_regions = 0;
    for (const auto& r : d.regions) {
      INFO(r.summary());
      CHECK(r.kind == DiffRegion::Kind::Rewritten);
      CHECK(fxfuseAdded(r) == 1);  // one canonical or fused op per region
      for (const ir::Node* n : r.added)
        if (inspect::isFusedName(inspect::fxfuseShortName(n->target))) ++fused_regions;
    }
    CHECK(fused_regions == total(result.fusions));
    CHECK(total(result.fusions) > 0);
  }
}

TEST_CASE("two exporters: reshape/view and cast spellings match", "[diff]") {
  auto a = fxg(R"(fxfuse.module {
  graph @main {
    input %1 "x": bf16[8, 16]
    %2: f32[8, 16] = aten._to_copy.default(self=%1, *, dtype=f32)  // _to_copy
    %3: f32[128] = aten.view.default(self=%2, size=[128])  // view
    output %3
  }
}
)");
  auto b = fxg(R"(fxfuse.module {
  graph @main {
    input %1 "arg0_1": bf16[8, 16]
    %2: f32[8, 16] = prims.convert_element_type.default(a=%1, dtype=f32)  // convert_element_type
    %3: f32[128] = aten.reshape.default(self=%2, shape=[128])  // reshape
    output %3
  }
}
)");
  auto d = inspect::diffGraphs(a->entry(), b->entry());
  CHECK(d.identical());
}

TEST_CASE("diff text is plain without colour and coloured with it", "[diff]") {
  auto a = ir::loadModule(data("fusion_before.fxg"));
  auto b = ir::loadModule(data("fusion_after.fxg"));
  auto d = inspect::diffGraphs(a->entry(), b->entry());
  inspect::DiffTextOptions o;
  std::string plain = inspect::diffText(d, o);
  CHECK(plain.find('\033') == std::string::npos);
  CHECK(plain.find("4 rewritten, 0 removed, 0 added") != std::string::npos);
  o.color = true;
  std::string color = inspect::diffText(d, o);
  CHECK(color.find("\033[31m- ") != std::string::npos);
  CHECK(color.find("\033[32m+ ") != std::string::npos);
}

TEST_CASE("draw collapses repeated layers and colours fused ops", "[draw]") {
  auto m = ir::loadModule("tests/data/vllm/vllm_llama32_fp8_custom.post_grad.fxg.json");
  inspect::DrawOptions o;
  size_t all = inspect::drawnNodeCount(m->entry(), [] {
    inspect::DrawOptions x;
    x.collapse_layers = false;
    return x;
  }());
  size_t collapsed = inspect::drawnNodeCount(m->entry(), o);
  CHECK(collapsed * 5 < all);
  auto after = inspect::cloneModule(*m);
  auto r = compiler::compileModule(*after, compiler::CompileOptions{});
  o.notes = inspect::siteNotes(r);
  std::string dot = inspect::graphToDot(after->entry(), o);
  CHECK(dot.find("\u00d731") != std::string::npos);                // one representative layer, x31
  CHECK(dot.find("fxfuse.attention_quant") != std::string::npos);
  CHECK(dot.find("fillcolor=\"#ffd8a8\"") != std::string::npos);   // fused op colour
  CHECK(dot.find("fillcolor=\"#cfe2ff\"") != std::string::npos);   // canonical op colour
  CHECK(dot.find("not fused:") != std::string::npos);              // an unfused site with its reason
}

TEST_CASE("draw collapses transformers layers by nn_module_stack", "[draw]") {
  auto m = ir::loadModule("tests/data/hf/hf_qwen3.core_aten.pt2");
  std::string dot = inspect::graphToDot(m->entry(), inspect::DrawOptions{});
  CHECK(dot.find("model.layers.") != std::string::npos);
}
