// FX readable text importer (ir/importers/fx_text.cc): real torch 2.11 dumps import, op
// histograms equal the text's own counts and tests/data/expected_counts.json, the
// .txt -> .fxg -> .pb -> .fxg round trip is stable, bad input fails with file and line.
#include <catch2/catch.hpp>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ir/fxg.h"
#include "ir/importers/fx_text.h"
#include "ir/io.h"
#include "ir/proto_io.h"
#include "ir/status.h"
#include "ir/verifier.h"

using namespace fxfuse;
using namespace fxfuse::ir;

namespace {

std::string data(const std::string& f) { return "tests/importers/data/" + f; }

bool exists(const std::string& p) { return std::ifstream(p).good(); }

// tests/data (fixtures with expected_counts.json): in runfiles when declared as data,
// else $FXFUSE_TESTS_DATA, else found from the source tree our own data files link to.
std::string fixturesRoot() {
  if (exists("tests/data/expected_counts.json")) return "tests/data/";
  if (const char* env = std::getenv("FXFUSE_TESTS_DATA")) return std::string(env) + "/";
  char buf[4096];
  const std::string mine = "tests/importers/data/aot_forward.readable.txt";
  if (realpath(mine.c_str(), buf)) {
    std::string real = buf;
    if (real.size() > mine.size() && real.compare(real.size() - mine.size(), mine.size(), mine) == 0)
      return real.substr(0, real.size() - mine.size()) + "tests/data/";
  }
  return "tests/data/";
}

using Hist = std::map<std::string, int>;

// Histogram over every graph of the module; getitem is never a node for folded outputs,
// and tensor indexing (`_operator.getitem`) is not counted either, like FX's histograms.
Hist histogram(const Module& m) {
  Hist h;
  for (const auto& g : m.graphs())
    for (const auto& n : g->nodes())
      if (n->target != "_operator.getitem") h[n->target]++;
  return h;
}

std::string normalizeTarget(std::string t) {
  if (t.rfind("torch.ops.", 0) == 0) {
    t = t.substr(10);
    if (t.rfind("higher_order.", 0) != 0 && std::count(t.begin(), t.end(), '.') == 1) t += ".default";
  } else if (t.rfind("operator.", 0) == 0) {
    t = "_" + t;
  }
  return t;
}

// Counts from the `==== str(graph) ====` section that the readable samples carry.
Hist strGraphCounts(const std::string& text) {
  Hist h;
  auto at = text.find("==== str(graph) ====");
  REQUIRE(at != std::string::npos);
  std::regex re(R"(= (call_function|call_method|call_module)\[target=([^\]]+)\])");
  std::string tail = text.substr(at);
  for (std::sregex_iterator it(tail.begin(), tail.end(), re), end; it != end; ++it) {
    std::string kind = (*it)[1], target = (*it)[2];
    if (target == "operator.getitem") continue;
    if (kind == "call_function") {
      h[normalizeTarget(target)]++;
    } else {
      h[kind + "." + target]++;
    }
  }
  return h;
}

// Counts straight from the generated Python: `name[: "ann"] = <call or operator>`.
Hist textCounts(const std::string& text) {
  Hist h;
  std::istringstream in(text.substr(0, text.find("==== str(graph) ====")));
  std::string line;
  std::regex assign(R"(^\s*(\w+)(: "[^"]*")? = (.*)$)");
  std::regex call(R"(^([A-Za-z_][\w.]*)\()");
  std::regex binop(R"(^\w+ (\+|-|\*|//|/|%) \w+$)");
  static const std::map<std::string, std::string> kOps = {
      {"+", "add"}, {"-", "sub"}, {"*", "mul"}, {"//", "floordiv"}, {"/", "truediv"}, {"%", "mod"}};
  while (std::getline(in, line)) {
    std::smatch m;
    std::string stmt = line.substr(0, line.find(';'));
    if (!std::regex_match(stmt, m, assign)) continue;
    std::string rhs = m[3];
    std::smatch c;
    if (std::regex_search(rhs, c, call)) {
      std::string callee = c[1];
      if (callee == "operator.getitem" || callee.rfind("fx_pytree.", 0) == 0) continue;
      if (callee.rfind("torch.ops.", 0) == 0 || callee.rfind("operator.", 0) == 0) {
        h[normalizeTarget(callee)]++;
      } else if (callee.rfind("self.", 0) == 0) {
        h["call_module." + callee.substr(5)]++;
      } else if (callee.rfind("torch.", 0) == 0) {
        h[callee]++;
      } else if (callee.find('.') != std::string::npos) {
        h["call_method." + callee.substr(callee.find('.') + 1)]++;
      }
    } else if (std::regex_match(rhs, c, binop)) {
      h["_operator." + kOps.at(c[1])]++;
    }
  }
  return h;
}

std::string fxgRoundTrip(Module& m, bool locations) {
  FxgPrintOptions o;
  o.locations = locations;
  std::string a = printFxg(m, o);
  auto parsed = parseFxg(a, "a.fxg");
  auto viaPb = moduleFromBinary(moduleToBinary(*parsed), "a.pb");
  std::string b = printFxg(*viaPb, o);
  CHECK(b == a);
  auto viaJson = moduleFromJson(moduleToJson(*viaPb), "a.json");
  CHECK(printFxg(*viaJson, o) == a);
  return a;
}

const std::vector<std::string> kSamples = {
    "aot_forward.readable.txt",   "dynamo.readable.txt",       "export_core_aten.readable.txt",
    "post_grad_pre.readable.txt", "post_grad_pre_afv1.readable.txt",
    "fx_graph_readable.py",       "fx_graph_transformed.py",
    "hop_cond_export.txt",        "hop_cond_python_code.py",   "hop_map_export.txt",
    "aot_invoke_subgraph.txt",    "aot_symint.txt",            "dynamo_symint.txt",
    "sizes_only.txt",             "export_module.txt",         "multi_output.txt",
};

std::unique_ptr<Module> importText(const std::string& text, const std::string& name = "t.txt") {
  return importFxText(text, name);
}

// Runs `fn`, requiring an FxError whose message names `file` and a line; returns it.
template <typename F>
std::string errorOf(F fn) {
  try {
    fn();
  } catch (const FxError& e) {
    return e.what();
  }
  FAIL("no error");
  return "";
}

const Node* findNode(const Module& m, const std::string& name, int graph = 0) {
  for (const auto& n : m.graphs().at(graph)->nodes())
    if (n->name == name) return n.get();
  return nullptr;
}

}  // namespace

