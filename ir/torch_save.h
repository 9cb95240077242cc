// Sample inputs in torch.save's format, for archives fxfuse writes from graphs that did not
// come with any (FX text dumps, .fxg, post-grad JSON): torch.export.load requires
// `data/sample_inputs/<model>.pt`. docs/pt2-output.md describes the layout.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ir/graph.h"

namespace fxfuse::ir {

// The records of a torch.save archive (names relative to its `archive/` folder: data.pkl,
// data/<key>, version, ...) holding `((inputs...), {})` for the user inputs of `g`: every
// tensor a zero of its dtype at the symbols' hints, stored as one element broadcast (stride
// 0) so that the file stays small; SymInt inputs are their hints. `where` names the output in
// errors (a symbol without a hint or range, a dtype torch cannot save).
std::vector<std::pair<std::string, std::string>> zeroSampleInputRecords(const Graph& g, const SymbolTable& symbols,
                                                                         const std::string& where);

}  // namespace fxfuse::ir
