// Module helpers for the inspection tools: a deep copy (to compile one copy and keep the
// other for the diff and the "before" picture).
#pragma once

#include <memory>

#include "ir/graph.h"

namespace fxfuse::inspect {

// Deep copy through the protobuf form: same nodes, names, types, meta and locations.
std::unique_ptr<ir::Module> cloneModule(ir::Module& m);

}  // namespace fxfuse::inspect
