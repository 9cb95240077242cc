// Fusion patterns and the one driver that runs them.
//
// A fusion pattern starts at every node of one canonical op (its anchor) and does three
// things, in this order:
//   match   — find the rest of the subgraph around the anchor (the consumer quant, the
//             norm after an all-reduce), or say that the shape of the graph is not there;
//   check   — the conditions a fused kernel needs (dtypes, scale form, sizes, users), in a
//             fixed order so that the first failing one is the reason `explain` shows;
//   rewrite — replace the matched nodes by one fused op of the op table.
// A site that is not fused gets a `Rejection` (a typed reason, never an empty string).
//
// A fusion pass is a name, a summary and an ordered list of patterns; it registers itself
// with `FusionRegistration` in its own file, and its priority places it in the default
// pipeline (vLLM's order: all-reduce first, attention last). Adding a fusion is one new
// file in this folder plus the fused op's row in `ir/op_table.cc` (docs/architecture.md).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ir/graph.h"
#include "passes/toolkit/options.h"
#include "passes/toolkit/pass.h"
#include "passes/toolkit/rewriter.h"

namespace fxfuse::passes::fuse {

// Why a candidate site is not fused: the first failing condition, in words.
struct Rejection {
  std::string reason;
};

// A check passes (nullopt) or names its failure.
using CheckResult = std::optional<Rejection>;

// What a rewrite made: the fused op's name (the counter and the decision's pattern), the
// new node, and a note for `explain`.
struct Applied {
  std::string fused_op;
  const ir::Node* created = nullptr;
  std::string note;
};

// The graph and options a pattern sees while matching and checking.
struct FusionScope {
  ir::Graph& graph;
  const compiler::CompileOptions& options;
};

class FusionPattern {
 public:
  virtual ~FusionPattern() = default;
  // The name rejections are filed under ("rms_norm_quant").
  virtual std::string_view name() const = 0;
  // The canonical op every candidate site starts from ("rms_norm").
  virtual std::string_view anchorOp() const = 0;
  // Matches, checks and rewrites the site at `anchor`, or says why not.
  virtual std::variant<Applied, Rejection> apply(ir::Node& anchor, const FusionScope& scope,
                                                 compiler::Rewriter& rw) const = 0;
};

// The three steps over a pattern-specific `Site` (the matched nodes and what the checks
// derive from them).
template <class Site>
class SitePattern : public FusionPattern {
 public:
  std::variant<Applied, Rejection> apply(ir::Node& anchor, const FusionScope& scope,
                                         compiler::Rewriter& rw) const final {
    std::variant<Site, Rejection> matched = match(anchor, scope);
    if (auto* r = std::get_if<Rejection>(&matched)) return std::move(*r);
    Site& site = std::get<Site>(matched);
    if (CheckResult failed = check(site, scope)) return std::move(*failed);
    return rewrite(site, rw);
  }

 protected:
  virtual std::variant<Site, Rejection> match(ir::Node& anchor, const FusionScope& scope) const = 0;
  virtual CheckResult check(Site& site, const FusionScope& scope) const = 0;
  virtual Applied rewrite(const Site& site, compiler::Rewriter& rw) const = 0;
};

// One fusion pass of the registry.
struct FusionPassSpec {
  std::string name;     // kebab-case pass name ("rmsnorm-quant-fusion")
  std::string summary;  // one line for --list-passes
  int priority = 0;     // position in the default pipeline, lowest first
  std::function<std::vector<std::unique_ptr<FusionPattern>>()> patterns;  // in the order they run
};

// The `patterns` of a spec with one default-constructed pattern.
template <class P>
std::vector<std::unique_ptr<FusionPattern>> onePattern() {
  std::vector<std::unique_ptr<FusionPattern>> patterns;
  patterns.push_back(std::make_unique<P>());
  return patterns;
}

// Registers a fusion pass at static-initialization time (one per fusion file).
struct FusionRegistration {
  explicit FusionRegistration(FusionPassSpec spec);
};

// Every registered fusion pass, by priority.
const std::vector<FusionPassSpec>& fusionPasses();

// The pass that runs one spec's patterns over the graph.
std::unique_ptr<compiler::Pass> createFusionPass(const FusionPassSpec& spec);

}  // namespace fxfuse::passes::fuse
