#include "tools/inspect/diff_format.h"

#include <fmt/format.h>

#include "tools/inspect/node_text.h"

namespace fxfuse::inspect {

namespace {

const char* kindName(DiffRegion::Kind k) {
  switch (k) {
    case DiffRegion::Kind::Rewritten: return "rewritten";
    case DiffRegion::Kind::Removed: return "removed";
    case DiffRegion::Kind::Added: return "added";
  }
  return "?";
}

struct Colors {
  const char* red = "";
  const char* green = "";
  const char* cyan = "";
  const char* bold = "";
  const char* dim = "";
  const char* reset = "";
};

std::string nodeLine(const ir::Node& n, char sign, const Colors& c) {
  std::string text = nodeText(n, 150);
  std::string loc = locText(n);
  std::string line = fmt::format("{}{} {}", sign == '-' ? c.red : c.green, sign, text);
  if (!loc.empty()) {
    size_t w = text.size() + 2;
    line += std::string(w < 72 ? 72 - w : 2, ' ');
    line += fmt::format("{}{}{}", c.dim, loc, sign == '-' ? c.red : c.green);
  }
  return line + c.reset + "\n";
}

}  // namespace

nlohmann::json nodeJson(const ir::Node& n) {
  nlohmann::json j;
  j["name"] = n.name;
  j["target"] = n.target;
  j["text"] = nodeText(n, 0);
  j["types"] = outputTypes(n);
  ir::SourceLoc l = sourceLoc(n);
  if (l.empty()) {
    j["loc"] = nullptr;
  } else {
    j["loc"] = {{"file", l.file}, {"line", l.line}, {"code", l.code}};
  }
  j["module"] = modulePath(n);
  return j;
}

std::string diffText(const GraphDiff& d, const DiffTextOptions& opts) {
  Colors c;
  if (opts.color) c = Colors{"\033[31m", "\033[32m", "\033[36m", "\033[1m", "\033[2m", "\033[0m"};
  std::string out;
  out += fmt::format("{}diff {} -> {}: {} -> {} nodes, {} matched{}\n", c.bold, opts.name_a, opts.name_b, d.a->numNodes(),
                     d.b->numNodes(), d.matched(), c.reset);
  if (d.identical()) {
    out += "no differences\n";
    return out;
  }
  out += fmt::format("{} rewritten, {} removed, {} added\n", d.count(DiffRegion::Kind::Rewritten),
                     d.count(DiffRegion::Kind::Removed), d.count(DiffRegion::Kind::Added));
  for (const auto& [summary, k] : d.rewriteCounts()) out += fmt::format("  {:>3}x  {}\n", k, summary);
  for (const DiffRegion& r : d.regions) {
    out += "\n";
    std::string where;
    auto locs = r.locations();
    if (!locs.empty()) {
      where = "  [" + locs.front();
      if (locs.size() > 1) where += fmt::format(" +{} more", locs.size() - 1);
      where += "]";
    }
    std::string title = r.kind == DiffRegion::Kind::Rewritten ? r.summary()
                        : r.kind == DiffRegion::Kind::Removed ? r.summary().substr(0, r.summary().find(" -> "))
                                                               : r.summary().substr(r.summary().find(" -> ") + 4);
    out += fmt::format("{}@@ {} #{}: {}{}{}\n", c.cyan, kindName(r.kind), r.id, title, where, c.reset);
    auto emit = [&](const std::vector<const ir::Node*>& nodes, char sign) {
      size_t shown = 0;
      for (const ir::Node* n : nodes) {
        if (shown == opts.max_nodes_per_region) {
          out += fmt::format("{}{} ... {} more{}\n", sign == '-' ? c.red : c.green, sign, nodes.size() - shown, c.reset);
          break;
        }
        out += nodeLine(*n, sign, c);
        ++shown;
      }
    };
    emit(r.removed, '-');
    emit(r.added, '+');
  }
  return out;
}

nlohmann::json diffJson(const GraphDiff& d, const std::string& name_a, const std::string& name_b) {
  nlohmann::json j;
  j["a"] = {{"file", name_a}, {"nodes", d.a->numNodes()}};
  j["b"] = {{"file", name_b}, {"nodes", d.b->numNodes()}};
  j["matched"] = d.matched();
  j["summary"] = nlohmann::json::object();
  for (const auto& [s, k] : d.rewriteCounts()) j["summary"][s] = k;
  j["rewritten"] = nlohmann::json::array();
  j["removed"] = nlohmann::json::array();
  j["added"] = nlohmann::json::array();
  for (const DiffRegion& r : d.regions) {
    nlohmann::json e;
    e["id"] = r.id;
    e["summary"] = r.summary();
    auto nodes = [](const std::vector<const ir::Node*>& v) {
      nlohmann::json a = nlohmann::json::array();
      for (const ir::Node* n : v) a.push_back(nodeJson(*n));
      return a;
    };
    e["locations"] = r.locations();
    switch (r.kind) {
      case DiffRegion::Kind::Rewritten:
        e["removed"] = nodes(r.removed);
        e["added"] = nodes(r.added);
        j["rewritten"].push_back(std::move(e));
        break;
      case DiffRegion::Kind::Removed:
        e["nodes"] = nodes(r.removed);
        j["removed"].push_back(std::move(e));
        break;
      case DiffRegion::Kind::Added:
        e["nodes"] = nodes(r.added);
        j["added"].push_back(std::move(e));
        break;
    }
  }
  return j;
}

}  // namespace fxfuse::inspect
