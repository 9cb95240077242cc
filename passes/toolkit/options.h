// Options of a compile (what `fxfuse compile` flags set).
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>
#include "ir/world_size.h"

namespace fxfuse::compiler {

struct CompileOptions {
  // Pass names in order; empty = defaultPipeline().
  std::vector<std::string> passes;
  // Pass names skipped even when listed.
  std::vector<std::string> disabled;
  // Tensor-parallel world size the graph runs with (all-reduce fusion needs 2, 4 or 8).
  int world_size = kDefaultWorldSize;
  // All-reduce fusion size cap in bytes per world size (T * H * element size must fit).
  // Defaults: vLLM's SM90 table {2: 64 MiB, 4: 2 MiB, 8: 1 MiB}.
  std::map<int, int64_t> allreduce_max_bytes = defaultAllReduceMaxBytes();
  // The kv-cache pass (off when empty): the paged KV cache's dtype, "bf16" / "f16" (the
  // model dtype) or "fp8" (float8_e4m3fn with per-layer k/v scales), and its block size.
  std::string kv_cache_dtype;
  int64_t kv_block_size = kDefaultKvBlockSize;
  static constexpr int64_t kDefaultKvBlockSize = 16;
  // Only fuse RMSNorms with eps 1e-5 or 1e-6 (what vLLM registers patterns for).
  bool vllm_eps_only = false;
  // Run the verifier after every pass (tests, debug). Defaults to on in debug builds.
  bool verify_each_pass = kDebugBuild;
  // Also check that each pass's "changed" result is honest: the printed graph differs
  // exactly when the pass says it changed it (XLA's test-harness check). Costly: tests only.
  bool check_change_flags = false;
  // Print the graph after these passes ("all" for every pass) to `print_stream`.
  std::vector<std::string> print_after;
  std::ostream* print_stream = nullptr;
  // Write DIR/NN.after.<pass>.fxg after every pass (00.input.fxg first).
  std::string dump_dir;

  static std::map<int, int64_t> defaultAllReduceMaxBytes();
#ifdef NDEBUG
  static constexpr bool kDebugBuild = false;
#else
  static constexpr bool kDebugBuild = true;
#endif
};

}  // namespace fxfuse::compiler
