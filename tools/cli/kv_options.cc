// Serving-batch flags and the kv-cache reference graph (kv_options.h).
#include "tools/cli/kv_options.h"

#include "passes/pipeline/pipeline.h"

namespace fxfuse::cli {

void addKvBatchFlags(CLI::App* cmd, interp::KvBatchOptions& o) {
  cmd->add_option("--kv-batch", o.batch, "paged attention: sequences in the batch (default 4, at most T)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--kv-context", o.context,
                  "paged attention: context length of every sequence (default: varied decode contexts)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  cmd->add_option("--kv-query-len", o.query_len,
                  "paged attention: query tokens of every sequence (default: decode rows of 1 and one prefill)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
}

void compileKvReference(ir::Module& ref, const compiler::CompileOptions& co) {
  compiler::CompileOptions rco = co;
  rco.passes.clear();
  for (const auto& p : co.passes.empty() ? compiler::defaultPipelineFor(co) : co.passes)
    if (p.size() < 7 || p.compare(p.size() - 7, 7, "-fusion") != 0) rco.passes.push_back(p);
  compiler::compileModule(ref, rco);
}

}  // namespace fxfuse::cli
