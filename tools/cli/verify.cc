#include "tools/cli/verify.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tools/cli/progress.h"
#include "tools/interpreter/compare.h"
#include "tools/interpreter/interpreter.h"
#include "passes/pipeline/pipeline.h"
#include "ir/io.h"
#include "ir/lifted_scalar.h"
#include "ir/status.h"
#include "ir/world_size.h"
#include "tools/cli/flag_checks.h"
#include "tools/cli/kv_options.h"

namespace fxfuse::cli {
namespace {

using interp::RValue;

struct VerifyArgs {
  std::string input, against;
  std::vector<std::string> passes, disabled, binds, consts;
  int world_size = kDefaultWorldSize;
  uint64_t seed = 0;
  int64_t default_size = 16;
  std::optional<double> atol, rtol;
  double max_mismatch_frac = 0;
  int64_t fp8_steps = 1;
  double fp8_frac = 0.02;
  bool allreduce_single_rounding = false;
  bool attn_quant_skip_rounding = false;
  bool verbose = false;
  bool profile = false;
  bool all_graphs = false;
  std::string graph;
  bool quiet = false;
  std::string save_compiled;
  std::string kv_cache;
  int64_t kv_block_size = compiler::CompileOptions::kDefaultKvBlockSize;
  interp::KvBatchOptions kv_batch;
};

std::vector<std::string> splitCommas(const std::vector<std::string>& in) {
  std::vector<std::string> out;
  for (const auto& s : in) {
    size_t start = 0;
    while (start <= s.size()) {
      size_t c = s.find(',', start);
      std::string part = s.substr(start, c == std::string::npos ? std::string::npos : c - start);
      if (!part.empty()) out.push_back(part);
      if (c == std::string::npos) break;
      start = c + 1;
    }
  }
  return out;
}

std::map<std::string, int64_t> parseBinds(const std::vector<std::string>& binds) {
  std::map<std::string, int64_t> out;
  for (const auto& b : splitCommas(binds)) {
    auto eq = b.find('=');
    if (eq == std::string::npos || eq == 0) fail("--bind {}: expected SYMBOL=VALUE", b);
    try {
      size_t used = 0;
      int64_t v = std::stoll(b.substr(eq + 1), &used);
      if (used != b.size() - eq - 1) throw std::invalid_argument("trailing");
      out[b.substr(0, eq)] = v;
    } catch (const std::exception&) {
      fail("--bind {}: '{}' is not an integer", b, b.substr(eq + 1));
    }
  }
  return out;
}

// Inputs of `b` taken from `a`'s generated inputs: by name when every name of b exists in
// a (and names are unique), else by position.
std::vector<RValue> matchInputs(const ir::Graph& a, const ir::Graph& b, const std::vector<RValue>& inputs) {
  std::map<std::string, size_t> by_name;
  bool unique = true;
  for (size_t i = 0; i < a.inputs().size(); ++i) {
    const std::string& n = a.inputs()[i].value->name;
    if (!by_name.emplace(n, i).second) unique = false;
  }
  bool names_ok = unique;
  for (const auto& in : b.inputs())
    if (!by_name.count(in.value->name)) names_ok = false;
  std::vector<RValue> out;
  if (names_ok) {
    for (const auto& in : b.inputs()) out.push_back(inputs[by_name[in.value->name]]);
    return out;
  }
  if (a.inputs().size() != b.inputs().size())
    fail("the graphs take different inputs ({} vs {}) and their names do not match", a.inputs().size(),
         b.inputs().size());
  return inputs;
}

std::string outputName(const ir::Graph& g, size_t i) {
  const auto& o = g.outputs()[i];
  if (!o.target.empty()) return o.target;
  if (o.value && !o.value->name.empty()) return o.value->name;
  if (o.value && o.value->producer()) return o.value->producer()->name;
  return fmt::format("output{}", i);
}

// Graphs that are not bodies of another graph's HOPs (cond branches etc.).
std::vector<std::string> topLevelGraphs(const ir::Module& m) {
  std::set<int> nested;
  std::function<void(const ir::Attr&)> scan = [&](const ir::Attr& a) {
    if (a.kind == ir::Attr::Kind::Graph) nested.insert(a.graph);
    for (const auto& e : a.list) scan(e);
  };
  for (const auto& g : m.graphs())
    for (const auto& n : g->nodes())
      for (const auto& arg : n->args()) scan(arg.value);
  std::vector<std::string> out;
  for (size_t i = 0; i < m.graphs().size(); ++i)
    if (!nested.count(static_cast<int>(i))) out.push_back(m.graphs()[i]->name);
  return out;
}

const ir::Graph& graphNamed(const ir::Module& m, const std::string& name) {
  for (const auto& g : m.graphs())
    if (g->name == name) return *g;
  fail("no graph @{} in the module", name);
}

std::set<std::string> graphSymbols(const ir::Module& m, const ir::Graph& g) {
  std::set<std::string> s;
  for (const auto& [name, info] : m.symbols.all()) s.insert(name);
  for (const auto& in : g.inputs()) {
    for (const auto& d : in.value->type.shape) d.collectSymbols(s);
    if (in.value->sym) in.value->sym->collectSymbols(s);
  }
  return s;
}

bool verifyGraph(const VerifyArgs& va, ir::Module& ref, ir::Module& got, const std::string& graph, bool print_graph) {
  interp::Options io;
  io.bind = parseBinds(va.binds);
  io.default_symbol_size = va.default_size;
  io.world_size = va.world_size;
  io.seed = va.seed;
  io.graph = graph;
  io.numerics.allreduce_norm_single_rounding = va.allreduce_single_rounding;
  io.numerics.attention_quant_skips_rounding = va.attn_quant_skip_rounding;
  io.kv = va.kv_batch;
  interp::Interpreter ia(ref, io);
  progress::stage(fmt::format("@{}: making inputs", graph));
  auto ti0 = std::chrono::steady_clock::now();
  std::vector<RValue> inputs = ia.makeInputs(va.seed);
  double inputs_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - ti0).count();

