#include "ir/importers/fx_text.h"

#include "ir/status.h"

namespace fxfuse::ir {

// Replaced by the full importer (in progress).
std::unique_ptr<Module> importFxText(std::string_view, const std::string& path) {
  fail("{}: FX readable text import is not available in this build", path);
}

bool looksLikeFxText(std::string_view text) {
  return text.find("def forward(") != std::string_view::npos;
}

}  // namespace fxfuse::ir