// ------------------------------------------------------------------------------ samples

TEST_CASE("torch 2.11 samples import, verify, and count like the text", "[fx_text]") {
  for (const auto& f : kSamples) {
    INFO(f);
    auto m = loadModule(data(f));
    CHECK(verifyModule(*m).empty());
    CHECK(m->producer.tool == "fx-readable-text");
    CHECK(histogram(*m) == textCounts(readFile(data(f))));
  }
}

TEST_CASE("readable samples count like their own str(graph) dump", "[fx_text]") {
  for (const auto& f : kSamples) {
    std::string text = readFile(data(f));
    if (text.find("==== str(graph) ====") == std::string::npos) continue;
    INFO(f);
    auto m = importFxText(text, f);
    CHECK(histogram(*m) == strGraphCounts(text));
  }
}

TEST_CASE("tests/data readable fixtures match expected_counts.json", "[fx_text][fixtures]") {
  const std::string root = fixturesRoot();
  if (!exists(root + "expected_counts.json")) {
    WARN("tests/data/expected_counts.json not found; skipped");
    return;
  }
  auto j = nlohmann::json::parse(readFile(root + "expected_counts.json"));
  int checked = 0;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& rel = it.key();
    if (rel.size() < 4 || rel.compare(rel.size() - 4, 4, ".txt") != 0) continue;
    if (!exists(root + rel)) continue;
    INFO(rel);
    auto m = loadModule(root + rel);
    REQUIRE(verifyModule(*m).empty());
    Hist want = it.value()["ops"].get<Hist>();
    Hist got = histogram(*m);
    CHECK(got == want);
    int total = 0;
    for (const auto& [t, c] : got) total += c;
    if (it.value().contains("nodes")) CHECK(total == it.value()["nodes"].get<int>());
    // vLLM fixtures are functional post-grad graphs with _C ops under auto_functionalized.
    if (rel.rfind("vllm/", 0) == 0) {
      CHECK(m->producer.functional);
      CHECK((m->producer.stage == Stage::PostGradPost || m->producer.stage == Stage::PostGradPre));
    }
    fxgRoundTrip(*m, true);
    ++checked;
  }
  CHECK(checked >= 20);
}

