// The fusion driver: runs a fusion pass's patterns, each over every node of its anchor op,
// and records one Decision per candidate site (applied, or the pattern's rejection).
#include <algorithm>

#include "passes/fuse/pattern.h"
#include "passes/toolkit/op_util.h"

namespace fxfuse::passes::fuse {
namespace {

std::vector<FusionPassSpec>& registry() {
  static auto* specs = new std::vector<FusionPassSpec>();
  return *specs;
}

class FusionPass : public compiler::Pass {
 public:
  explicit FusionPass(const FusionPassSpec& spec) : spec_(spec), patterns_(spec.patterns()) {}

  std::string_view name() const override { return spec_.name; }
  std::string_view summary() const override { return spec_.summary; }

  bool run(ir::Graph& g, compiler::PassContext& ctx) override {
    compiler::Rewriter rw(g);
    FusionScope scope{g, ctx.options()};
    bool changed = false;
    for (const auto& pattern : patterns_) {
      const std::string anchor = compiler::fxfuseTarget(std::string(pattern->anchorOp()));
      for (ir::Node* n : g.nodeList()) {
        if (!rw.alive(n) || n->target != anchor) continue;
        auto result = pattern->apply(*n, scope, rw);
        if (auto* r = std::get_if<Rejection>(&result)) {
          ctx.rejected(std::string(pattern->name()), n->name, std::move(r->reason));
          continue;
        }
        auto& a = std::get<Applied>(result);
        ctx.addMatch(a.fused_op);
        ctx.applied(a.fused_op, a.created, std::move(a.note));
        changed = true;
      }
    }
    rw.finish();
    return changed;
  }

 private:
  FusionPassSpec spec_;
  std::vector<std::unique_ptr<FusionPattern>> patterns_;
};

}  // namespace

FusionRegistration::FusionRegistration(FusionPassSpec spec) {
  auto& specs = registry();
  specs.push_back(std::move(spec));
  std::stable_sort(specs.begin(), specs.end(),
                   [](const FusionPassSpec& a, const FusionPassSpec& b) { return a.priority < b.priority; });
}

const std::vector<FusionPassSpec>& fusionPasses() { return registry(); }

std::unique_ptr<compiler::Pass> createFusionPass(const FusionPassSpec& spec) {
  return std::make_unique<FusionPass>(spec);
}

}  // namespace fxfuse::passes::fuse
