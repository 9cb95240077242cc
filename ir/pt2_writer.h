// Writes a module as a torch.export PT2 archive that `torch.export.load` accepts.
//
// The archive has torch's layout (`<root>/archive_format`, `archive_version`, `byteorder`,
// `.data/version`, `.data/serialization_id`, `models/model.json`, `data/...`); the
// ExportedProgram JSON is generated from the IR (graph, value tables, signature, range
// constraints). What the IR does not keep (module_call_graph, opset, guards, weights,
// constants, sample inputs) is carried over from the input archive when the module came
// from one. fxfuse's canonical and fused ops are calls into the `fxfuse` torch op library
// (tools/fxfuse_torch); with `vllm_op_names` the fused ops are written as vLLM's `_C` /
// `vllm` custom ops wrapped in `auto_functionalized`. docs/pt2-output.md has the details.
#pragma once

#include <string>

#include "ir/graph.h"

namespace fxfuse::ir {

struct Pt2WriteOptions {
  // Write fused ops under vLLM's names and signatures (`_C.rms_norm_static_fp8_quant`, ...).
  bool vllm_op_names = false;
};

// The archive bytes. Throws FxError (one line naming the output, node and op) for what
// the torch.export format cannot express.
std::string pt2ArchiveBytes(const Module& m, const std::string& out_path, const Pt2WriteOptions& opts = {});

// The ExportedProgram JSON text alone (models/model.json of the archive).
std::string pt2ProgramJson(const Module& m, const std::string& out_path, const Pt2WriteOptions& opts = {});

// pt2ArchiveBytes written atomically to `path`.
void savePt2Archive(const Module& m, const std::string& path, const Pt2WriteOptions& opts = {});

}  // namespace fxfuse::ir
