// Raw tensor files for `fxfuse run`: `--input NAME=FILE` replaces a seeded graph input with
// little-endian data of the input's dtype and bound shape; `--save-outputs DIR` writes every
// tensor output as float32 little-endian plus DIR/outputs.json (name, dtype, shape, file), so
// outputs can be compared with another framework's (tools/zoo/compare_reference.py);
// `--save-inputs DIR` writes the inputs a run used in the format `--input` reads, plus
// DIR/inputs.json, so another framework can run on exactly them
// (examples/decode_step/torch_parity.py).
#pragma once

#include <set>
#include <string>
#include <vector>

#include "tools/interpreter/value.h"

namespace fxfuse::cli {

// The indices (into input_names) of the inputs that `specs` (NAME=FILE) give, so the
// interpreter does not make their seeded values (Interpreter::makeInputs); malformed specs and
// unknown names are left to applyInputFiles to report.
std::set<size_t> inputFileIndices(const std::vector<std::string>& specs, const std::vector<std::string>& input_names);

// Replaces inputs[i] for every NAME=FILE in `specs`; input_names[i] names inputs[i]; inputs[i]
// may be a placeholder without values (its shape and dtype say what the file must hold). Exit 2
// (one line) for a malformed spec, an unknown name, a non-tensor input or a size mismatch.
void applyInputFiles(const std::vector<std::string>& specs, const std::vector<std::string>& input_names,
                     std::vector<interp::RValue>& inputs);

struct SavedOutput {
  std::string name;
  const interp::Tensor* tensor = nullptr;  // null: not a tensor (skipped)
};

// Writes DIR/input_<i>.bin (the input's dtype, little-endian, row-major in its shape: what
// --input reads back) and DIR/inputs.json (index, name, dtype, shape, file) for every tensor
// input; DIR is created when missing.
void saveInputs(const std::string& dir, const std::vector<std::string>& input_names,
                const std::vector<interp::RValue>& inputs);

// Writes DIR/output_<i>.f32 and DIR/outputs.json; DIR is created when missing.
void saveOutputs(const std::string& dir, const std::vector<SavedOutput>& outputs);

}  // namespace fxfuse::cli