  // The second graph gets the first one's bindings (for the symbols it has) and inputs.
  interp::Options io_b = io;
  io_b.bind.clear();
  std::set<std::string> syms_b = graphSymbols(got, graphNamed(got, graph));
  for (const auto& [k, v] : ia.bindings())
    if (syms_b.count(k)) io_b.bind[k] = v;
  interp::Interpreter ib(got, io_b);
  std::vector<RValue> inputs_b = matchInputs(ia.entry(), ib.entry(), inputs);
  ib.bindFromInputs(ib.entry(), inputs_b);

  progress::clear();
  if (print_graph) std::printf("graph @%s\n", graph.c_str());
  if (!va.quiet) {
    std::string b;
    for (const auto& [k, v] : ia.bindings()) b += fmt::format("{}{}={} ({})", b.empty() ? "" : ", ", k, v, ia.bindingSource(k));
    std::printf("  symbols: %s\n", b.empty() ? "none" : b.c_str());
    if (ia.kvPlan()) std::printf("  kv batch: %s\n", ia.kvPlan()->describe().c_str());
    if (va.verbose) {
      const auto& notes = ia.inputNotes();
      for (size_t i = 0; i < notes.size() && i < ia.entry().inputs().size(); ++i)
        std::printf("  input %-28s %-22s %s\n", ia.entry().inputs()[i].value->name.c_str(), inputs[i].describe().c_str(),
                    notes[i].c_str());
    }
  }

  progress::stage(fmt::format("@{}: interpreting the reference", graph));
  std::vector<RValue> out_a = ia.run(inputs);
  double ms_a = ia.stats().seconds * 1e3;
  progress::stage(fmt::format("@{}: interpreting the other graph", graph));
  std::vector<RValue> out_b = ib.run(inputs_b);
  double ms_b = ib.stats().seconds * 1e3;
  if (out_a.size() != out_b.size())
    fail("graph @{}: the graphs have different numbers of outputs ({} vs {})", graph, out_a.size(), out_b.size());

