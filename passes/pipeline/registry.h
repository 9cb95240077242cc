// The pass registry: every pass of passes/ by name, in pipeline order (docs/passes.md mirrors it).
#pragma once

#include <string>
#include <vector>

#include "passes/toolkit/pass.h"

namespace fxfuse::compiler {

// Every registered pass (registry.cc), and lookup by name (nullptr when unknown).
const std::vector<PassInfo>& allPasses();
const PassInfo* findPass(const std::string& name);

}  // namespace fxfuse::compiler
