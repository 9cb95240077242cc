// Fuzz target: bare torch.export JSON (ir/importers/export_json.cc, importExportJson).
#include "ir/importers/export_json.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string json(reinterpret_cast<const char*>(data), size);
  return fxfuse::fuzz::run([&] { return fxfuse::ir::importExportJson(json, "fuzz.json", ""); });
}
