#include "passes/pipeline/report.h"

#include <algorithm>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "ir/fxg.h"
#include "ir/op_table.h"

namespace fxfuse::compiler {

bool isFusionPattern(const std::string& p) { return ir::isFusedOp(p); }

nlohmann::json reportJson(const CompileResult& r, const CompileOptions& opts, const ReportContext& rc) {
  nlohmann::json j;
  j["fxfuse_report_version"] = 1;
  j["input"] = rc.input;
  j["output"] = rc.output;
  j["compile_ms"] = rc.total_ms > 0 ? rc.total_ms : r.compile_ms;
  j["load_ms"] = rc.load_ms;
  j["passes_ms"] = r.compile_ms;
  j["write_ms"] = rc.write_ms;
  j["nodes_before"] = r.nodes_before;
  j["nodes_after"] = r.nodes_after;
  j["world_size"] = opts.world_size;
  nlohmann::json passes = nlohmann::json::array();
  for (const auto& p : r.passes) {
    nlohmann::json pj = {{"name", p.name}, {"changed", p.changed}, {"matches", p.matches}, {"ms", p.ms}};
    pj["counters"] = nlohmann::json::object();
    for (const auto& [k, v] : p.counters) pj["counters"][k] = v;
    passes.push_back(pj);
  }
  j["passes"] = passes;
  j["canonical"] = nlohmann::json::object();
  for (const auto& [k, v] : r.canonical) j["canonical"][k] = v;
  j["fusions"] = nlohmann::json::object();
  for (const auto& [k, v] : r.fusions) j["fusions"][k] = v;
  nlohmann::json unfused = nlohmann::json::array();
  for (const auto& d : r.decisions)
    if (!d.applied && isFusionPattern(d.pattern))
      unfused.push_back({{"fusion", d.pattern}, {"node", d.node}, {"reason", d.reason}});
  j["unfused"] = unfused;
  nlohmann::json scalars = nlohmann::json::array();
  for (const auto& [name, value] : r.lifted_scalars)
    scalars.push_back({{"input", name}, {"value", value ? nlohmann::json(*value) : nlohmann::json()}});
  j["lifted_scalars"] = scalars;
  nlohmann::json guards = nlohmann::json::array();
  for (const auto& g : r.guards) guards.push_back({{"condition", g.condition.str()}, {"reason", g.reason}});
  j["guards"] = guards;
  return j;
}

// One line per lifted scalar input (its value, or that it is unknown and how to give it) and
// per guard (a symbolic assumption a match relied on).
static std::string liftedScalarLines(const CompileResult& r) {
  std::string out;
  for (const auto& [name, value] : r.lifted_scalars)
    out += value ? fmt::format("lifted scalar input '{}' = {}\n", name, ir::formatFloat(*value))
                 : fmt::format("lifted scalar input '{}': value unknown; matches that depend on it were not made "
                               "(pass --const {}=VALUE)\n", name, name);
  for (const auto& g : r.guards)
    out += fmt::format("guard {}: {} (checked when symbols are bound)\n", g.condition.str(), g.reason);
  return out;
}

std::string humanSummary(const CompileResult& r, const CompileOptions& opts, const ReportContext& rc) {
  std::ostringstream os;
  os << fmt::format("fxfuse compile: {}\n", rc.input);
  os << fmt::format("nodes {} -> {}, world size {}, {:.2f} ms (passes {:.2f} ms)\n\n", r.nodes_before, r.nodes_after,
                    opts.world_size, rc.total_ms > 0 ? rc.total_ms : r.compile_ms, r.compile_ms);
  os << fmt::format("  {:<26} {:>7} {:>7} {:>9}  {}\n", "pass", "changed", "matches", "ms", "by pattern");
  for (const auto& p : r.passes) {
    std::string by;
    for (const auto& [k, v] : p.counters) by += fmt::format("{}{}={}", by.empty() ? "" : " ", k, v);
    os << fmt::format("  {:<26} {:>7} {:>7} {:>9.3f}  {}\n", p.name, p.changed ? "yes" : "no", p.matches, p.ms, by);
  }
  os << "\ncanonical ops found:\n";
  for (const auto& [k, v] : r.canonical) os << fmt::format("  {:<26} {}\n", k, v);
  os << "fusions made:\n";
  int64_t total = 0;
  for (const auto& [k, v] : r.fusions) {
    os << fmt::format("  {:<26} {}\n", k, v);
    total += v;
  }
  os << fmt::format("  {:<26} {}\n", "total", total);
  std::vector<const Decision*> unfused;
  for (const auto& d : r.decisions)
    if (!d.applied && isFusionPattern(d.pattern)) unfused.push_back(&d);
  os << fmt::format("unfused sites: {}\n", unfused.size());
  // Grouped by fusion and reason, first site named (`fxfuse explain` lists every one).
  std::vector<std::pair<std::pair<std::string, std::string>, std::vector<std::string>>> groups;
  for (const Decision* d : unfused) {
    auto key = std::make_pair(d->pattern, d->reason);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) groups.push_back({key, {d->node}});
    else it->second.push_back(d->node);
  }
  for (const auto& [key, nodes] : groups) {
    if (nodes.size() == 1)
      os << fmt::format("  {:<26} at {}: {}\n", key.first, nodes[0], key.second);
    else
      os << fmt::format("  {:<26} at {} and {} more: {}\n", key.first, nodes[0], nodes.size() - 1, key.second);
  }
  os << liftedScalarLines(r);
  if (!rc.output.empty()) os << fmt::format("\nwrote {}\n", rc.output);
  return os.str();
}

std::string explainText(const CompileResult& r, const std::string& node) {
  std::ostringstream os;
  size_t shown = 0;
  for (const auto& d : r.decisions) {
    if (!node.empty()) {
      bool hit = d.node == node;
      if (!hit && !d.sources.empty()) {
        std::string s = "," + d.sources + ",";
        hit = s.find("," + node + ",") != std::string::npos;
      }
      if (!hit) continue;
    }
    ++shown;
    if (d.applied) {
      os << fmt::format("[{}] {}: applied -> {}", d.pass, d.pattern, d.node);
      if (!d.sources.empty()) os << fmt::format(" (from {})", d.sources);
      if (!d.reason.empty()) os << fmt::format(": {}", d.reason);
    } else {
      os << fmt::format("[{}] {}: not applied at {}: {}", d.pass, d.pattern, d.node, d.reason);
    }
    os << "\n";
  }
  if (shown == 0) os << (node.empty() ? "no candidate sites\n" : fmt::format("no decision involves node '{}'\n", node));
  if (node.empty()) os << liftedScalarLines(r);
  return os.str();
}

}  // namespace fxfuse::compiler
