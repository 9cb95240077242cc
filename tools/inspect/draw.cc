#include "tools/inspect/draw.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "tools/inspect/node_text.h"
#include "ir/fxg.h"
#include "ir/io.h"
#include "ir/output_set.h"
#include "ir/status.h"

namespace fxfuse::inspect {

using ir::Graph;
using ir::Node;
using ir::Value;

namespace {

bool isAssertion(const Node& n) {
  const std::string& t = n.target;
  return t.find("assert") != std::string::npos || t.find("sym_constrain_range") != std::string::npos;
}

// Shape plumbing: nodes that only produce Sym values (sym_size, sym arithmetic).
bool isSymOnly(const Node& n) {
  if (n.numOutputs() == 0) return false;
  for (const Value* v : n.outputs())
    if (v && v->isTensor()) return false;
  return true;
}

bool isViewLike(const std::string& t) {
  for (const char* v : {"aten.view.", "aten.reshape.", "aten._unsafe_view.", "aten.permute.", "aten.t.", "aten.expand.",
                        "aten.unsqueeze.", "aten.squeeze.", "aten.slice.", "aten.select.", "aten.transpose.",
                        "aten.clone.", "aten.alias."})
    if (t.rfind(v, 0) == 0) return true;
  return false;
}

bool isLayerContainer(const std::string& prefix) {
  size_t dot = prefix.rfind('.');
  std::string last = dot == std::string::npos ? prefix : prefix.substr(dot + 1);
  return last == "layers" || last == "layer" || last == "h" || last == "blocks" || last == "block";
}

// Layer from a parameter name ("model.layers.3.mlp.w", or with underscores as placeholder
// names spell it: "p_model_layers_3_mlp_w"); only under a layer container name.
LayerKey layerOfParam(const std::string& name) {
  LayerKey k = layerOfPath(name);
  if (k.valid() && isLayerContainer(k.prefix)) return k;
  std::string dotted = name;
  std::replace(dotted.begin(), dotted.end(), '_', '.');
  k = layerOfPath(dotted);
  if (k.valid() && isLayerContainer(k.prefix)) return k;
  return {};
}

std::string shortParamName(const ir::GraphInput& in) {
  std::string s = in.target.empty() ? in.value->name : in.target;
  // Keep the last two dotted components: "self_attn.q_proj.weight" -> "q_proj.weight".
  size_t last = s.rfind('.');
  if (last != std::string::npos && last > 0) {
    size_t prev = s.rfind('.', last - 1);
    if (prev != std::string::npos) s = s.substr(prev + 1);
  }
  return s;
}

struct Style {
  const char* fill;
  const char* border;
  double penwidth;
};

Style classStyle(const Node& n) {
  switch (opClass(n)) {
    case OpClass::Canonical: return {"#cfe2ff", "#1c7ed6", 1.5};
    case OpClass::Fused: return {"#ffd8a8", "#e8590c", 2.5};
    case OpClass::FxfuseOther: return {"#d3f9d8", "#2f9e44", 1.2};
    case OpClass::Custom: return {"#e5dbff", "#7048e8", 1.2};
    case OpClass::Hop: return {"#fff3bf", "#f08c00", 1.2};
    case OpClass::Aten: break;
  }
  if (isViewLike(n.target)) return {"#f1f3f5", "#adb5bd", 0.8};
  return {"#ffffff", "#495057", 1.0};
}

std::string opTitle(const Node& n) {
  std::string t = shortTarget(n.target);
  if (t.rfind("aten.", 0) == 0) t = t.substr(5);
  if (n.kind == ir::NodeKind::Hop || t.rfind("higher_order.", 0) == 0) {
    if (t.rfind("higher_order.", 0) == 0) t = t.substr(13);
    for (const ir::Arg& a : n.args())
      if (a.value.kind == ir::Attr::Kind::Op) return t + "(" + shortTarget(a.value.s) + ")";
  }
  return t;
}

std::string dotQuote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

class Picture {
 public:
  Picture(const Graph& g, const DrawOptions& opts, std::string prefix, const GraphDiff* diff, bool side_a)
      : g_(g), opts_(opts), prefix_(std::move(prefix)), diff_(diff), side_a_(side_a) {
    build();
  }