TEST_CASE("the readable text agrees with the exporter's JSON of the same graph", "[fx_text][fixtures]") {
  // Same graph, two routes: text importer vs fxfuse_export JSON. Node targets, argument
  // names and value types must agree (storage offsets are not in the text).
  const std::string f = fixturesRoot() + "vllm/vllm_fusion_custom_static_eps1e-5.post_grad";
  if (!exists(f + ".txt") || !exists(f + ".fxg.json")) return;
  auto a = loadModule(f + ".txt");
  auto b = loadModule(f + ".fxg.json");
  auto body = [](Module& m) {
    std::string s = printFxg(m);
    return s.substr(s.find("  graph @"));
  };
  CHECK(body(*a) == body(*b));
}

TEST_CASE("txt -> fxg -> pb -> fxg is stable", "[fx_text][roundtrip]") {
  for (const auto& f : kSamples) {
    INFO(f);
    auto m = loadModule(data(f));
    fxgRoundTrip(*m, false);
    fxgRoundTrip(*m, true);
  }
}

// ------------------------------------------------------------------------------ details

TEST_CASE("post-grad sample: auto_functionalized folding, schema names, locations", "[fx_text]") {
  auto m = loadModule(data("post_grad_pre_afv1.readable.txt"));
  CHECK(m->producer.stage == Stage::PostGradPre);
  CHECK(m->producer.functional);
  REQUIRE(m->symbols.find("s77"));
  Graph& g = m->entry();
  REQUIRE(g.inputs().size() == 4);
  CHECK(g.inputs()[1].value->kind == ValueKind::SymInt);
  CHECK(g.inputs()[1].value->sym->str() == "s77");
  const Node* af = findNode(*m, "auto_functionalized");
  REQUIRE(af);
  CHECK(af->kind == NodeKind::Hop);
  CHECK(af->target == "higher_order.auto_functionalized");
  REQUIRE(af->arg("_mutable_op"));
  CHECK(af->arg("_mutable_op")->kind == Attr::Kind::Op);
  CHECK(af->arg("_mutable_op")->s == "fxfuse_demo.rms_norm.default");
  REQUIRE(af->numOutputs() == 2);
  CHECK(af->output(0) == nullptr);
  REQUIRE(af->output(1));
  CHECK(af->output(1)->name == "getitem_1");
  CHECK(typeStr(*af->output(1)) == "f32[s77, 128] cuda:0");
  for (const auto& a : af->args())
    if (a.name != "_mutable_op") CHECK(a.keyword);
  const Node* mm = findNode(*m, "mm");
  REQUIRE(mm);
  CHECK(mm->args()[0].name == "self");
  CHECK(mm->args()[1].name == "mat2");
  CHECK(mm->loc.file == "demo/fx_model.py");
  CHECK(mm->loc.line == 43);
  CHECK(mm->loc.code == "h = torch.ops.fxfuse_demo.silu_mul(self.up(x))");
  const Node* empty = findNode(*m, "empty");
  REQUIRE(empty);
  const Attr* dev = empty->arg("device");
  REQUIRE(dev);
  CHECK(dev->kind == Attr::Kind::Device);
  CHECK(dev->device.str() == "cuda:0");
  CHECK(empty->arg("dtype")->dtype == DType::F32);
  CHECK(empty->arg("layout")->kind == Attr::Kind::Layout);
  for (const auto& a : empty->args()) CHECK(a.keyword == (a.name != "size"));
  const Node* conv = findNode(*m, "convert_element_type");
  REQUIRE(conv);
  CHECK(conv->args()[1].name == "dtype");
  CHECK(conv->args()[1].value.dtype == DType::F16);
  CHECK(g.outputs().size() == 2);
}

