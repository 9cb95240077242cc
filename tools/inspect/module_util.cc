#include "tools/inspect/module_util.h"

#include "ir/proto_io.h"

namespace fxfuse::inspect {

std::unique_ptr<ir::Module> cloneModule(ir::Module& m) {
  fxfuse::ir::v1::Module pm;
  ir::moduleToProto(m, &pm);
  auto copy = ir::moduleFromProto(pm, m.producer.source_path.empty() ? "<copy>" : m.producer.source_path);
  copy->producer.source_path = m.producer.source_path;
  return copy;
}

}  // namespace fxfuse::inspect