  size_t drawn() const {
    size_t k = 0;
    for (const Node* n : nodes_)
      if (visible(n)) ++k;
    return k + user_inputs_.size();
  }

  void emit(std::string& out) {
    // Graph inputs that are user inputs.
    for (const Value* v : user_inputs_) {
      std::string lbl = fmt::format("<<b>{}</b>", htmlEscape(v->name));
      if (v->isTensor()) lbl += fmt::format("<br/><font point-size=\"9\">{}</font>", htmlEscape(ir::typeStr(*v)));
      lbl += ">";
      out += fmt::format("  {} [label={}, shape=box, style=\"rounded,filled\", fillcolor=\"#e9ecef\", color=\"#868e96\"];\n",
                         inputId(v), lbl);
    }
    // Nodes, grouped by layer cluster.
    std::map<std::string, std::vector<const Node*>> by_cluster;
    std::vector<std::string> cluster_order;
    std::vector<const Node*> loose;
    for (const Node* n : nodes_) {
      if (!visible(n)) continue;
      auto it = cluster_of_.find(n);
      if (it == cluster_of_.end()) {
        loose.push_back(n);
        continue;
      }
      if (!by_cluster.count(it->second)) cluster_order.push_back(it->second);
      by_cluster[it->second].push_back(n);
    }
    for (const Node* n : loose) emitNode(n, out, "  ");
    int ci = 0;
    for (const std::string& c : cluster_order) {
      out += fmt::format("  subgraph cluster_{}L{} {{\n    label={}; labeljust=l; style=\"rounded,filled\"; "
                         "fillcolor=\"#f8f9fa\"; color=\"#adb5bd\"; fontsize=12;\n",
                         prefix_, ci++, dotQuote(cluster_label_[c]));
      for (const Node* n : by_cluster[c]) emitNode(n, out, "    ");
      out += "  }\n";
    }
    if (!unplaced_.empty()) {
      std::string text = "sites not fused (node not in this picture):\\l";
      for (const std::string& s : unplaced_) {
        for (char c : s) {
          if (c == '"') text += '\\';
          text += c;
        }
        text += "\\l";
      }
      out += fmt::format("  {}unplaced [shape=note, style=filled, fillcolor=\"#fff5f5\", color=\"#e03131\", fontsize=10, "
                         "label=\"{}\"];\n",
                         prefix_, text);
    }
    for (const std::string& e : edges_) out += "  " + e + "\n";
  }

 private:
  bool visible(const Node* n) const { return !rep_.count(n) && !skip_.count(n); }
  const Node* repOf(const Node* n) const {
    auto it = rep_.find(n);
    return it == rep_.end() ? n : it->second;
  }
  std::string nodeId(const Node* n) const { return fmt::format("{}n{}", prefix_, pos_.at(n)); }
  std::string inputId(const Value* v) const { return fmt::format("{}i{}", prefix_, input_pos_.at(v)); }

  void build() {
    for (const auto& np : g_.nodes()) {
      pos_[np.get()] = nodes_.size();
      nodes_.push_back(np.get());
      by_name_[np->name] = np.get();
    }
    // Post-grad dumps pass weights as plain arguments: with a dynamic (symbolic) activation
    // input present, a user input of fully static shape is drawn as a weight.
    bool any_dynamic = false;
    for (const auto& in : g_.inputs())
      if (in.value->isTensor() && !staticShape(*in.value)) any_dynamic = true;
    for (size_t i = 0; i < g_.inputs().size(); ++i) {
      const auto& in = g_.inputs()[i];
      input_pos_[in.value] = i;
      bool weight_like = in.kind != ir::InputKind::UserInput || (any_dynamic && staticShape(*in.value));
      if (!weight_like && in.value->isTensor() && !in.value->users().empty()) user_inputs_.push_back(in.value);
      if (weight_like || !in.value->isTensor()) input_info_[in.value] = &in;
    }
    // Inputs that are tensors but not user inputs are drawn inline as parameters; so are
    // user inputs that look like weights in post-grad dumps (no role info) only when they
    // have a parameter-like target.
    for (const Node* n : nodes_)
      if (!opts_.show_all && (isAssertion(*n) || isSymOnly(*n))) skip_.insert(n);
    if (opts_.collapse_layers) collapse();
    placeNotes();
    buildEdges();
  }

