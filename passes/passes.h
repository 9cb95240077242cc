// Factories of the canonicalization and cleanup passes. The fusion passes register
// themselves (passes/fuse/pattern.h); passes/pipeline/registry.cc lists them all.
// See docs/passes.md for what each pass requires and guarantees.
#pragma once

#include <memory>

#include "passes/toolkit/pass.h"

namespace fxfuse::passes {

using compiler::Pass;

std::unique_ptr<Pass> createFunctionalizePass();
std::unique_ptr<Pass> createNoopEliminationPass();
std::unique_ptr<Pass> createComplexToRealPass();
std::unique_ptr<Pass> createCanonicalizeOpsPass();
std::unique_ptr<Pass> createCanonicalizeNormPass();
std::unique_ptr<Pass> createCanonicalizeQuantPass();
std::unique_ptr<Pass> createCanonicalizeActivationPass();
std::unique_ptr<Pass> createDcePass();
std::unique_ptr<Pass> createCsePass();
std::unique_ptr<Pass> createCleanupPass();
// serve/kv_cache.cc: opt-in (CompileOptions::kv_cache_dtype), after the fusions.
std::unique_ptr<Pass> createKvCachePass();

}  // namespace fxfuse::passes
