#include "tools/inspect/html_report.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

#include "tools/inspect/diff_format.h"
#include "tools/inspect/graph_diff.h"
#include "tools/inspect/node_text.h"
#include "ir/io.h"
#include "ir/output_set.h"
#include "ir/status.h"
#include "passes/pipeline/registry.h"

namespace fxfuse::inspect {

namespace {

const char* kCss = R"CSS(
:root { --fg:#212529; --muted:#6c757d; --line:#dee2e6; --bg:#ffffff; --soft:#f8f9fa;
        --red:#c92a2a; --redbg:#fff5f5; --green:#2b8a3e; --greenbg:#ebfbee; --blue:#1c7ed6; --orange:#e8590c; }
* { box-sizing: border-box; }
body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: var(--fg); background: var(--bg);
       margin: 0; }
header { padding: 18px 28px 10px; border-bottom: 1px solid var(--line); background: var(--soft); }
header h1 { margin: 0 0 4px; font-size: 22px; }
header .meta { color: var(--muted); }
header .meta b { color: var(--fg); font-weight: 600; }
nav { position: sticky; top: 0; background: var(--bg); border-bottom: 1px solid var(--line); padding: 6px 28px; z-index: 2; }
nav a { margin-right: 18px; color: var(--blue); text-decoration: none; font-weight: 600; }
main { padding: 8px 28px 40px; max-width: 1500px; }
section { margin-top: 26px; }
h2 { font-size: 18px; margin: 0 0 10px; border-bottom: 2px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 16px 0 8px; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 8px 14px; min-width: 150px; background: var(--bg); }
.card .n { font-size: 24px; font-weight: 700; }
.card .l { color: var(--muted); font-size: 12px; }
.card.fused { border-color: #ffc078; background: #fff4e6; }
.card.canon { border-color: #a5d8ff; background: #e7f5ff; }
.card.zero { opacity: 0.55; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: var(--soft); }
.scroll { max-height: 460px; overflow: auto; border: 1px solid var(--line); border-radius: 6px; }
.scroll th { position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td code, .mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12px; }
.bar { display: inline-block; height: 9px; background: #74c0fc; border-radius: 2px; vertical-align: middle; }
.yes { color: var(--green); font-weight: 600; }
.no { color: var(--muted); }
.ok { color: var(--green); }
.bad { color: var(--red); }
.filter { margin: 6px 0 8px; padding: 4px 8px; width: 320px; border: 1px solid var(--line); border-radius: 4px; }
details.region { border: 1px solid var(--line); border-radius: 6px; margin: 6px 0; background: var(--bg); }
details.region > summary { cursor: pointer; padding: 5px 10px; background: var(--soft); border-radius: 6px; }
details.region > summary .kind { font-weight: 700; margin-right: 6px; }
details.region > summary .loc { color: var(--muted); margin-left: 8px; }
pre.diff { margin: 0; padding: 6px 10px; overflow-x: auto; font-size: 12px; line-height: 1.35; }
pre.diff .rm { color: var(--red); background: var(--redbg); display: block; }
pre.diff .add { color: var(--green); background: var(--greenbg); display: block; }
pre.diff .where { color: var(--muted); }
.pic { border: 1px solid var(--line); border-radius: 6px; overflow: auto; max-height: 85vh; background: #fff; padding: 6px; }
.pic svg { max-width: 100%; height: auto; }
.pic.natural svg { max-width: none; }
.pictools { margin: 4px 0; }
button { font: inherit; font-size: 12px; padding: 2px 10px; border: 1px solid var(--line); border-radius: 4px;
         background: var(--soft); cursor: pointer; }
.note { color: var(--muted); font-style: italic; }
.empty { color: var(--muted); }
)CSS";

const char* kJs = R"JS(
(function () {
  'use strict';
  function filterTable(input) {
    var table = document.getElementById(input.getAttribute('data-table'));
    if (!table) { return; }
    var q = input.value.toLowerCase();
    var rows = table.tBodies[0] ? table.tBodies[0].rows : [];
    for (var i = 0; i < rows.length; i++) {
      rows[i].style.display = rows[i].textContent.toLowerCase().indexOf(q) >= 0 ? '' : 'none';
    }
  }
  var inputs = document.querySelectorAll('input.filter');
  for (var i = 0; i < inputs.length; i++) {
    inputs[i].addEventListener('input', function (e) { filterTable(e.target); });
  }
  var toggles = document.querySelectorAll('button[data-details]');
  for (var j = 0; j < toggles.length; j++) {
    toggles[j].addEventListener('click', function (e) {
      var open = e.target.getAttribute('data-open') !== '1';
      var all = document.querySelectorAll('#' + e.target.getAttribute('data-details') + ' details');
      for (var k = 0; k < all.length; k++) { all[k].open = open; }
      e.target.setAttribute('data-open', open ? '1' : '0');
      e.target.textContent = open ? 'collapse all' : 'expand all';
    });
  }
  var zooms = document.querySelectorAll('button[data-pic]');
  for (var z = 0; z < zooms.length; z++) {
    zooms[z].addEventListener('click', function (e) {
      var pic = document.getElementById(e.target.getAttribute('data-pic'));
      if (!pic) { return; }
      pic.classList.toggle('natural');
      e.target.textContent = pic.classList.contains('natural') ? 'fit to width' : 'actual size';
    });
  }
  document.body.setAttribute('data-ready', '1');
})();
)JS";

std::string esc(const std::string& s) { return htmlEscape(s); }

bool isFusionPass(const std::string& name) {
  return name.size() > 7 && name.compare(name.size() - 7, 7, "-fusion") == 0;
}

std::string fmtMs(double ms) { return ms < 10 ? fmt::format("{:.2f}", ms) : fmt::format("{:.1f}", ms); }

std::string diffLines(const DiffRegion& r) {
  std::string out = "<pre class=\"diff\">";
  auto line = [&](const ir::Node* n, const char* cls, char sign) {
    std::string loc = locText(*n);
    out += fmt::format("<span class=\"{}\">{} {}{}</span>", cls, sign, esc(nodeText(*n, 220)),
                       loc.empty() ? "" : "  <span class=\"where\">" + esc(loc) + "</span>");
  };
  size_t k = 0;
  for (const ir::Node* n : r.removed) {
    if (k++ == 60) {
      out += fmt::format("<span class=\"rm\">- ... {} more</span>", r.removed.size() - 60);
      break;
    }
    line(n, "rm", '-');
  }
  k = 0;
  for (const ir::Node* n : r.added) {
    if (k++ == 60) {
      out += fmt::format("<span class=\"add\">+ ... {} more</span>", r.added.size() - 60);
      break;
    }
    line(n, "add", '+');
  }
  return out + "</pre>";
}

// Location of a decision's anchor node: looked up in the compiled graph, then the input.
std::string decisionLoc(const compiler::Decision& d, const std::unordered_map<std::string, const ir::Node*>& after,
                        const std::unordered_map<std::string, const ir::Node*>& before) {
  for (const auto* m : {&after, &before}) {
    auto it = m->find(d.node);
    if (it != m->end()) {
      std::string l = locText(*it->second);
      if (!l.empty()) return l;
    }
  }
  return {};
}

std::string picture(const std::string& id, const std::string& title, const ir::Graph& g, DrawOptions opts) {
  std::string out = fmt::format("<h3>{}</h3>", esc(title));
  if (dotProgram().empty()) {
    return out + "<p class=\"note\">Graphviz <code>dot</code> is not installed: no picture (install the Debian package "
                 "<code>graphviz</code>).</p>";
  }
  std::string svg;
  try {
    svg = renderSvgInline(graphToDot(g, opts));
  } catch (const FxError& e) {
    return out + "<p class=\"note\">No picture: " + esc(e.what()) + "</p>";
  }
  out += fmt::format("<div class=\"pictools\"><button type=\"button\" data-pic=\"{}\">actual size</button></div>", id);
  out += fmt::format("<div class=\"pic\" id=\"{}\">{}</div>", id, svg);
  return out;
}

}  // namespace

std::vector<SiteNote> siteNotes(const compiler::CompileResult& r) {
  std::vector<SiteNote> out;
  for (const auto& d : r.decisions) out.push_back(SiteNote{d.node, d.pass, d.pattern, d.applied, d.reason});
  return out;
}

std::vector<std::string> passList(const std::string& spec) {
  if (spec == "default" || spec == "all") return compiler::defaultPipeline();
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    std::string name = spec.substr(start, end - start);
    while (!name.empty() && name.front() == ' ') name.erase(name.begin());
    while (!name.empty() && name.back() == ' ') name.pop_back();
    if (!name.empty()) {
      if (!compiler::findPass(name)) {
        std::string known;
        for (const auto& p : compiler::allPasses()) known += (known.empty() ? "" : ", ") + p.name;
        fail("unknown pass '{}' (known passes: {})", name, known);
      }
      out.push_back(name);
    }
    start = end + 1;
  }
  if (out.empty()) fail("empty pass list '{}'", spec);
  return out;
}

std::string htmlReport(const HtmlReportInput& in) {
  if (!in.before || !in.after || !in.result) fail("html report: before/after modules and the compile result are required");
  const compiler::CompileResult& r = *in.result;
  const ir::Graph& gb = in.before->entry();
  const ir::Graph& ga = in.after->entry();
  GraphDiff d = diffGraphs(gb, ga);

  std::unordered_map<std::string, const ir::Node*> names_before, names_after;
  for (const auto& n : gb.nodes()) names_before[n->name] = n.get();
  for (const auto& n : ga.nodes()) names_after[n->name] = n.get();

  std::string h;
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  h += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += "<link rel=\"icon\" href=\"data:,\">\n";
  h += fmt::format("<title>fxfuse compile report: {}</title>\n", esc(in.input_path));
  h += "<style>";
  h += kCss;
  h += "</style>\n</head>\n<body>\n";

  int64_t fused_total = 0;
  for (const auto& [k, v] : r.fusions) fused_total += v;
  size_t unfused = 0, fused_sites = 0;
  for (const auto& dec : r.decisions) {
    if (!isFusionPass(dec.pass)) continue;
    (dec.applied ? fused_sites : unfused)++;
  }

  // Header.
  h += "<header><h1>fxfuse compile report</h1><div class=\"meta\">";
  h += fmt::format("input <b>{}</b>", esc(in.input_path));
  if (!in.output_path.empty()) h += fmt::format(" &rarr; output <b>{}</b>", esc(in.output_path));
  h += fmt::format(" &middot; nodes <b>{}</b> &rarr; <b>{}</b>", r.nodes_before, r.nodes_after);
  h += fmt::format(" &middot; passes <b>{} ms</b>", fmtMs(r.compile_ms));
  if (in.load_ms > 0) h += fmt::format(" &middot; load {} ms", fmtMs(in.load_ms));
  if (!in.output_path.empty()) h += fmt::format(" &middot; write {} ms", fmtMs(in.write_ms));
  if (in.options) h += fmt::format(" &middot; world size {}", in.options->world_size);
  const auto& prod = in.before->producer;
  if (!prod.tool.empty())
    h += fmt::format("<br>producer {} (torch {}, stage {})", esc(prod.tool), esc(prod.torch_version),
                     esc(std::string(ir::stageName(prod.stage))));
  h += "</div></header>\n";
  h += "<nav><a href=\"#summary\">Summary</a><a href=\"#passes\">Passes</a><a href=\"#sites\">Sites</a>"
       "<a href=\"#diff\">Diff</a><a href=\"#pictures\">Pictures</a></nav>\n<main>\n";

  // Summary.
  h += "<section id=\"summary\"><h2>Summary</h2><div class=\"cards\">";
  h += fmt::format("<div class=\"card fused\"><div class=\"n\">{}</div><div class=\"l\">fusions made</div></div>", fused_total);
  h += fmt::format("<div class=\"card\"><div class=\"n\">{}</div><div class=\"l\">candidate sites not fused</div></div>", unfused);
  h += fmt::format("<div class=\"card\"><div class=\"n\">{}</div><div class=\"l\">rewritten regions (diff)</div></div>",
                   d.count(DiffRegion::Kind::Rewritten));
  h += "</div><h3>Fused ops made</h3><div class=\"cards\">";
  for (const auto& [k, v] : r.fusions)
    h += fmt::format("<div class=\"card fused{}\"><div class=\"n\">{}</div><div class=\"l\">{}</div></div>", v ? "" : " zero", v,
                     esc(k));
  h += "</div><h3>Canonical ops found</h3><div class=\"cards\">";
  for (const auto& [k, v] : r.canonical)
    h += fmt::format("<div class=\"card canon{}\"><div class=\"n\">{}</div><div class=\"l\">{}</div></div>", v ? "" : " zero", v,
                     esc(k));
  h += "</div></section>\n";

  // Pass table.
  double max_ms = 0;
  for (const auto& p : r.passes) max_ms = std::max(max_ms, p.ms);
  h += "<section id=\"passes\"><h2>Passes</h2><table id=\"passtable\"><thead><tr><th>#</th><th>pass</th><th>changed</th>"
       "<th>matches</th><th>time (ms)</th><th></th><th>matches by pattern</th></tr></thead><tbody>";
  int idx = 0;
  for (const auto& p : r.passes) {
    std::string counters;
    for (const auto& [k, v] : p.counters) counters += fmt::format("{}{}: {}", counters.empty() ? "" : ", ", esc(k), v);
    int width = max_ms > 0 ? static_cast<int>(120 * p.ms / max_ms) : 0;
    h += fmt::format("<tr><td class=\"num\">{}</td><td><code>{}</code></td><td class=\"{}\">{}</td><td class=\"num\">{}</td>"
                     "<td class=\"num\">{}</td><td><span class=\"bar\" style=\"width:{}px\"></span></td><td>{}</td></tr>",
                     ++idx, esc(p.name), p.changed ? "yes" : "no", p.changed ? "yes" : "no", p.matches, fmtMs(p.ms),
                     std::max(width, 1), counters);
  }
  h += "</tbody></table></section>\n";

  // Sites.
  auto siteTable = [&](const std::string& id, const std::string& title, bool fusion, bool applied_only, bool unapplied_only) {
    std::string t = fmt::format("<h3>{}</h3>", title);
    std::string rows;
    int count = 0;
    for (const auto& dec : r.decisions) {
      if (isFusionPass(dec.pass) != fusion) continue;
      if (applied_only && !dec.applied) continue;
      if (unapplied_only && dec.applied) continue;
      ++count;
      std::string loc = decisionLoc(dec, names_after, names_before);
      rows += fmt::format("<tr><td><code>{}</code></td><td><code>{}</code></td><td><code>{}</code></td><td class=\"{}\">{}</td>"
                          "<td>{}</td><td class=\"mono\">{}</td></tr>",
                          esc(dec.pass), esc(dec.pattern), esc(dec.node), dec.applied ? "ok" : "bad",
                          dec.applied ? "applied" : "not applied", esc(dec.reason), esc(loc));
    }
    if (count == 0) return t + "<p class=\"empty\">none</p>";
    t += fmt::format("<input class=\"filter\" type=\"search\" placeholder=\"filter {} rows\" data-table=\"{}\">", count, id);
    t += fmt::format("<div class=\"scroll\"><table id=\"{}\"><thead><tr><th>pass</th><th>pattern</th><th>anchor node</th>"
                     "<th>result</th><th>explanation</th><th>source</th></tr></thead><tbody>{}</tbody></table></div>",
                     id, rows);
    return t;
  };
  h += "<section id=\"sites\"><h2>Candidate sites</h2>";
  h += siteTable("fusedsites", fmt::format("Fused sites ({})", fused_sites), true, true, false);
  h += siteTable("unfusedsites", fmt::format("Candidate sites that did not fuse ({})", unfused), true, false, true);
  h += siteTable("canonsites", "Canonicalization decisions", false, false, false);
  h += "</section>\n";

  // Diff.
  h += "<section id=\"diff\"><h2>Diff: input &rarr; compiled</h2>";
  h += fmt::format("<p>{} &rarr; {} nodes, {} matched; <b>{}</b> rewritten, <b>{}</b> removed, <b>{}</b> added regions.</p>",
                   gb.numNodes(), ga.numNodes(), d.matched(), d.count(DiffRegion::Kind::Rewritten),
                   d.count(DiffRegion::Kind::Removed), d.count(DiffRegion::Kind::Added));
  auto counts = d.rewriteCounts();
  if (!counts.empty()) {
    h += "<table><thead><tr><th>count</th><th>rewrite</th></tr></thead><tbody>";
    for (const auto& [s, k] : counts) h += fmt::format("<tr><td class=\"num\">{}</td><td><code>{}</code></td></tr>", k, esc(s));
    h += "</tbody></table>";
  }
  if (!d.regions.empty()) {
    h += "<p><button type=\"button\" data-details=\"regions\">expand all</button></p><div id=\"regions\" class=\"scroll\">";
    size_t shown = 0;
    for (const DiffRegion& reg : d.regions) {
      if (shown++ == 400) {
        h += fmt::format("<p class=\"note\">{} more regions not shown (see <code>fxfuse diff</code>).</p>", d.regions.size() - 400);
        break;
      }
      const char* kind = reg.kind == DiffRegion::Kind::Rewritten ? "rewritten"
                         : reg.kind == DiffRegion::Kind::Removed ? "removed"
                                                                 : "added";
      auto locs = reg.locations();
      std::string where = locs.empty() ? "" : locs.front() + (locs.size() > 1 ? fmt::format(" +{}", locs.size() - 1) : "");
      h += fmt::format("<details class=\"region\"><summary><span class=\"kind {}\">{} #{}</span><code>{}</code>"
                       "<span class=\"loc\">{}</span></summary>{}</details>",
                       reg.kind == DiffRegion::Kind::Added ? "ok" : reg.kind == DiffRegion::Kind::Removed ? "bad" : "",
                       kind, reg.id, esc(reg.summary()), esc(where), diffLines(reg));
    }
    h += "</div>";
  } else {
    h += "<p class=\"empty\">no differences</p>";
  }
  h += "</section>\n";

  // Pictures.
  h += "<section id=\"pictures\"><h2>Pictures</h2>";
  if (in.pictures) {
    DrawOptions before;
    before.diff = &d;
    before.diff_side_a = true;
    before.title = "before";
    before.max_nodes = 1500;
    DrawOptions after = before;
    after.diff_side_a = false;
    after.title = "after";
    after.notes = siteNotes(r);
    h += picture("pic-before", "Before (removed nodes outlined in red)", gb, before);
    h += picture("pic-after", "After (new nodes outlined in green, unfused candidate sites marked)", ga, after);
  } else {
    h += "<p class=\"note\">pictures disabled</p>";
  }
  h += "</section>\n</main>\n<script>";
  h += kJs;
  h += "</script>\n</body>\n</html>\n";
  return h;
}

void writeHtmlReport(const std::string& path, const HtmlReportInput& in) { ir::writeOutputFile(path, htmlReport(in)); }

}  // namespace fxfuse::inspect