  interp::CompareOptions co;
  co.atol = va.atol;
  co.rtol = va.rtol;
  co.max_mismatch_frac = va.max_mismatch_frac;
  co.fp8_max_steps = va.fp8_steps;
  co.fp8_max_step_frac = va.fp8_frac;
  progress::stage(fmt::format("@{}: comparing outputs", graph));
  bool all_pass = true;
  if (!va.quiet) std::printf("  %-28s %-22s %12s %12s %10s  %s\n", "output", "type", "max_abs", "max_rel", "mismatch", "result");
  for (size_t i = 0; i < out_a.size(); ++i) {
    interp::OutputReport r = interp::compareValues(outputName(ia.entry(), i), out_a[i], out_b[i], co);
    progress::clear();
    all_pass = all_pass && r.pass;
    if (va.quiet && r.pass) continue;
    std::string extra;
    if (r.fp8_differing) {
      if (r.fp8_max_step == std::numeric_limits<int64_t>::max()) {
        extra += fmt::format("; {} elements differ (some NaN)", r.fp8_differing);
      } else {
        extra += fmt::format("; {} elements differ by <= {} fp8 step(s)", r.fp8_differing, r.fp8_max_step);
      }
    }
    if (r.got_nan_only) extra += fmt::format("; {} NaN where the reference has numbers (unwritten memory?)", r.got_nan_only);
    if (r.ref_nan) extra += fmt::format("; reference has {} NaN (unwritten memory?)", r.ref_nan);
    if (!r.note.empty()) extra += "; " + r.note;
    if (va.quiet && print_graph) std::printf("  @%s:", graph.c_str());
    std::printf("  %-28s %-22s %12.4g %12.4g %9.4f%%  %s [%s%s]\n", r.name.c_str(), r.type.c_str(), r.max_abs, r.max_rel,
                100 * r.mismatch_frac, r.pass ? "ok" : "MISMATCH", r.tolerance.c_str(), extra.c_str());
  }
  if (!va.quiet)
    std::printf("  inputs in %.1f ms; interpreted: %zu nodes in %.1f ms, %zu nodes in %.1f ms\n", inputs_ms,
                ia.stats().nodes, ms_a, ib.stats().nodes, ms_b);
  for (const auto* in : {&ia, &ib})
    for (const auto& w : in->warnings()) std::printf("  warning (%s): %s\n", in == &ia ? "reference" : "other", w.c_str());
  if (va.profile) {
    for (const auto* in : {&ia, &ib}) {
      std::vector<std::pair<double, std::string>> rows;
      for (const auto& [k, v] : in->stats().by_target) rows.push_back({v.second, fmt::format("{:>5} x {}", v.first, k)});
      std::sort(rows.rbegin(), rows.rend());
      std::printf("  profile (%s):\n", in == &ia ? "reference" : "other");
      for (size_t i = 0; i < rows.size() && i < 12; ++i) std::printf("    %9.2f ms  %s\n", rows[i].first * 1e3, rows[i].second.c_str());
    }
  }
  return all_pass;
}

int runVerify(const VerifyArgs& va) {
  auto t0 = std::chrono::steady_clock::now();
  // Keep freed tensor memory in the heap: the interpreter allocates and drops large
  // buffers for every node, and fresh mmap'ed pages cost a page fault each.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  progress::setQuiet(va.quiet);
  progress::stage("reading " + va.input);
  std::unique_ptr<ir::Module> ref = ir::loadModuleForCompute(va.input);
  ir::applyConstFlags(*ref, va.consts);
  std::unique_ptr<ir::Module> got;
  std::string got_label;
  compiler::CompileResult cres;
  double compile_ms = 0;
  if (!va.against.empty()) {
    got = ir::loadModuleForCompute(va.against);
    ir::applyConstFlags(*got, va.consts);
    got_label = va.against;
  } else {
    got = ir::loadModuleForCompute(va.input);
    ir::applyConstFlags(*got, va.consts);
    compiler::CompileOptions co;
    co.passes = splitCommas(va.passes);
    co.disabled = splitCommas(va.disabled);
    co.world_size = va.world_size;
    co.kv_cache_dtype = va.kv_cache;
    co.kv_block_size = va.kv_block_size;
    if (!co.kv_cache_dtype.empty()) compileKvReference(*ref, co);
    auto c0 = std::chrono::steady_clock::now();
    progress::stage("compiling");
    cres = compiler::compileModule(*got, co);
    compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
    got_label = co.passes.empty() ? "compiled (default pipeline)"
                                  : fmt::format("compiled (--passes={})", fmt::join(co.passes, ","));
    if (!va.save_compiled.empty()) ir::saveModule(*got, va.save_compiled);
  }
  progress::clear();
  if (!va.quiet) {
    std::printf("verify: %s\n  against: %s\n", va.input.c_str(), got_label.c_str());
    std::printf("  seed %llu, world size %d\n", static_cast<unsigned long long>(va.seed), va.world_size);
    if (va.against.empty()) {
      std::string f;
      for (const auto& [k, v] : cres.fusions)
        if (v) f += fmt::format("{}{}={}", f.empty() ? "" : ", ", k, v);
      std::printf("  compile: %zu -> %zu nodes in %.1f ms; fusions: %s\n", cres.nodes_before, cres.nodes_after,
                  compile_ms, f.empty() ? "none" : f.c_str());
      if (!va.kv_cache.empty())
        std::printf("  reference: the input compiled with --kv-cache=%s and no fusion passes\n", va.kv_cache.c_str());
    }
  }
  std::vector<std::string> graphs;
  if (va.all_graphs) {
    graphs = topLevelGraphs(*ref);
  } else {
    graphs.push_back(va.graph.empty() ? ref->entry().name : va.graph);
  }
  bool all_pass = true;
  int errors = 0;
  for (const auto& g : graphs) {
    if (graphs.size() == 1) {
      all_pass = verifyGraph(va, *ref, *got, g, false) && all_pass;
      continue;
    }
    // Several graphs: a bad graph is reported and the others still run.
    try {
      all_pass = verifyGraph(va, *ref, *got, g, !va.quiet) && all_pass;
    } catch (const FxError& e) {
      ++errors;
      progress::clear();
      std::printf("  @%s: ERROR: %s\n", g.c_str(), e.what());
    }
  }
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  progress::end();
  if (!va.quiet) std::printf("  total %.2f s\n", total);
  if (errors) {
    std::printf("ERROR: %d of %zu graphs could not be run%s\n", errors, graphs.size(), all_pass ? "" : "; outputs differ");
    return 2;
  }
  std::printf("%s\n", all_pass ? "PASS" : "FAIL: outputs differ");
  return all_pass ? 0 : 1;
}

}  // namespace

