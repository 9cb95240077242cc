// The pass registry: every pass by name — the canonicalization and cleanup passes of this
// table, then the self-registered fusion passes by priority (docs/passes.md mirrors it).
#include "passes/pipeline/registry.h"

#include "passes/fuse/pattern.h"
#include "passes/passes.h"

namespace fxfuse::compiler {

const std::vector<PassInfo>& allPasses() {
  static const std::vector<PassInfo>* kPasses = [] {
    auto* v = new std::vector<PassInfo>();
    std::unique_ptr<Pass> (*factories[])() = {
        passes::createFunctionalizePass,
        passes::createNoopEliminationPass,
        passes::createComplexToRealPass,
        passes::createCanonicalizeOpsPass,
        passes::createCanonicalizeNormPass,
        passes::createCanonicalizeQuantPass,
        passes::createCanonicalizeActivationPass,
        passes::createDcePass,
        passes::createCsePass,
        passes::createCleanupPass,
        passes::createKvCachePass,
    };
    for (auto f : factories) {
      auto p = f();
      v->push_back(PassInfo{std::string(p->name()), std::string(p->summary()), f});
    }
    for (const auto& spec : passes::fuse::fusionPasses())
      v->push_back(PassInfo{spec.name, spec.summary, [&spec] { return passes::fuse::createFusionPass(spec); }});
    return v;
  }();
  return *kPasses;
}

const PassInfo* findPass(const std::string& name) {
  for (const auto& p : allPasses())
    if (p.name == name) return &p;
  return nullptr;
}

}  // namespace fxfuse::compiler
