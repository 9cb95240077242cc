// The graph `fxfuse compile` compiles when given no input file: a small vLLM-shaped
// Llama-style decoder (compiler/default_graph.fxg, embedded at build time).
#pragma once

namespace fxfuse::compiler {

const char* defaultGraphText();
inline const char* defaultGraphName() {
  return "<default graph: 2-layer Llama-style decoder, vLLM post-grad form (custom ops, FP8 static quant, "
         "rotary + unified attention); compiler/default_graph.fxg>";
}

}  // namespace fxfuse::compiler
