// Validation at the door: run on every module right after import, before any pass, so
// that nothing past the readers sees a malformed graph. Each problem is one FxError line
// naming the file, the graph/node/value (or symbol, or weight) and what is wrong.
//
// validateModule (every command, run by loadModule):
//   * symbols: min <= max, the hint inside the range;
//   * every tensor type (graph inputs, node results, weights): no infinite (`oo`) or negative constant size,
//     stride or storage offset; at the symbols' hints, element count, storage extent and
//     byte count fit int64 (checked_math.h);
//   * weights with a payload: the strided view stays inside the payload's bytes.
// validateNodesAgainstSchemas (commands that compute on the graph: compile, verify, run,
// bench, lowering):
//   * every op node has a schema (built-in, or carried in the file); unknown ops are refused;
//   * every required argument is present, every tensor argument is a tensor value (or None
//     where the schema allows it), no string/op/graph where a number goes;
//   * the pieces of a split (split, split_with_sizes, chunk, unbind) have the rank the op
//     gives them (splitPieceRank).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "ir/graph.h"

namespace fxfuse::ir {

void validateModule(const Module& m, const std::string& file);
void validateNodesAgainstSchemas(const Module& m, const std::string& file);

// The rank of each piece of a split-family op whose input has rank `input_rank`: the input's
// (split, split_with_sizes, chunk), one less (unbind); nullopt for any other op.
std::optional<size_t> splitPieceRank(std::string_view target, size_t input_rank);

}  // namespace fxfuse::ir