  static bool staticShape(const Value& v) {
    if (!v.isTensor() || v.type.shape.empty()) return false;
    for (const auto& d : v.type.shape)
      if (!d.isInt()) return false;
    return true;
  }

  void assignLayers() {
    for (const Node* n : nodes_) {
      LayerKey k = layerOf(*n);
      if (k.valid()) layer_[n] = k;
    }
    bool from_stack = !layer_.empty();
    if (!from_stack) {
      // No module stacks: the layer of the parameters a node reads.
      for (const Node* n : nodes_) {
        for (const Value* v : n->operands()) {
          if (v->producer()) continue;
          auto it = input_info_.find(v);
          std::string name = it != input_info_.end() && !it->second->target.empty() ? it->second->target : v->name;
          LayerKey k = layerOfParam(name);
          if (k.valid()) {
            layer_[n] = k;
            break;
          }
        }
      }
    }
    if (layer_.empty()) {
      structuralBlocks();
      return;
    }
    auto same = [](const LayerKey& a, const LayerKey& b) { return a.prefix == b.prefix && a.index == b.index; };
    // Nodes without a module path take the layer of their users, then of their operands.
    auto unassigned = [&](const Node* n) { return !layer_.count(n) && (!from_stack || modulePath(*n).empty()); };
    for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) {
      const Node* n = *it;
      if (!unassigned(n)) continue;
      std::optional<LayerKey> k;
      bool ok = true;
      for (const Value* o : n->outputs()) {
        if (!o) continue;
        for (const Node* u : o->users()) {
          auto l = layer_.find(u);
          if (l == layer_.end()) continue;
          if (!k) k = l->second;
          else if (!same(*k, l->second)) ok = false;
        }
      }
      if (k && ok) layer_[n] = *k;
    }
    for (const Node* n : nodes_) {
      if (!unassigned(n)) continue;
      std::optional<LayerKey> k;
      bool ok = true;
      for (const Value* v : n->operands()) {
        auto l = v->producer() ? layer_.find(v->producer()) : layer_.end();
        if (l == layer_.end()) continue;
        if (!k) k = l->second;
        else if (!same(*k, l->second)) ok = false;
      }
      if (k && ok) layer_[n] = *k;
    }
  }

