// torch.export importer on real torch 2.11 archives (tests/ir/data, from the shared
// torch-samples), and the .pt2 → .pb → .fxg → .pb → .fxg round trip.
#include <catch2/catch.hpp>

#include <map>

#include "ir/fxg.h"
#include "ir/io.h"
#include "ir/proto_io.h"
#include "ir/status.h"
#include "ir/verifier.h"

using namespace fxfuse::ir;

namespace {

std::string data(const std::string& f) { return "tests/ir/data/" + f; }

std::map<std::string, int> histogram(const Graph& g) {
  std::map<std::string, int> h;
  for (const auto& n : g.nodes()) h[n->target]++;
  return h;
}

}  // namespace

TEST_CASE("core ATen archive imports with auto_functionalized_v2", "[export]") {
  auto m = loadModule(data("core_aten.pt2"));
  REQUIRE(verifyModule(*m).empty());
  CHECK(m->producer.source_schema == "export 8.17");
  CHECK(m->producer.stage == Stage::ExportCoreAten);
  CHECK(m->producer.functional);
  auto h = histogram(m->entry());
  CHECK(h["higher_order.auto_functionalized_v2"] == 1);
  CHECK(h["aten.mm.default"] == 1);
  CHECK(m->entry().inputs().size() == 3);
  CHECK(m->entry().inputs()[0].kind == InputKind::Parameter);
  CHECK(m->entry().inputs()[0].target == "w");
  const SymbolInfo* s = m->symbols.find("s77");
  REQUIRE(s);
  CHECK(s->min.value() == 2);
  CHECK(s->max.value() == 8192);
  CHECK(s->hint.value() == 16);
  CHECK(m->weights.size() == 2);
}

TEST_CASE("training IR archive is recognized as non-functional", "[export]") {
  auto m = loadModule(data("train_ir.pt2"));
  REQUIRE(verifyModule(*m).empty());
  CHECK(m->producer.stage == Stage::ExportTrainIr);
  CHECK_FALSE(m->producer.functional);
  auto h = histogram(m->entry());
  CHECK(h["fxfuse_demo.rms_norm.default"] == 1);
  CHECK(h["aten.linear.default"] == 1);
}

TEST_CASE("cond bodies become subgraphs; legacy layout reads the same", "[export]") {
  auto a = loadModule(data("cond.pt2"));
  auto b = loadModule(data("cond_legacy_layout.pt2"));
  auto c = loadModule(data("cond.model.json"));
  REQUIRE(a->graphs().size() == 3);
  CHECK(printGraphFxg(*a->graphs()[1]) == printGraphFxg(*b->graphs()[1]));
  CHECK(printGraphFxg(a->entry()) == printGraphFxg(c->entry()));
  CHECK(verifyModule(*b).empty());
}

TEST_CASE(".pt2 -> .pb -> .fxg -> .pb -> .fxg is stable", "[export][roundtrip]") {
  for (const char* f : {"core_aten.pt2", "train_ir.pt2", "cond.pt2"}) {
    INFO(f);
    auto m = loadModule(data(f));
    auto pb1 = moduleFromBinary(moduleToBinary(*m), "a.pb");
    std::string fxg1 = printFxg(*pb1);
    auto parsed = parseFxg(fxg1, "a.fxg");
    auto pb2 = moduleFromBinary(moduleToBinary(*parsed), "b.pb");
    CHECK(printFxg(*pb2) == fxg1);
  }
}
