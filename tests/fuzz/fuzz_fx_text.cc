// Fuzz target: FX readable text (ir/importers/fx_text.cc).
#include "ir/importers/fx_text.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)fxfuse::ir::looksLikeFxText(text);
  return fxfuse::fuzz::run([&] { return fxfuse::ir::importFxText(text, "fuzz.txt"); });
}