  // Without module stacks or layer-named parameters: the longest run of a repeated block of
  // ops (same targets in the same order, period p) in node order.
  void structuralBlocks() {
    std::vector<const Node*> seq;
    for (const Node* n : nodes_)
      if (!skip_.count(n)) seq.push_back(n);
    size_t n = seq.size();
    if (n < 8) return;
    std::vector<int> lab(n);
    std::unordered_map<std::string, int> ids;
    for (size_t i = 0; i < n; ++i) lab[i] = ids.emplace(seq[i]->target, static_cast<int>(ids.size())).first->second;
    // Candidate periods: distances between the j-th and (j+r)-th occurrence of an op kind,
    // r = 1..4 (an op kind used r times per layer recurs every r occurrences).
    std::unordered_map<int, std::vector<size_t>> occ;
    for (size_t i = 0; i < n; ++i) occ[lab[i]].push_back(i);
    std::map<size_t, int> dist;
    for (const auto& [l, pos] : occ)
      for (size_t r = 1; r <= 4; ++r)
        for (size_t j = 0; j + r < pos.size(); ++j) dist[pos[j + r] - pos[j]]++;
    // Weighted by the distance: a period of a whole layer occurs once per layer for each
    // op kind in it, which counts less than the short distances inside a layer.
    std::vector<std::pair<size_t, size_t>> cands;
    for (const auto& [d, c] : dist)
      if (d >= 4 && c >= 2) cands.emplace_back(static_cast<size_t>(c) * d, d);
    std::sort(cands.rbegin(), cands.rend());
    if (cands.size() > 64) cands.resize(64);
    size_t best_p = 0, best_s = 0, best_k = 0, best_score = 0;
    for (const auto& [weight, p] : cands) {
      size_t run = 0;
      for (size_t i = 0; i + p < n; ++i) {
        run = lab[i] == lab[i + p] ? run + 1 : 0;
        size_t k = (run + p) / p;
        size_t score = (k - 1) * p;
        if (k >= 2 && score > best_score) {
          best_score = score;
          best_p = p;
          best_k = k;
          best_s = i + 1 - run;
        }
      }
    }
    if (best_k < 2 || best_score < n / 4) return;
    for (size_t j = 0; j < best_k; ++j)
      for (size_t i = 0; i < best_p; ++i) layer_[seq[best_s + j * best_p + i]] = LayerKey{"repeated block", static_cast<int>(j)};
  }

  void collapse() {
    assignLayers();
    std::map<std::string, std::map<int, std::vector<const Node*>>> layers;
    for (const Node* n : nodes_) {
      auto it = layer_.find(n);
      if (it != layer_.end()) layers[it->second.prefix][it->second.index].push_back(n);
    }
    for (auto& [prefix, by_index] : layers) {
      std::map<int, std::string> sig;
      for (auto& [idx, ns] : by_index) {
        std::unordered_map<const Node*, size_t> local;
        for (size_t k = 0; k < ns.size(); ++k) local[ns[k]] = k;
        std::string s;
        for (const Node* n : ns) {
          s += n->target + "<";
          for (const Value* v : n->operands()) {
            auto l = v->producer() ? local.find(v->producer()) : local.end();
            s += l == local.end() ? std::string("X,") : fmt::format("{}.{},", l->second, v->resultIndex());
          }
          s += ">;";
        }
        sig[idx] = std::move(s);
      }
      // Runs of consecutive layers with equal structure.
      auto it = by_index.begin();
      while (it != by_index.end()) {
        auto run_end = std::next(it);
        int last = it->first;
        while (run_end != by_index.end() && run_end->first == last + 1 && sig[run_end->first] == sig[it->first]) {
          last = run_end->first;
          ++run_end;
        }
        int count = last - it->first + 1;
        const char* sep = prefix.find(' ') != std::string::npos ? " " : ".";
        std::string cluster = fmt::format("{}{}{}", prefix, sep, it->first);
        cluster_label_[cluster] =
            count > 1 ? fmt::format("{}{}{} .. {}   \u00d7{}", prefix, sep, it->first, last, count) : cluster;
        const auto& rep_nodes = it->second;
        // A structurally found block that does not repeat is no layer: no cluster.
        bool structural = prefix.find(' ') != std::string::npos;
        for (const Node* n : rep_nodes) {
          if (!structural || count > 1) cluster_of_[n] = cluster;
          instance_[n] = it->first;
          run_of_[n] = cluster;
        }
        for (auto j = std::next(it); j != run_end; ++j) {
          for (size_t k = 0; k < j->second.size(); ++k) {
            rep_[j->second[k]] = rep_nodes[k];
            instance_[j->second[k]] = j->first;
            run_of_[j->second[k]] = cluster;
          }
        }
        if (count > 1) collapsed_runs_[cluster] = count;
        it = run_end;
      }
    }
  }