TEST_CASE("dynamo sample: functions, methods, operators, input aliases", "[fx_text]") {
  auto m = loadModule(data("dynamo.readable.txt"));
  CHECK(m->producer.stage == Stage::Dynamo);
  Graph& g = m->entry();
  CHECK(g.inputs()[2].value->name == "l_x_");
  auto h = histogram(*m);
  CHECK(h["torch._C._nn.linear"] == 1);
  CHECK(h["fxfuse_demo.silu_mul.default"] == 1);  // an overload packet gets .default
  CHECK(h["call_method.to"] == 1);
  CHECK(h["_operator.add"] == 1);
  const Node* rms = findNode(*m, "rms_norm");
  REQUIRE(rms);
  CHECK(rms->numOutputs() == 0);  // result never read: called for its effect
  CHECK(rms->args().size() == 4);
  CHECK(rms->args()[0].name.empty());  // unknown op: positional, unnamed
  const Node* to = findNode(*m, "to");
  REQUIRE(to);
  const Node* out = findNode(*m, "out");
  REQUIRE(out);
  CHECK(to->args()[0].value.value == out->output(0));  // the receiver is the first operand
  CHECK(to->args()[1].value.dtype == DType::F16);
}

TEST_CASE("nested HOP bodies become graphs referenced by index", "[fx_text][hop]") {
  auto m = loadModule(data("hop_cond_export.txt"));
  REQUIRE(m->graphs().size() == 3);
  CHECK(m->graphs()[1]->name == "true_graph_0");
  CHECK(m->graphs()[2]->name == "false_graph_0");
  const Node* cond = findNode(*m, "cond");
  REQUIRE(cond);
  CHECK(cond->kind == NodeKind::Hop);
  REQUIRE(cond->args().size() == 4);
  CHECK(cond->args()[1].value.kind == Attr::Kind::Graph);
  CHECK(cond->args()[1].value.graph == 1);
  CHECK(cond->args()[2].value.graph == 2);
  CHECK(cond->args()[3].value.kind == Attr::Kind::List);
  CHECK(m->graphs()[1]->outputs().size() == 1);
  CHECK(findNode(*m, "sin", 1));
  CHECK(findNode(*m, "cos", 2));

  auto inv = loadModule(data("aot_invoke_subgraph.txt"));
  REQUIRE(inv->graphs().size() == 3);
  const Node* call = findNode(*inv, "invoke_subgraph_1");
  REQUIRE(call);
  CHECK(call->args()[0].value.graph == 2);
  CHECK(call->args()[1].value.s == "subgraph_1");
}

TEST_CASE("SymInt arithmetic becomes _operator nodes with symbolic values", "[fx_text][sym]") {
  auto m = loadModule(data("aot_symint.txt"));
  const Node* mul = findNode(*m, "mul");
  REQUIRE(mul);
  CHECK(mul->target == "_operator.mul");
  CHECK(mul->kind == NodeKind::SymPy);
  CHECK(mul->args()[0].name == "a");
  CHECK(mul->args()[1].name == "b");
  REQUIRE(mul->output());
  CHECK(mul->output()->kind == ValueKind::SymInt);
  CHECK(mul->output()->sym->str() == "s27*s77");
  for (const char* s : {"s17", "s27", "s77"}) CHECK(m->symbols.find(s));
  const Node* mul5 = findNode(*m, "mul_5");
  REQUIRE(mul5);
  CHECK(mul5->args()[1].value.kind == Attr::Kind::Int);

  // Dynamo level: `z[slice(None, mul_1, None)]` keeps its bound as an operand.
  auto d = loadModule(data("dynamo_symint.txt"));
  const Node* gi = findNode(*d, "getitem_5");
  REQUIRE(gi);
  CHECK(gi->target == "_operator.getitem");
  REQUIRE(gi->operands().size() == 2);
  CHECK(gi->operands()[1] == findNode(*d, "mul_1")->output());
}

