// Importer for torch.export archives and their JSON:
//  * torch >= 2.8 PT2 archives (`<root>/models/<name>.json`, weights metadata in
//    `<root>/data/weights/<name>_weights_config.json`),
//  * torch <= 2.7 flat zips (`serialized_exported_program.json`),
//  * bare ExportedProgram JSON.
// Schema majors 5 to 8 (unions as single-key objects; `$type/$value` is rejected with a
// clear message). Weight payloads are optional.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace fxfuse::ir {

// `path` names the file in error messages; `json` is the ExportedProgram JSON text.
// `member` names the zip member it came from ("" for a bare JSON file).
// `padded`: the caller guarantees 64 readable bytes after json.end() (ir::readFile does),
// so the text is parsed in place without a copy.
std::unique_ptr<Module> importExportJson(std::string_view json, const std::string& path, const std::string& member,
                                         bool padded = false);

// Reads a .pt2 / legacy zip archive from memory.
std::unique_ptr<Module> importExportArchive(const std::string& bytes, const std::string& path);

}  // namespace fxfuse::ir
