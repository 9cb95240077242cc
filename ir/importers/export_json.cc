#include "ir/importers/export_json.h"

#include "ir/status.h"

namespace fxfuse::ir {

std::unique_ptr<Module> importExportJson(std::string_view, const std::string& path, const std::string&) {
  fail("{}: torch.export import is being written", path);
}
std::unique_ptr<Module> importExportArchive(const std::string&, const std::string& path) {
  fail("{}: torch.export import is being written", path);
}

}  // namespace fxfuse::ir