TEST_CASE("multi-output ops fold their getitems, sized by schema", "[fx_text]") {
  auto m = loadModule(data("multi_output.txt"));
  const Node* mx = findNode(*m, "max_1");
  REQUIRE(mx);
  CHECK(mx->numOutputs() == 2);
  CHECK(mx->output(1)->type.dtype == DType::I64);
  const Node* split = findNode(*m, "split_with_sizes");
  REQUIRE(split);
  CHECK(split->numOutputs() == 3);
  CHECK(typeStr(*split->output(0)) == "f32[4, 2][8, 1] cuda:0");
  CHECK(m->entry().outputs().size() == 5);
}

TEST_CASE("annotations: sizes only, scalars, devices, Sym kinds", "[fx_text]") {
  auto m = loadModule(data("sizes_only.txt"));
  CHECK(m->metadata["fx_text.shapes"] == "sizes only (strides assumed contiguous)");
  const Node* perm = findNode(*m, "permute");
  REQUIRE(perm);
  CHECK(perm->output()->type.isContiguous());  // no strides written: contiguous assumed
  CHECK(perm->output()->type.device.type.empty());

  auto s = importText(R"FX(class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "f64[][]cpu", arg1_1: "Sym(s0)", arg2_1: "bf16[s0, 8][8, 1]cuda:1", arg3_1: "Sym(Eq(s0, 4))", arg4_1: "Sym(zf0)"):
        mul: "bf16[s0, 8][8, 1]cuda:1" = torch.ops.aten.mul.Tensor(arg2_1, arg0_1)
        return (mul,)
)FX");
  const auto& in = s->entry().inputs();
  CHECK(typeStr(*in[0].value) == "f64[] cpu");
  CHECK(in[1].value->kind == ValueKind::SymInt);
  CHECK(in[2].value->type.device.index == 1);
  CHECK(in[3].value->kind == ValueKind::SymBool);
  CHECK(in[4].value->kind == ValueKind::SymFloat);
  CHECK(s->symbols.find("zf0"));
}

TEST_CASE("constants, kwargs and return forms", "[fx_text]") {
  auto m = importText(R"FX(class GraphModule(torch.nn.Module):
    def forward(self, x: "f32[4, 8][8, 1]cuda:0"):
        clamp: "f32[4, 8][8, 1]cuda:0" = torch.ops.aten.clamp.default(x, -inf, inf)
        full: "f32[4][1]cpu" = torch.ops.aten.full.default([4], nan, dtype = torch.float32, layout = torch.strided, device = device(type='cpu'), pin_memory = False)
        gelu: "f32[4, 8][8, 1]cuda:0" = torch.ops.aten.gelu.default(clamp, approximate = 'tanh')
        big: "f32[4, 8][8, 1]cuda:0" = torch.ops.aten.slice.Tensor(gelu, 1, 0, 9223372036854775807)
        neg: "f32[4, 8][8, 1]cuda:0" = torch.ops.aten.add.Tensor(big, -1e-06)
        clone: "f32[4, 8][8, 1]cuda:0" = torch.ops.aten.clone.default(neg, memory_format = torch.contiguous_format)
        mystery = torch.ops.my_ns.frob(clone, (1, 2), 'x', None, True, extra = [1.5, -2])
        getitem: "f32[4, 8][8, 1]cuda:0" = operator.getitem(mystery, 0)
        return pytree.tree_unflatten([getitem, full, None, 3], self._out_spec)
)FX");
  REQUIRE(verifyModule(*m).empty());
  const Node* clamp = findNode(*m, "clamp");
  CHECK(clamp->arg("min")->kind == Attr::Kind::SpecialFloat);
  CHECK(clamp->arg("min")->s == "-inf");
  CHECK(clamp->arg("max")->s == "inf");
  const Node* full = findNode(*m, "full");
  CHECK(full->arg("fill_value")->s == "nan");
  CHECK(full->arg("device")->device.type == "cpu");
  CHECK(full->arg("device")->device.index == -1);
  CHECK(full->arg("pin_memory")->kind == Attr::Kind::Bool);
  CHECK(findNode(*m, "gelu")->arg("approximate")->s == "tanh");
  CHECK(findNode(*m, "big")->arg("end")->i == INT64_MAX);
  CHECK(findNode(*m, "neg")->arg("other")->f == -1e-06);
  CHECK(findNode(*m, "clone")->arg("memory_format")->memory_format == MemoryFormat::Contiguous);
  const Node* my = findNode(*m, "mystery");
  REQUIRE(my);
  CHECK(my->target == "my_ns.frob.default");
  CHECK(my->kind == NodeKind::Op);
  REQUIRE(my->args().size() == 6);
  CHECK(my->args()[1].value.kind == Attr::Kind::List);
  CHECK(my->args()[3].value.isNone());
  CHECK(my->args()[4].value.b);
  CHECK(my->args()[5].name == "extra");
  CHECK(my->args()[5].keyword);
  CHECK(my->args()[5].value.list[1].i == -2);
  CHECK(my->numOutputs() == 1);
  const auto& outs = m->entry().outputs();
  REQUIRE(outs.size() == 4);
  CHECK(outs[0].value == my->output(0));
  CHECK(outs[1].value == full->output(0));
  CHECK(outs[2].value == nullptr);
  CHECK(outs[3].constant.i == 3);
  fxgRoundTrip(*m, true);

  auto single = importText(R"FX(def forward(self, x: "f32[2]"):
    relu: "f32[2]" = torch.ops.aten.relu.default(x);  x = None
    return [relu]
)FX");
  CHECK(single->producer.source_schema == "python_code");
  CHECK(single->entry().outputs().size() == 1);
}