  void placeNotes() {
    for (const SiteNote& s : opts_.notes) {
      if (s.applied) continue;
      std::string line = s.pattern.empty() ? s.reason : s.pattern + ": " + s.reason;
      auto it = by_name_.find(s.node);
      if (it == by_name_.end() || skip_.count(it->second)) {
        std::string u = (s.node.empty() ? "" : s.node + ": ") + line;
        if (std::find(unplaced_.begin(), unplaced_.end(), u) == unplaced_.end() && unplaced_.size() < 30)
          unplaced_.push_back(u);
        continue;
      }
      const Node* r = repOf(it->second);
      if (line.size() > 110) line = line.substr(0, 107) + "...";
      auto& lines = notes_[r];
      auto f = std::find_if(lines.begin(), lines.end(), [&](const auto& p) { return p.first == line; });
      if (f == lines.end()) lines.emplace_back(line, 1);
      else f->second++;
      unfused_.insert(r);
    }
  }

  void buildEdges() {
    std::set<std::string> seen;
    for (const Node* u : nodes_) {
      if (skip_.count(u)) continue;
      const Node* du = repOf(u);
      std::vector<Value*> ops = u->operands();
      for (const Value* v : ops) {
        if (!v->isTensor()) continue;
        std::string src;
        const Node* p = v->producer();
        if (!p) {
          auto info = input_info_.find(v);
          if (info != input_info_.end()) {
            if (!rep_.count(u)) {
              std::string pname = shortParamName(*info->second);
              auto& ps = params_[u];
              if (std::find(ps.begin(), ps.end(), pname) == ps.end()) ps.push_back(pname);
            }
            continue;
          }
          src = inputId(v);
        } else {
          if (skip_.count(p)) continue;
          const Node* dp = repOf(p);
          bool cross_layer = run_of_.count(u) && run_of_.count(p) && run_of_.at(u) == run_of_.at(p) &&
                             instance_.at(u) != instance_.at(p);
          if (!cross_layer && rep_.count(u) && rep_.count(p)) continue;  // a copy of the representative's edge
          if (cross_layer) {
            if (!collapsed_runs_.count(run_of_.at(u))) {
              // Layers not collapsed: an ordinary edge between two drawn layers.
            } else {
              std::string key = nodeId(dp) + ">" + nodeId(du) + "next";
              if (seen.insert(key).second)
                edges_.push_back(fmt::format("{} -> {} [style=dashed, color=\"#868e96\", constraint=false, "
                                             "label=\"next layer\", fontsize=9, fontcolor=\"#868e96\"];",
                                             nodeId(dp), nodeId(du)));
              continue;
            }
          }
          src = nodeId(dp);
        }
        std::string attrs;
        if (opts_.shapes) attrs = fmt::format(" [label={}, fontsize=9, fontcolor=\"#495057\"]", dotQuote(" " + ir::typeStr(*v)));
        std::string key = src + ">" + nodeId(du) + attrs;
        if (seen.insert(key).second) edges_.push_back(fmt::format("{} -> {}{};", src, nodeId(du), attrs));
      }
    }
  }

  // A note beside a node whose candidate site did not fuse (in the node's cluster, ranked
  // next to it).
  void emitNote(const Node* n, std::string& out, const char* indent) {
    auto it = notes_.find(n);
    if (it == notes_.end()) return;
    std::string text;
    for (const auto& [line, k] : it->second) text += (k > 1 ? fmt::format("({}x) ", k) : "") + line + "\\l";
    std::string esc;
    for (char c : text) {
      if (c == '"') esc += '\\';
      esc += c;
    }
    std::string id = nodeId(n) + "_note";
    out += fmt::format("{}{} [shape=note, style=filled, fillcolor=\"#fff5f5\", color=\"#e03131\", fontcolor=\"#c92a2a\", "
                       "fontsize=9, margin=\"0.08,0.02\", label=\"not fused:\\l{}\"];\n",
                       indent, id, esc);
    out += fmt::format("{}{{rank=same; {}; {}}}\n", indent, id, nodeId(n));
    out += fmt::format("{}{} -> {} [style=dotted, arrowhead=none, color=\"#e03131\"];\n", indent, nodeId(n), id);
  }

  void emitNode(const Node* n, std::string& out, const char* indent) {
    emitNodeBox(n, out, indent);
    emitNote(n, out, indent);
  }

