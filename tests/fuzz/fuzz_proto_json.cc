// Fuzz target: fxfuse protobuf JSON (ir/proto_io.cc, moduleFromJson).
#include "ir/proto_io.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string json(reinterpret_cast<const char*>(data), size);
  return fxfuse::fuzz::run([&] { return fxfuse::ir::moduleFromJson(json, "fuzz.json"); });
}