TEST_CASE("vLLM-style auto_functionalized v1 and v2 with _C ops", "[fx_text]") {
  auto m = importText(R"FX(class <lambda>(torch.nn.Module):
    def forward(self, arg0_1: "Sym(s0)", arg1_1: "bf16[s0, 4096][4096, 1]cuda:0", arg2_1: "bf16[4096][1]cuda:0", arg3_1: "bf16[s0, 4096][4096, 1]cuda:0"):
        empty: "bf16[s0, 4096][4096, 1]cuda:0" = torch.ops.aten.empty.memory_format([arg0_1, 4096], dtype = torch.bfloat16, device = device(type='cuda', index=0), pin_memory = False)
        auto_functionalized = torch.ops.higher_order.auto_functionalized(torch.ops._C.rms_norm.default, result = empty, input = arg1_1, weight = arg2_1, epsilon = 1e-05);  empty = None
        getitem_1: "bf16[s0, 4096][4096, 1]cuda:0" = auto_functionalized[1];  auto_functionalized = None
        auto_functionalized_1 = torch.ops.higher_order.auto_functionalized(torch.ops._C.fused_add_rms_norm.default, input = getitem_1, residual = arg3_1, weight = arg2_1, epsilon = 1e-05)
        getitem_3: "bf16[s0, 4096][4096, 1]cuda:0" = auto_functionalized_1[1]
        getitem_4: "bf16[s0, 4096][4096, 1]cuda:0" = auto_functionalized_1[2];  auto_functionalized_1 = None
        auto_functionalized_v2 = torch.ops.higher_order.auto_functionalized_v2(torch.ops._C.silu_and_mul.default, input = getitem_3, _result_base_index = 0, _all_bases = [getitem_4]);  getitem_4 = None
        getitem_6: "bf16[s0, 4096][4096, 1]cuda:0" = auto_functionalized_v2[1];  auto_functionalized_v2 = None
        mul_154: "Sym(2*s0)" = arg0_1 * 2
        return (getitem_6, mul_154)
)FX", "vllm.post_grad.txt");
  REQUIRE(verifyModule(*m).empty());
  CHECK(m->producer.stage == Stage::PostGradPost);  // from the file name
  CHECK(m->producer.functional);
  const Node* af = findNode(*m, "auto_functionalized");
  CHECK(af->numOutputs() == 2);  // 1 + one mutable arg
  const Node* af1 = findNode(*m, "auto_functionalized_1");
  CHECK(af1->numOutputs() == 3);  // 1 + two mutable args
  CHECK(af1->output(2)->name == "getitem_4");
  const Node* v2 = findNode(*m, "auto_functionalized_v2");
  CHECK(v2->numOutputs() == 2);  // 1 + len(_all_bases)
  CHECK(findNode(*m, "mul_154")->output()->sym->str() == "2*s0");
  auto h = histogram(*m);
  CHECK(h["higher_order.auto_functionalized"] == 2);
  CHECK(h.count("_operator.getitem") == 0);
}