  void emitNodeBox(const Node* n, std::string& out, const char* indent) {
    Style st = classStyle(*n);
    std::string fill = st.fill, border = st.border;
    double pen = st.penwidth;
    std::string style = "filled";
    std::string extra;
    std::string region_tag;
    if (diff_) {
      auto it = diff_->region_of.find(n);
      if (it != diff_->region_of.end()) {
        const DiffRegion& r = diff_->regions[it->second];
        region_tag = fmt::format("{} #{}", side_a_ ? "removed" : "new", r.id);
        if (side_a_) {
          border = "#e03131";
          if (opClass(*n) == OpClass::Aten) fill = "#ffe3e3";
          style = "filled,dashed";
        } else {
          border = "#2f9e44";
          if (opClass(*n) == OpClass::Aten) fill = "#d3f9d8";
        }
        pen = 3;
      }
    }
    if (unfused_.count(n)) {
      border = "#e03131";
      pen = 2.5;
      extra = ", peripheries=2";
    }
    std::string lbl = fmt::format("<<b>{}</b><br/><font point-size=\"9\">{}</font>", htmlEscape(opTitle(*n)), htmlEscape(n->name));
    auto p = params_.find(n);
    if (p != params_.end()) {
      std::string ps;
      for (size_t i = 0; i < p->second.size() && i < 4; ++i) ps += (i ? ", " : "") + p->second[i];
      if (p->second.size() > 4) ps += ", ...";
      lbl += fmt::format("<br/><font point-size=\"8\" color=\"#868e96\">{}</font>", htmlEscape(ps));
    }
    if (!region_tag.empty())
      lbl += fmt::format("<br/><font point-size=\"8\" color=\"{}\">{}</font>", border, htmlEscape(region_tag));
    lbl += ">";
    std::string tooltip = nodeText(*n, 300);
    std::string loc = locText(*n);
    if (!loc.empty()) tooltip += "  @ " + loc;
    out += fmt::format("{}{} [label={}, shape=box, style=\"{}\", fillcolor=\"{}\", color=\"{}\", penwidth={}{}, tooltip={}];\n",
                       indent, nodeId(n), lbl, style, fill, border, pen, extra, dotQuote(tooltip));
  }

