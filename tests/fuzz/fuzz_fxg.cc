// Fuzz target: the .fxg text parser (ir/fxg.cc, parseFxg).
#include "ir/fxg.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  return fxfuse::fuzz::run([&] { return fxfuse::ir::parseFxg(text, "fuzz.fxg"); });
}