// ------------------------------------------------------------------------------ errors

TEST_CASE("a dump without annotations names the file, line and value", "[fx_text][errors]") {
  std::string msg = errorOf([] { loadModule(data("no_annotations.py")); });
  CHECK_THAT(msg, Catch::Contains("no_annotations.py: line 4: value 'p_lin_weight' has no shape annotation"));
  CHECK_THAT(msg, Catch::Contains("print_readable(include_stride=True, include_device=True)"));

}

TEST_CASE("unannotated values in an otherwise annotated dump are opaque", "[fx_text]") {
  auto m = importText("class GraphModule(torch.nn.Module):\n    def forward(self, x: \"f32[4]\"):\n"
                      "        mm = torch.ops.aten.relu.default(x)\n        return (mm,)\n");
  CHECK(findNode(*m, "mm")->output()->kind == ValueKind::Opaque);
  CHECK(m->metadata["fx_text.unannotated_values"] == "1");
}

TEST_CASE("garbage, other formats and malformed text fail with file and line", "[fx_text][errors]") {
  struct Case {
    std::string text;
    std::string expect;
  };
  const Case cases[] = {
      {"hello world\n", "bad.txt: line 1: not an FX readable dump"},
      {"graph():\n    %x : [num_users=1] = placeholder[target=x]\n", "str(graph) dump"},
      {"def forward(self, x: \"f32[4]\"):\n    y: \"f32[4]\" = torch.ops.aten.relu.default(x\n", "line 2: unexpected end of file"},
      {"def forward(self, x: \"f32[4]\"):\n    y: \"f32[4] = torch.ops.aten.relu.default(x)\n    return (y,)\n", "line 2: unterminated string"},
      {"def forward(self, x: \"f32[4]\"):\n    y: \"f32[4]\" = torch.ops.aten.relu.default(z)\n    return (y,)\n", "line 2: undefined name 'z'"},
      {"def forward(self, x: \"f32[4]\"):\n    y: \"f32[4]\" = torch.ops.aten.relu.default(x)\n", "line 2: forward() of 'forward' ends without a return"},
      {"def forward(self, x: \"f32[s0 +]\"):\n    return (x,)\n", "line 1"},
      {"def forward(self, x: \"f32[4][1, 1]\"):\n    return (x,)\n", "line 1: annotation 'f32[4][1, 1]' has 1 sizes but 2 strides"},
      {"def forward(self, x: \"f32[4]\"):\n    y: \"f32[4]\" = torch.ops.aten.relu.default(x) $\n    return (y,)\n", "line 2: unexpected character '$'"},
      {"def forward(self, x: \"f32[4]\"):\n    return (x,)\n    y = x\n", "line 3: statement after return"},
      {"def forward(self, x: \"f32[4]\"):\n    y: \"f32[4]\" = foo[0](x)\n    return (y,)\n", "line 2"},
      {"class A(torch.nn.Module):\n    def forward(self, x: \"f32[4]\"):\n"
       "        y = torch.ops.higher_order.cond(x, self.missing, self.missing, (x,))\n        return (y,)\n",
       "line 3: 'self.missing' is not a nested graph module"},
      {"def forward(self, x: \"f32[4]\"):\n    y: \"f32[-4]\" = torch.ops.aten.relu.default(x)\n    return (y,)\n", "negative size"},
      {"def forward(self, x: \"f32[4]\"):\n  y: \"f32[4]\" = torch.ops.aten.relu.default(x)\n    return (y,)\n", "line 3: unexpected indentation"},
      {std::string(300, '('), "not an FX readable dump"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    std::string msg = errorOf([&] { importText(c.text, "bad.txt"); });
    CHECK_THAT(msg, Catch::Contains("bad.txt"));
    CHECK_THAT(msg, Catch::Contains(c.expect));
  }
  std::string deep = "def forward(self, x: \"f32[4]\"):\n    y = torch.ops.aten.relu.default(" + std::string(5000, '[') +
                     std::string(5000, ']') + ")\n    return (y,)\n";
  CHECK_THAT(errorOf([&] { importText(deep, "bad.txt"); }), Catch::Contains("bad.txt: line 2: expression nested too deeply"));
}

TEST_CASE("every truncation of a dump imports or fails cleanly", "[fx_text][errors]") {
  for (const char* f : {"post_grad_pre_afv1.readable.txt", "hop_cond_export.txt", "aot_symint.txt"}) {
    std::string text = readFile(data(f));
    text = text.substr(0, text.find("==== str(graph)"));
    size_t ok = 0, failed = 0;
    for (size_t cut = 0; cut < text.size(); ++cut) {
      try {
        auto m = importFxText(std::string_view(text).substr(0, cut), f);
        CHECK(verifyModule(*m).empty());
        ++ok;
      } catch (const FxError& e) {
        std::string msg = e.what();
        if (msg.find(std::string(f) + ": line ") == std::string::npos) FAIL(msg);
        ++failed;
      }
    }
    CHECK(failed > 0);
  }
}

// ------------------------------------------------------------------------------ misc

TEST_CASE("looksLikeFxText", "[fx_text]") {
  CHECK(looksLikeFxText(readFile(data("post_grad_pre.readable.txt"))));
  CHECK(looksLikeFxText(readFile(data("hop_cond_python_code.py"))));
  CHECK(looksLikeFxText(readFile(data("fx_graph_readable.py"))));
  CHECK(looksLikeFxText(readFile(data("no_annotations.py"))));  // so the importer explains what is missing
  CHECK_FALSE(looksLikeFxText("fxfuse.module {\n  graph @main {\n  }\n}\n"));
  CHECK_FALSE(looksLikeFxText("{\"graph_module\": {}}"));
  CHECK_FALSE(looksLikeFxText("def forward(self, x):\n    return x + 1\n"));
  CHECK_FALSE(looksLikeFxText("import torch\nprint('hello')\n"));
}

TEST_CASE("a large dump imports in linear time", "[fx_text][perf]") {
  // ~ an 80-layer model's worth of lines: 64k nodes in one chain plus SymInt arithmetic.
  std::string text = "class <lambda>(torch.nn.Module):\n    def forward(self, arg0_1: \"Sym(s0)\", "
                     "arg1_1: \"bf16[s0, 4096][4096, 1]cuda:0\", arg2_1: \"bf16[4096, 4096][4096, 1]cuda:0\"):\n";
  std::string prev = "arg1_1";
  const int kNodes = 64000;
  for (int i = 0; i < kNodes; ++i) {
    std::string name = "mm_" + std::to_string(i);
    if (i % 1000 == 0) text += "        # File: model.py:" + std::to_string(i) + " in forward, code: x = layer(x)\n";
    text += "        " + name + ": \"bf16[s0, 4096][4096, 1]cuda:0\" = torch.ops.aten.mm.default(" + prev +
            ", arg2_1);  " + prev + " = None\n";
    prev = name;
  }
  text += "        return (" + prev + ",)\n";
  auto t0 = std::chrono::steady_clock::now();
  auto m = importFxText(text, "big.txt");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(m->entry().numNodes() == static_cast<size_t>(kNodes));
  WARN("imported " << kNodes << " nodes (" << text.size() / 1e6 << " MB) in " << s << " s");
  CHECK(s < 30.0);  // generous (sanitizer builds); quadratic behavior would take minutes
}
