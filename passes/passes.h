// Factories of every fxfuse pass (the registry in all_passes.cc lists them in one table).
// See docs/passes.md for what each pass requires and guarantees.
#pragma once

#include <memory>

#include "passes/toolkit/pass.h"

namespace fxfuse::passes {

using compiler::Pass;

std::unique_ptr<Pass> createFunctionalizePass();
std::unique_ptr<Pass> createNoopEliminationPass();
std::unique_ptr<Pass> createCanonicalizeOpsPass();
std::unique_ptr<Pass> createCanonicalizeNormPass();
std::unique_ptr<Pass> createCanonicalizeQuantPass();
std::unique_ptr<Pass> createCanonicalizeActivationPass();
std::unique_ptr<Pass> createDcePass();
std::unique_ptr<Pass> createCsePass();
std::unique_ptr<Pass> createCleanupPass();
std::unique_ptr<Pass> createAllReduceRmsNormFusionPass();
std::unique_ptr<Pass> createRmsNormQuantFusionPass();
std::unique_ptr<Pass> createSiluMulQuantFusionPass();
std::unique_ptr<Pass> createAttentionQuantFusionPass();

}  // namespace fxfuse::passes