void registerVerify(CLI::App& app, int& exit_code) {
  auto va = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "verify", "Run a graph before and after compilation (or two graphs) in the CPU interpreter and compare outputs");
  cmd->add_option("input", va->input, "input graph (.pt2, .json, .pb, .fxg, FX text)")->required();
  cmd->add_option("--against", va->against, "compare with this graph instead of compiling the input");
  cmd->add_option("--passes", va->passes, "compile with these passes (comma-separated; default: the full pipeline)")
      ->delimiter(',');
  cmd->add_option("--disable-pass", va->disabled, "skip these passes")->delimiter(',');
  cmd->add_option("--world-size", va->world_size,
                  "tensor-parallel world size: compile for it and simulate all_reduce as N copies summed (default 1)")
      ->check(WorldSizeRange());
  cmd->add_option("--bind", va->binds, "bind a size symbol, e.g. --bind s0=37 (repeatable, or comma-separated)");
  cmd->add_option("--const", va->consts,
                  "value of a lifted scalar input (0-d CPU tensor), e.g. --const arg3_1=1e-06 (repeatable)");
  cmd->add_option("--seed", va->seed, "seed of the random inputs (default 0)");
  cmd->add_option("--default-size", va->default_size,
                  "size of a symbol with no --bind, hint or forced size (default 16, clamped to its range)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--atol", va->atol, "absolute tolerance for floating outputs (default by dtype)")
      ->check(FiniteRange(0, 1e30));
  cmd->add_option("--rtol", va->rtol, "relative tolerance for floating outputs (default by dtype)")
      ->check(FiniteRange(0, 1e30));
  cmd->add_option("--max-mismatch-frac", va->max_mismatch_frac,
                  "fraction of out-of-tolerance elements allowed per output (default 0)")
      ->check(FiniteRange(0, 1));
  cmd->add_option("--fp8-steps", va->fp8_steps, "FP8 outputs: largest allowed difference in e4m3 steps (default 1)")
      ->check(CLI::Range(int64_t{0}, int64_t{1000}));
  cmd->add_option("--fp8-frac", va->fp8_frac,
                  "FP8 outputs: largest fraction of elements allowed to differ at all (default 0.02)")
      ->check(FiniteRange(0, 1));
  cmd->add_flag("--allreduce-single-rounding", va->allreduce_single_rounding,
                "fxfuse.all_reduce_rms_norm*: FlashInfer's single rounding instead of the canonical composition");
  cmd->add_flag("--attn-quant-skip-rounding", va->attn_quant_skip_rounding,
                "fxfuse.attention_quant: quantize the f32 accumulator (vLLM's Triton epilogue)");
  addKvCacheFlags(cmd, va->kv_cache, va->kv_block_size);
  addKvBatchFlags(cmd, va->kv_batch);
  cmd->add_option("--graph", va->graph, "verify this graph of the module (default: the first)");
  cmd->add_flag("--all-graphs", va->all_graphs, "verify every top-level graph of the module (golden test files)");
  cmd->add_option("--save-compiled", va->save_compiled, "write the compiled graph to this file");
  cmd->add_flag("-v,--verbose", va->verbose, "print every input with its role");
  cmd->add_flag("--profile", va->profile, "print interpreter time by op target");
  cmd->add_flag("-q,--quiet", va->quiet, "print only failing outputs and the verdict");
  cmd->callback([va, &exit_code] { exit_code = runVerify(*va); });
}

}  // namespace fxfuse::cli
