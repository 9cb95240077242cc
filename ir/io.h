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
// Writes through writeOutputFile (ir/output_set.h): part of the command's all-or-nothing
// output set when one is open.
void saveModule(Module& m, const std::string& path);
// Reads a whole file. The returned string keeps at least kReadPadding zeroed bytes of
// capacity after its end (for in-place JSON parsing).
constexpr size_t kReadPadding = 64;
// Only regular files are read: a FIFO, directory or device is refused (without blocking).
std::string readFile(const std::string& path);
// Writes one file safely at once (exclusive temporary + fsync + rename; see output_set.h),
// outside any output set: for files other processes wait for (rendezvous, kernel cache).
// `force_mode` >= 0: the file's mode (0600 for private files), else the target's or 0666 & ~umask.
void writeFileAtomic(const std::string& path, const std::string& data, int force_mode = -1);

// Decompression budget for compressed input (gzip files, zip members): at most
// kMaxCompressionRatio times the compressed size, at least kMinDecompressedBudget, never more
// than kMaxDecompressedBytes. Readers check a declared size against it before allocating and
// stop decompressing when it is reached.
constexpr size_t kMaxCompressionRatio = 64;
constexpr size_t kMinDecompressedBudget = size_t{64} << 20;  // 64 MiB
constexpr size_t kMaxDecompressedBytes = size_t{4} << 30;    // 4 GiB
size_t decompressedBudget(size_t compressed_bytes);

}  // namespace fxfuse::ir
