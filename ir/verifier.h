// Structural checks on a Module: SSA (every value defined once, before its uses, in the
// same graph), use lists consistent with arguments, tensor types well formed (stride rank
// equals shape rank, known dtype), every symbol used is in the symbol table, graph
// references in range. Run by tests and after every pass in debug pipelines.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace fxfuse::ir {

// Returns the problems found (empty when the module is valid).
std::vector<std::string> verifyModule(const Module& m);
// Throws FxError with the first problem, prefixed by `context`.
void verifyOrThrow(const Module& m, const std::string& context);

}  // namespace fxfuse::ir