  const Graph& g_;
  const DrawOptions& opts_;
  std::string prefix_;
  const GraphDiff* diff_;
  bool side_a_;
  std::vector<const Node*> nodes_;
  std::unordered_map<const Node*, size_t> pos_;
  std::unordered_map<std::string, const Node*> by_name_;
  std::unordered_map<const Value*, size_t> input_pos_;
  std::unordered_map<const Value*, const ir::GraphInput*> input_info_;
  std::vector<const Value*> user_inputs_;
  std::set<const Node*> skip_;
  std::unordered_map<const Node*, LayerKey> layer_;
  std::unordered_map<const Node*, const Node*> rep_;        // hidden layer node -> its representative
  std::unordered_map<const Node*, int> instance_;           // layer index of layer nodes
  std::unordered_map<const Node*, std::string> run_of_;     // cluster of the run a node belongs to
  std::unordered_map<const Node*, std::string> cluster_of_;  // drawn node -> cluster
  std::map<std::string, std::string> cluster_label_;
  std::map<std::string, int> collapsed_runs_;
  std::map<const Node*, std::vector<std::string>> params_;
  std::map<const Node*, std::vector<std::pair<std::string, int>>> notes_;
  std::set<const Node*> unfused_;
  std::vector<std::string> unplaced_;
  std::vector<std::string> edges_;
};

std::string legend(bool with_diff, bool with_notes) {
  std::string out = "  subgraph cluster_legend {\n    label=\"legend\"; fontsize=10; style=rounded; color=\"#ced4da\";\n";
  auto item = [&](const char* id, const char* text, const char* fill, const char* border, const char* extra) {
    out += fmt::format("    {} [label=\"{}\", shape=box, style=\"{}\", fillcolor=\"{}\", color=\"{}\", fontsize=10{}];\n", id,
                       text, std::strcmp(extra, "dashed") == 0 ? "filled,dashed" : "filled", fill, border,
                       std::strcmp(extra, "dashed") == 0 ? ", penwidth=3" : extra);
  };
  item("legend_canonical", "canonical op", "#cfe2ff", "#1c7ed6", ", penwidth=1.5");
  item("legend_fused", "fused op", "#ffd8a8", "#e8590c", ", penwidth=2.5");
  item("legend_custom", "custom op", "#e5dbff", "#7048e8", "");
  item("legend_aten", "ATen op", "#ffffff", "#495057", "");
  std::string chain = "legend_canonical -> legend_fused -> legend_custom -> legend_aten";
  if (with_notes) {
    item("legend_unfused", "not fused", "#ffffff", "#e03131", ", penwidth=2.5, peripheries=2");
    chain += " -> legend_unfused";
  }
  if (with_diff) {
    item("legend_removed", "removed", "#ffe3e3", "#e03131", "dashed");
    out += "    legend_new [label=\"new\", shape=box, style=filled, fillcolor=\"#d3f9d8\", color=\"#2f9e44\", penwidth=3, "
           "fontsize=10];\n";
    chain += " -> legend_removed -> legend_new";
  }
  out += "    " + chain + " [style=invis];\n  }\n";
  return out;
}

std::string header(const std::string& title) {
  std::string out = "digraph fxfuse {\n";
  out += "  graph [rankdir=TB, nodesep=0.25, ranksep=0.35, fontname=\"Helvetica\", fontsize=14, labelloc=t";
  if (!title.empty()) out += ", label=" + dotQuote(title);
  out += "];\n";
  out += "  node [fontname=\"Helvetica\", fontsize=11, margin=\"0.12,0.04\", height=0.3];\n";
  out += "  edge [color=\"#495057\", arrowsize=0.6];\n";
  return out;
}

bool hasUnapplied(const DrawOptions& o) {
  return std::any_of(o.notes.begin(), o.notes.end(), [](const SiteNote& s) { return !s.applied; });
}

void checkSize(size_t n, const DrawOptions& opts) {
  if (opts.max_nodes && n > opts.max_nodes)
    fail("picture would have {} nodes after collapsing repeated layers (limit {}); Graphviz output would be unreadable. "
         "Raise the limit with --max-nodes",
         n, opts.max_nodes);
}

}  // namespace

std::string graphToDot(const Graph& g, const DrawOptions& opts) {
  Picture p(g, opts, "g", opts.diff, opts.diff_side_a);
  checkSize(p.drawn(), opts);
  std::string out = header(opts.title);
  if (opts.legend) out += legend(opts.diff != nullptr, hasUnapplied(opts));
  p.emit(out);
  out += "}\n";
  return out;
}

size_t drawnNodeCount(const Graph& g, const DrawOptions& opts) { return Picture(g, opts, "g", nullptr, false).drawn(); }

std::string sideBySideDot(const GraphDiff& d, const DrawOptions& before, const DrawOptions& after) {
  Picture pa(*d.a, before, "a", &d, true);
  Picture pb(*d.b, after, "b", &d, false);
  checkSize(pa.drawn() + pb.drawn(), before);
  std::string out = header(before.title);
  if (before.legend) out += legend(true, hasUnapplied(after) || hasUnapplied(before));
  out += "  subgraph cluster_before {\n  label=\"before\"; fontsize=16; color=\"#ced4da\";\n";
  pa.emit(out);
  out += "  }\n  subgraph cluster_after {\n  label=\"after\"; fontsize=16; color=\"#ced4da\";\n";
  pb.emit(out);
  out += "  }\n}\n";
  return out;
}

