// The pass interface: a pass rewrites one graph and says whether it changed it; the
// PassContext carries the compile options, the per-pass match counters and the decision
// log (`fxfuse explain`, the report's unfused-site reasons).
//
// Three outcomes are kept apart: "no match" is a Decision with applied=false (never an
// error); bad input is an FxError; a broken invariant is a thrown std::logic_error.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace fxfuse::compiler {

struct CompileOptions;

// One decision about one candidate site: a canonicalization or fusion that was applied, or
// the first condition that failed.
struct Decision {
  std::string pass;     // pass name ("rmsnorm-quant-fusion")
  std::string pattern;  // pattern or fusion name ("fused_add_rms_norm_quant", "rms_norm")
  std::string node;     // anchor node name
  bool applied = false;
  std::string reason;   // why not (first failing condition), or a note when applied
  std::string sources;  // applied: the original nodes the new node stands for (comma-separated)
};

class PassContext {
 public:
  PassContext(const CompileOptions& options, ir::Module& module) : options_(options), module_(module) {}

  const CompileOptions& options() const { return options_; }
  ir::Module& module() { return module_; }

  // Counts one applied rewrite under `counter` (a pattern or fusion name) for the running pass.
  void addMatch(const std::string& counter, int64_t n = 1) {
    counters_[counter] += n;
    matches_ += n;
  }
  void record(Decision d) {
    d.pass = pass_name_;
    decisions_.push_back(std::move(d));
  }
  // `created` is the node the rewrite made; its `fused_from` meta lists the source nodes.
  void applied(const std::string& pattern, const ir::Node* created, std::string note = {}) {
    auto it = created->meta.find("fused_from");
    record(Decision{"", pattern, created->name, true, std::move(note),
                    it == created->meta.end() ? std::string() : it->second});
  }
  void rejected(const std::string& pattern, const std::string& node, std::string reason) {
    record(Decision{"", pattern, node, false, std::move(reason), {}});
  }

  // Used by the pipeline.
  void beginPass(std::string name) {
    pass_name_ = std::move(name);
    matches_ = 0;
    counters_.clear();
  }
  int64_t matches() const { return matches_; }
  const std::map<std::string, int64_t>& counters() const { return counters_; }
  std::vector<Decision>& decisions() { return decisions_; }

 private:
  const CompileOptions& options_;
  ir::Module& module_;
  std::string pass_name_;
  int64_t matches_ = 0;
  std::map<std::string, int64_t> counters_;
  std::vector<Decision> decisions_;
};

class Pass {
 public:
  virtual ~Pass() = default;
  // Stable kebab-case name: --passes, --disable-pass, --print-after, dump file names.
  virtual std::string_view name() const = 0;
  // One line for `fxfuse compile --list-passes` and docs/passes.md.
  virtual std::string_view summary() const = 0;
  // Returns whether `g` changed.
  virtual bool run(ir::Graph& g, PassContext& ctx) = 0;
};

struct PassInfo {
  std::string name;
  std::string summary;
  std::function<std::unique_ptr<Pass>()> create;
};


}  // namespace fxfuse::compiler
