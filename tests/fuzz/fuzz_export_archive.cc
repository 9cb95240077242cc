// Fuzz target: torch.export .pt2 / legacy zip archives (importExportArchive, via libzip).
#include "ir/importers/export_json.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  return fxfuse::fuzz::run([&] { return fxfuse::ir::importExportArchive(bytes, "fuzz.pt2"); });
}
