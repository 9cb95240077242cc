// Importer for FX readable text: what `GraphModule.print_readable()`,
// `graph.python_code(verbose=True)` and TORCH_COMPILE_DEBUG's `fx_graph_readable.py`
// write, with shape annotations such as `"bf16[s0, 4096][4096, 1]cuda:0"`.
// Shapes only: values carry dtype/shape (strides and device when annotated); a dump
// without annotations is rejected with an error naming the line.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace fxfuse::ir {

std::unique_ptr<Module> importFxText(std::string_view text, const std::string& path);

// True when `text` looks like an FX readable dump (a `def forward(` with annotated
// assignments), used to pick the importer for files without a telling extension.
bool looksLikeFxText(std::string_view text);

}  // namespace fxfuse::ir
