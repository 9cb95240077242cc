// Loading and saving modules.
//
// Input, recognized by content whatever the file's name (ir/sniff.h): torch.export archives
// (.pt2 zip), fxfuse protobuf JSON or bare torch.export JSON, fxfuse binary protobuf, .fxg
// text, FX readable text, any of these gzip-compressed. Output, by extension: `.fxg`,
// `.pb`, `.json`.
// Every failure is an FxError with a one-line message naming the file.
#pragma once

#include <memory>
#include <string>

#include "ir/graph.h"

namespace fxfuse::ir {

// Imports and validates at the door (ir/validate.h: symbols, sizes, strides, weights).
std::unique_ptr<Module> loadModule(const std::string& path);
// loadModule, then the IR verifier and every op node against its schema (unknown ops,
// missing or ill-typed arguments are refused): what commands that compute on a graph use.
std::unique_ptr<Module> loadModuleForCompute(const std::string& path);
// Writes atomically (temporary file + rename) so a failure never leaves a partial file.
void saveModule(Module& m, const std::string& path);
// Reads a whole file. The returned string keeps at least kReadPadding zeroed bytes of
// capacity after its end (for in-place JSON parsing).
constexpr size_t kReadPadding = 64;
std::string readFile(const std::string& path);
void writeFileAtomic(const std::string& path, const std::string& data);

}  // namespace fxfuse::ir
