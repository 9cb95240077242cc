// The graph `fxfuse compile` compiles when given no input file: a small vLLM-shaped
// Llama-style decoder (compiler/default_graph.fxg, embedded at build time).
#pragma once

namespace fxfuse::compiler {

const char* defaultGraphText();
inline const char* defaultGraphName() { return "<default graph: compiler/default_graph.fxg>"; }

}  // namespace fxfuse::compiler
