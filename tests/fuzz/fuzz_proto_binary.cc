// Fuzz target: fxfuse binary protobuf (ir/proto_io.cc, moduleFromBinary).
#include "ir/proto_io.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  return fxfuse::fuzz::run([&] { return fxfuse::ir::moduleFromBinary(bytes, "fuzz.pb"); });
}