std::string dotProgram() {
  if (const char* env = std::getenv("FXFUSE_DOT"); env && *env) return access(env, X_OK) == 0 ? env : "";
  const char* path = std::getenv("PATH");
  std::string p = path && *path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(start, end - start);
    if (!dir.empty()) {
      std::string cand = dir + "/dot";
      if (access(cand.c_str(), X_OK) == 0) return cand;
    }
    start = end + 1;
  }
  return {};
}

namespace {

// Runs `dot -T<format>` writing to `tmp` (a path in a private directory); `out_path` names
// the final output in messages.
void runDot(const std::string& dot, const std::string& format, const std::string& tmp, const std::string& out_path) {
  std::string prog = dotProgram();
  if (prog.empty())
    fail("{}: Graphviz `dot` not found (install the Debian package `graphviz`, or write .dot output)", out_path);
  char errname[] = "/tmp/fxfuse-dot-XXXXXX";
  int errfd = mkstemp(errname);
  if (errfd < 0) fail("{}: cannot create a temporary file: {}", out_path, std::strerror(errno));
  unlink(errname);
  int in[2];
  if (pipe(in) != 0) fail("{}: pipe failed: {}", out_path, std::strerror(errno));
  pid_t pid = fork();
  if (pid < 0) fail("{}: fork failed: {}", out_path, std::strerror(errno));
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(errfd, 2);
    close(in[0]);
    close(in[1]);
    std::string fmt_arg = "-T" + format;
    std::string out_arg = "-o" + tmp;
    execl(prog.c_str(), "dot", fmt_arg.c_str(), out_arg.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(in[0]);
  signal(SIGPIPE, SIG_IGN);
  size_t off = 0;
  while (off < dot.size()) {
    ssize_t w = write(in[1], dot.data() + off, dot.size() - off);
    if (w < 0) {
      if (errno == EINTR) continue;
      break;
    }
    off += static_cast<size_t>(w);
  }
  close(in[1]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string err;
  lseek(errfd, 0, SEEK_SET);
  char buf[4096];
  ssize_t r;
  while ((r = read(errfd, buf, sizeof buf)) > 0) err.append(buf, static_cast<size_t>(r));
  close(errfd);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::filesystem::remove(tmp);
    while (!err.empty() && (err.back() == '\n' || err.back() == '\r')) err.pop_back();
    size_t nl = err.find('\n');
    if (nl != std::string::npos) err = err.substr(0, nl);
    fail("{}: Graphviz dot failed (exit {}): {}", out_path, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
         err.empty() ? "no message" : err);
  }
}

// The rendered bytes: dot writes into a private temporary directory (never next to the
// output, where a planted name could redirect it), removed afterwards.
std::string renderDotBytes(const std::string& dot, const std::string& format, const std::string& out_path) {
  char dir[] = "/tmp/fxfuse-dot-XXXXXX";
  if (!mkdtemp(dir)) fail("{}: cannot create a temporary directory: {}", out_path, std::strerror(errno));
  std::string bytes;
  try {
    std::string tmp = std::string(dir) + "/out." + format;
    runDot(dot, format, tmp, out_path);
    bytes = ir::readFile(tmp);
  } catch (...) {
    std::filesystem::remove_all(dir);
    throw;
  }
  std::filesystem::remove_all(dir);
  return bytes;
}

}  // namespace

void renderDot(const std::string& dot, const std::string& format, const std::string& out_path) {
  ir::writeOutputFile(out_path, renderDotBytes(dot, format, out_path));
}

std::string renderSvgInline(const std::string& dot) {
  std::string svg = renderDotBytes(dot, "svg", "inline SVG");
  size_t s = svg.find("<svg");
  if (s != std::string::npos) svg = svg.substr(s);
  // Inline SVG in HTML needs no namespace declarations; dropping them leaves no URL at all.
  for (const char* attr : {" xmlns=\"http://www.w3.org/2000/svg\"", " xmlns:xlink=\"http://www.w3.org/1999/xlink\""}) {
    size_t at = svg.find(attr);
    if (at != std::string::npos && at < svg.find('>')) svg.erase(at, std::strlen(attr));
  }
  return svg;
}

}  // namespace fxfuse::inspect
