// The tensor-parallel world size: the one default every command, the interpreter, lowering
// and the runtime start from, and the range they accept (1 to the fused all-reduce
// kernels' rank limit, kMaxAllReduceRanks; tools/cli/multigpu.cc asserts they agree).
#pragma once

#include <string_view>

#include "ir/status.h"

namespace fxfuse {

inline constexpr int kDefaultWorldSize = 1;
inline constexpr int kMaxWorldSize = 8;

// Throws FxError "WHAT N is not supported (1..8)" outside the range.
inline void checkWorldSize(long long world_size, std::string_view what) {
  if (world_size < 1 || world_size > kMaxWorldSize)
    fail("{} {} is not supported (1..{})", what, world_size, kMaxWorldSize);
}

}  // namespace fxfuse
