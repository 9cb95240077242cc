// Recognizes what a file holds from its bytes, whatever its name: torch.export archives,
// gzip, fxfuse and torch.export JSON, .fxg text, FX readable text, launch plans (text and
// binary protobuf) and fxfuse protobuf modules. Loaders dispatch on this, and an unknown
// file is reported with the list of formats that were tried.
#pragma once

#include <string>
#include <string_view>

namespace fxfuse::ir {

enum class FileFormat {
  kZipArchive,    // torch.export .pt2 (zip)
  kGzip,          // any of these, gzip-compressed
  kFxfuseJson,    // fxfuse protobuf JSON ("graphs")
  kExportJson,    // bare torch.export JSON ("graph_module")
  kFxg,           // fxfuse text ("fxfuse.module {")
  kFxText,        // FX readable text (GraphModule.print_readable / post-grad dumps)
  kPlanText,      // launch plan, protobuf text format
  kPlanBinary,    // launch plan, binary protobuf
  kModuleBinary,  // fxfuse module, binary protobuf
  kUnknown,
};

// `bytes` may be the whole file or its first kSniffBytes (binary protobuf is checked as far
// as the prefix reaches).
constexpr size_t kSniffBytes = 64 * 1024;
FileFormat sniffFormat(std::string_view bytes);
// Reads at most kSniffBytes of `path` (FxError naming the file when it cannot be read).
FileFormat sniffFile(const std::string& path);

const char* formatName(FileFormat f);
// "torch.export archive (zip), gzip, ..." : every format sniffFormat knows, for error messages.
std::string knownFormats();

}  // namespace fxfuse::ir
