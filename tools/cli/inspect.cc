// `fxfuse inspect FILE [--json]`: what is in a graph file — op histogram, inputs and
// outputs with types, symbols with ranges, custom ops seen, whether it is functional.
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/cli/commands.h"
#include "tools/cli/progress.h"
#include "ir/fxg.h"
#include "ir/io.h"
#include "ir/op_schema.h"

namespace fxfuse::cli {

namespace {

using ir::Module;
using ir::Node;

bool isBuiltinNamespace(const std::string& target) {
  for (const char* ns : {"aten.", "prims.", "higher_order.", "_operator.", "math.", "torch.", "fxfuse.", "builtins."})
    if (target.rfind(ns, 0) == 0) return true;
  return false;
}

// A graph is functional when no op writes into its arguments outside
// auto_functionalized: mutable schema args or ATen in-place overloads.
bool isMutatingCall(const Module& m, const Node& n, std::map<std::string, ir::OpSchema, std::less<>>& cache) {
  if (n.kind != ir::NodeKind::Op) return false;
  if (const ir::OpSchema* s = ir::lookupSchema(m.op_schemas, n.target, &cache)) return !s->mutableArgs().empty();
  return n.numOutputs() == 0 || ir::hasSideEffects(n);
}

nlohmann::json inspectJson(Module& m) {
  nlohmann::json j;
  ir::Graph& g = m.entry();
  std::map<std::string, int> ops, sub_ops;
  std::set<std::string> custom;
  std::map<std::string, ir::OpSchema, std::less<>> cache;
  bool functional = true;
  size_t nodes = 0;
  for (size_t gi = 0; gi < m.graphs().size(); ++gi) {
    for (const auto& np : m.graphs()[gi]->nodes()) {
      const Node& n = *np;
      (gi == 0 ? ops : sub_ops)[n.target]++;
      ++nodes;
      if (!isBuiltinNamespace(n.target)) custom.insert(n.target);
      for (const auto& a : n.args())
        if (a.value.kind == ir::Attr::Kind::Op && !isBuiltinNamespace(a.value.s)) custom.insert(a.value.s);
      if (isMutatingCall(m, n, cache)) functional = false;
    }
  }
  j["file"] = m.producer.source_path;
  j["producer"] = {{"tool", m.producer.tool},
                   {"torch_version", m.producer.torch_version},
                   {"schema", m.producer.source_schema},
                   {"stage", std::string(ir::stageName(m.producer.stage))}};
  j["ops"] = ops;
  if (!sub_ops.empty()) j["subgraph_ops"] = sub_ops;
  j["num_nodes"] = g.numNodes();
  j["num_nodes_all_graphs"] = nodes;
  j["num_graphs"] = m.graphs().size();
  g.renumber();
  auto& ins = j["inputs"] = nlohmann::json::array();
  static const char* kKinds[] = {"user", "parameter", "buffer", "constant", "custom_obj", "token"};
  for (const auto& in : g.inputs())
    ins.push_back({{"name", in.value->name}, {"type", ir::typeStr(*in.value)}, {"kind", kKinds[static_cast<int>(in.kind)]},
                   {"target", in.target}});
  auto& outs = j["outputs"] = nlohmann::json::array();
  for (const auto& o : g.outputs()) outs.push_back({{"type", o.value ? ir::typeStr(*o.value) : "constant"}});
  auto& syms = j["symbols"] = nlohmann::json::object();
  for (const auto& [name, s] : m.symbols.all()) {
    nlohmann::json e;
    e["min"] = s.min ? nlohmann::json(*s.min) : nlohmann::json(nullptr);
    e["max"] = s.max ? nlohmann::json(*s.max) : nlohmann::json(nullptr);
    e["hint"] = s.hint ? nlohmann::json(*s.hint) : nlohmann::json(nullptr);
    syms[name] = e;
  }
  j["custom_ops"] = custom;
  j["functional"] = functional;
  return j;
}

void printText(const nlohmann::json& j) {
  fmt::print("file: {}\n", j["file"].get<std::string>());
  fmt::print("producer: {} (torch {}, {}, stage {})\n", j["producer"]["tool"].get<std::string>(),
             j["producer"]["torch_version"].get<std::string>(), j["producer"]["schema"].get<std::string>(),
             j["producer"]["stage"].get<std::string>());
  fmt::print("graphs: {}   nodes: {} (entry graph {})   functional: {}\n", j["num_graphs"].get<size_t>(),
             j["num_nodes_all_graphs"].get<size_t>(), j["num_nodes"].get<size_t>(), j["functional"].get<bool>() ? "yes" : "no");
  fmt::print("\ninputs ({}):\n", j["inputs"].size());
  for (const auto& in : j["inputs"])
    fmt::print("  {:<32} {:<10} {}\n", in["name"].get<std::string>(), in["kind"].get<std::string>(), in["type"].get<std::string>());
  fmt::print("\noutputs ({}):\n", j["outputs"].size());
  for (const auto& o : j["outputs"]) fmt::print("  {}\n", o["type"].get<std::string>());
  fmt::print("\nsymbols ({}):\n", j["symbols"].size());
  for (auto it = j["symbols"].begin(); it != j["symbols"].end(); ++it) {
    auto b = [](const nlohmann::json& v) { return v.is_null() ? std::string("?") : std::to_string(v.get<int64_t>()); };
    fmt::print("  {:<8} range [{}, {}]  hint {}\n", it.key(), b(it.value()["min"]), b(it.value()["max"]), b(it.value()["hint"]));
  }
  std::vector<std::pair<int, std::string>> hist;
  for (auto it = j["ops"].begin(); it != j["ops"].end(); ++it) hist.push_back({it.value().get<int>(), it.key()});
  std::sort(hist.begin(), hist.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  fmt::print("\nops ({} kinds):\n", hist.size());
  for (const auto& [c, t] : hist) fmt::print("  {:>6}  {}\n", c, t);
  if (!j["custom_ops"].empty()) {
    fmt::print("\ncustom ops:\n");
    for (const auto& c : j["custom_ops"]) fmt::print("  {}\n", c.get<std::string>());
  }
}

}  // namespace

void registerInspect(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("inspect", "Summarize a graph file: ops, inputs/outputs, symbols, custom ops");
  static std::string path;
  static bool as_json = false;
  cmd->add_option("file", path, "graph file (.pt2, .json, .pb, .fxg, FX readable text)")->required();
  cmd->add_flag("--json", as_json, "print one JSON object");
  cmd->callback([&exit_code] {
    progress::stage("reading " + path);
    auto m = ir::loadModule(path);
    progress::end();
    nlohmann::json j = inspectJson(*m);
    if (as_json) {
      fmt::print("{}\n", j.dump(2));
    } else {
      printText(j);
    }
    exit_code = 0;
  });
}

}  // namespace fxfuse::cli
