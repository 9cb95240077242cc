#include "passes/pipeline/pipeline.h"

#include <algorithm>
#include <chrono>
#include <filesystem>

#include <fmt/format.h>

#include "ir/fxg.h"
#include "ir/io.h"
#include "ir/lifted_scalar.h"
#include "ir/op_table.h"
#include "ir/output_set.h"
#include "ir/status.h"
#include "ir/verifier.h"
#include "passes/fuse/pattern.h"
#include "passes/pipeline/registry.h"
#include "passes/toolkit/op_util.h"

namespace fxfuse::compiler {

std::map<int, int64_t> CompileOptions::defaultAllReduceMaxBytes() {
  // vLLM's fi_allreduce_fusion defaults for SM90 (Hopper), in bytes.
  return {{2, int64_t{64} << 20}, {4, int64_t{2} << 20}, {8, int64_t{1} << 20}};
}

const std::vector<std::string>& defaultPipeline() {
  // Canonicalize, then every fusion pass in priority order, then cleanup.
  static const std::vector<std::string> kDefault = [] {
    std::vector<std::string> names = {"functionalize",
                                      "noop-elimination",
                                      "complex-to-real",
                                      "canonicalize-ops",
                                      "canonicalize-norm",
                                      "canonicalize-quant",
                                      "canonicalize-activation",
                                      "dce",
                                      "cse"};
    for (const auto& spec : passes::fuse::fusionPasses()) names.push_back(spec.name);
    names.push_back("cleanup");
    return names;
  }();
  return kDefault;
}

std::vector<std::string> defaultPipelineFor(const CompileOptions& opts) {
  std::vector<std::string> names = defaultPipeline();
  if (!opts.kv_cache_dtype.empty()) names.insert(names.end() - 1, "kv-cache");
  return names;
}

namespace {

// Zero counts for every op of one kind of the op table (opt-in ops only when present), then
// one per node of that op.
std::map<std::string, int64_t> countOps(const ir::Graph& g, ir::FxfuseOpKind kind) {
  std::map<std::string, int64_t> out;
  for (const auto& op : ir::fxfuseOps())
    if (op.kind == kind && !op.opt_in) out[std::string(op.name)] = 0;
  for (const auto& np : g.nodes()) {
    if (np->kind != ir::NodeKind::Fxfuse) continue;
    const ir::FxfuseOpInfo* op = ir::findFxfuseOp(np->target);
    if (op && op->kind == kind) ++out[std::string(op->name)];
  }
  return out;
}

bool isFusionPass(const std::string& name) {
  return name.size() > 7 && name.compare(name.size() - 7, 7, "-fusion") == 0;
}

}  // namespace

std::map<std::string, int64_t> countCanonicalOps(const ir::Graph& g) {
  return countOps(g, ir::FxfuseOpKind::Canonical);
}
std::map<std::string, int64_t> countFusedOps(const ir::Graph& g) { return countOps(g, ir::FxfuseOpKind::Fused); }

std::map<std::string, std::string> firstReasonLeftByNode(const CompileResult& r) {
  std::map<std::string, std::string> reasons;
  for (const Decision& d : r.decisions)
    if (!d.applied && !d.node.empty()) reasons.emplace(d.node, d.pass + ": " + d.reason);
  return reasons;
}

CompileResult compileModule(ir::Module& m, const CompileOptions& opts) {
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  const std::vector<std::string> names = opts.passes.empty() ? defaultPipelineFor(opts) : opts.passes;
  std::vector<const PassInfo*> infos;
  for (const auto& n : names) {
    const PassInfo* p = findPass(n);
    if (!p) {
      std::string known;
      for (const auto& q : allPasses()) known += (known.empty() ? "" : ", ") + q.name;
      fail("unknown pass '{}' (known passes: {})", n, known);
    }
    infos.push_back(p);
  }
  for (const auto& d : opts.disabled)
    if (!findPass(d)) fail("--disable-pass: unknown pass '{}'", d);

  CompileResult result;
  ir::Graph& g = m.entry();
  result.nodes_before = g.numNodes();
  PassContext ctx(opts, m);

  auto wants_print = [&](const std::string& n) {
    return std::find(opts.print_after.begin(), opts.print_after.end(), n) != opts.print_after.end() ||
           std::find(opts.print_after.begin(), opts.print_after.end(), "all") != opts.print_after.end();
  };
  if (!opts.dump_dir.empty()) {
    std::error_code ec;
    if (std::filesystem::exists(opts.dump_dir, ec) && !std::filesystem::is_directory(opts.dump_dir, ec))
      fail("--dump-dir {}: a file is in the way (expected a directory)", opts.dump_dir);
    ir::createOutputDirectories(opts.dump_dir);
    ir::writeOutputFile(opts.dump_dir + "/00.input.fxg", ir::printFxg(m));
  }

  bool snapshot_taken = false;
  int index = 0;
  for (const PassInfo* info : infos) {
    ++index;
    bool disabled = std::find(opts.disabled.begin(), opts.disabled.end(), info->name) != opts.disabled.end();
    if (disabled) continue;
    if (!snapshot_taken && isFusionPass(info->name)) {
      result.canonical = countCanonicalOps(g);
      snapshot_taken = true;
    }
    auto pass = info->create();
    ctx.beginPass(info->name);
    std::string text_before = opts.check_change_flags ? ir::printFxg(m) : std::string();
    auto p0 = Clock::now();
    bool changed = false;
    for (auto& gp : m.graphs()) changed |= pass->run(*gp, ctx);
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - p0).count();
    result.passes.push_back(PassRecord{info->name, changed, ctx.matches(), ms, ctx.counters()});
    if (isFusionPass(info->name))
      for (const auto& [k, v] : ctx.counters()) result.fusions[k] += v;
    if (opts.verify_each_pass) {
      auto problems = ir::verifyModule(m);
      if (!problems.empty())
        throw std::logic_error(fmt::format("verifier failed after pass '{}': {}", info->name, problems.front()));
    }
    if (opts.check_change_flags) {
      bool differs = ir::printFxg(m) != text_before;
      if (differs != changed)
        throw std::logic_error(fmt::format("pass '{}' returned changed={} but the graph {}", info->name, changed,
                                           differs ? "changed" : "is unchanged"));
    }
    if (wants_print(info->name) && opts.print_stream)
      *opts.print_stream << "// ----- after " << info->name << "\n" << ir::printFxg(m);
    if (!opts.dump_dir.empty())
      ir::writeOutputFile(fmt::format("{}/{:02d}.after.{}.fxg", opts.dump_dir, index, info->name), ir::printFxg(m));
  }
  if (!snapshot_taken) result.canonical = countCanonicalOps(g);
  for (const auto& op : ir::fxfuseOps())
    if (op.kind == ir::FxfuseOpKind::Fused) result.fusions.emplace(std::string(op.name), 0);
  result.nodes_after = g.numNodes();
  result.decisions = std::move(ctx.decisions());
  for (const auto& in : g.inputs())
    if (ir::isLiftedScalarInput(in.value)) result.lifted_scalars.emplace_back(in.value->name, in.value->scalar_value);
  result.guards = m.guards;
  result.compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return result;
}

}  // namespace fxfuse::compiler
