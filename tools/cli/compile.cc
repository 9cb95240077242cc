// `fxfuse compile [IN] [-o OUT]`: runs the pass pipeline and writes the compiled graph
// (.fxg, .pb, .json, .pt2; `-o -` prints .fxg to stdout) and the report. Without IN it compiles
// the embedded default graph. `fxfuse explain IN [--node NAME]`: every candidate site,
// applied or not, with the first failing condition.
#include "tools/cli/compile.h"

#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "tools/cli/progress.h"
#include "tools/cli/default_graph.h"
#include "tools/inspect/html_report.h"  // --html
#include "tools/inspect/module_util.h"
#include "compiler/lowering/lowering.h"  // --emit=plan|plan-text
#include "passes/pipeline/pipeline.h"
#include "passes/pipeline/registry.h"
#include "passes/pipeline/report.h"
#include "ir/fxg.h"
#include "ir/io.h"
#include "ir/output_set.h"
#include "ir/pt2_writer.h"
#include "ir/lifted_scalar.h"
#include "ir/status.h"
#include "ir/verifier.h"
#include "ir/world_size.h"
#include "tools/cli/flag_checks.h"

namespace fxfuse::cli {

namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

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

// Parses all of `s` as a decimal integer ("5junk", "" and out-of-range values fail).
bool parseWholeInt(const std::string& s, long long& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  out = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && end != s.c_str() && *end == '\0';
}

struct CommonFlags {
  std::string input;
  std::vector<std::string> passes, disabled, ar_caps, consts;
  int world_size = kDefaultWorldSize;
  bool vllm_eps_only = false;
  bool verify_each = false;
  std::string kv_cache;
  int64_t kv_block_size = compiler::CompileOptions::kDefaultKvBlockSize;

  void add(CLI::App* cmd, bool input_required) {
    auto* in = cmd->add_option("input", input, "input graph (.pt2, .json, .pb, .fxg, FX text)");
    if (input_required) in->required();
    cmd->add_option("--passes", passes, "comma-separated pass names (default: the full pipeline)")->delimiter(',');
    cmd->add_option("--disable-pass", disabled, "skip these passes (comma-separated, repeatable)")->delimiter(',');
    cmd->add_option("--world-size", world_size, "tensor-parallel world size (all-reduce fusion: 2, 4 or 8)")
        ->check(WorldSizeRange());
    cmd->add_option("--allreduce-max-bytes", ar_caps,
                    "all-reduce fusion size cap WS=BYTES (repeatable; default SM90: 2=64MiB, 4=2MiB, 8=1MiB)")
        ->delimiter(',');
    cmd->add_option("--const", consts,
                    "value of a lifted scalar input (0-d CPU tensor), e.g. --const arg3_1=448.0 (repeatable)");
    cmd->add_flag("--vllm-eps-only", vllm_eps_only, "fuse only RMSNorms with eps 1e-5 or 1e-6 (vLLM's patterns)");
    addKvCacheFlags(cmd, kv_cache, kv_block_size);
    cmd->add_flag("--verify-each", verify_each,
                  "run the IR verifier after every pass and check each pass's changed flag");
  }

  compiler::CompileOptions options() const {
    compiler::CompileOptions o;
    o.passes = splitCommas(passes);
    o.disabled = splitCommas(disabled);
    o.world_size = world_size;
    o.vllm_eps_only = vllm_eps_only;
    o.kv_cache_dtype = kv_cache;
    o.kv_block_size = kv_block_size;
    if (verify_each) o.verify_each_pass = o.check_change_flags = true;
    for (const auto& c : ar_caps) {
      auto eq = c.find('=');
      long long ws = 0, bytes = 0;
      if (eq == std::string::npos || !parseWholeInt(c.substr(0, eq), ws) || !parseWholeInt(c.substr(eq + 1), bytes))
        fail("--allreduce-max-bytes: expected WS=BYTES, got '{}'", c);
      checkWorldSize(ws, "--allreduce-max-bytes: world size");
      if (bytes < 0) fail("--allreduce-max-bytes {}: the byte cap cannot be negative", c);
      o.allreduce_max_bytes[static_cast<int>(ws)] = bytes;
    }
    return o;
  }

  std::unique_ptr<ir::Module> load(std::string* name) const {
    if (input.empty()) {
      *name = compiler::defaultGraphName();
      auto m = ir::parseFxg(compiler::defaultGraphText(), "default_graph.fxg");
      ir::applyConstFlags(*m, consts);
      return m;
    }
    *name = input;
    auto m = ir::loadModuleForCompute(input);
    ir::applyConstFlags(*m, consts);
    return m;
  }
};

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

void registerCompile(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("compile", "Canonicalize and fuse a graph; write it and a report");
  static CommonFlags flags;
  static std::string out, report, dump_dir;
  static std::string html;  // --html: inspection report hook (tools/inspect/html_report.h)
  static std::string emit = "graph";  // --emit: launch plans(compiler/lowering/)
  static std::vector<std::string> print_after;
  static std::string op_names = "fxfuse";  // --op-names: spelling of fused ops in a .pt2 output
  static bool quiet = false, list = false;
  flags.add(cmd, /*input_required=*/false);
  cmd->add_option("-o,--output", out, "output graph: .fxg, .pb, .json, .pt2 (torch.export archive), or - for .fxg on stdout");
  cmd->add_option("--op-names", op_names,
                  "fused ops in a .pt2 output: fxfuse (torch.ops.fxfuse.*, tools/fxfuse_torch) or vllm (vLLM's _C ops)")
      ->check(CLI::IsMember({"fxfuse", "vllm"}));
  cmd->add_option("--report", report, "write the JSON report (docs/report.md) to this file (- for stdout)");
  cmd->add_option("--emit", emit, "what -o writes: graph (default), plan (binary launch plan), plan-text")
      ->check(CLI::IsMember({"graph", "plan", "plan-text"}));
  cmd->add_option("--html", html, "write a self-contained HTML report (passes, sites, diff, pictures) to this file");
  cmd->add_option("--dump-dir", dump_dir, "write the graph after every pass as DIR/NN.after.PASS.fxg");
  cmd->add_option("--print-after", print_after, "print the graph to stderr after these passes (or 'all')")
      ->delimiter(',');
  cmd->add_flag("-q,--quiet", quiet, "no human summary");
  cmd->add_flag("--list-passes", list, "list the passes and the default pipeline, then exit");
  cmd->callback([&exit_code] {
    if (list) {
      for (const auto& p : compiler::allPasses()) std::printf("%-26s %s\n", p.name.c_str(), p.summary.c_str());
      std::string d;
      for (const auto& n : compiler::defaultPipeline()) d += (d.empty() ? "" : ",") + n;
      std::printf("\ndefault pipeline: %s\n", d.c_str());
      exit_code = 0;
      return;
    }
    // Both on stdout would run the graph and the JSON report together.
    if (out == "-" && report == "-") fail("-o - and --report - both write to stdout; send one of them to a file");
    progress::setQuiet(quiet);
    auto t0 = Clock::now();
    compiler::ReportContext rc;
    progress::stage("reading " + (flags.input.empty() ? std::string("the default graph") : flags.input));
    auto m = flags.load(&rc.input);
    rc.load_ms = msSince(t0);
    compiler::CompileOptions opts = flags.options();
    opts.print_after = print_after;
    opts.print_stream = &std::cerr;
    opts.dump_dir = dump_dir;
    std::unique_ptr<ir::Module> before = html.empty() ? nullptr : inspect::cloneModule(*m);
    progress::stage("running the passes");
    auto result = compiler::compileModule(*m, opts);
    auto t1 = Clock::now();
    // --emit=plan|plan-text: lower the compiled graph and write the launch plan.
    if (emit != "graph") {
      if (out.empty()) fail("--emit={} needs -o PLAN (- prints the text form)", emit);
      progress::stage("lowering to a launch plan");
      lowering::LowerOptions lo;
      lo.world_size = flags.world_size;
      lo.source = rc.input;
      lo.reasons_left_by_passes = compiler::firstReasonLeftByNode(result);
      auto plan = lowering::lowerModule(*m, lo);
      std::string bytes = emit == "plan-text" || out == "-" ? lowering::planToText(plan) : lowering::planToBinary(plan);
      progress::clear();
      if (out == "-") std::fputs(bytes.c_str(), stdout);
      else ir::writeOutputFile(out, bytes);
      rc.output = out == "-" ? "<stdout>" : out;
    }
    if (!out.empty() && emit == "graph") {
      m->producer.stage = ir::Stage::FxfuseCompiled;
      progress::clear();
      if (out == "-") {
        std::fputs(ir::printFxg(*m).c_str(), stdout);
      } else if (endsWith(out, ".fxg")) {
        ir::writeOutputFile(out, ir::printFxg(*m));
      } else if (endsWith(out, ".pt2")) {
        ir::Pt2WriteOptions po;
        po.vllm_op_names = op_names == "vllm";
        ir::savePt2Archive(*m, out, po);
      } else {
        ir::saveModule(*m, out);
      }
      rc.output = out == "-" ? "<stdout>" : out;
    }
    rc.write_ms = msSince(t1);
    progress::end();
    rc.total_ms = msSince(t0);
    if (!report.empty()) {
      std::string text = compiler::reportJson(result, opts, rc).dump(2) + "\n";
      if (report == "-") std::fputs(text.c_str(), stdout);
      else ir::writeOutputFile(report, text);
    }
    if (!html.empty()) {
      inspect::HtmlReportInput hi;
      hi.input_path = rc.input;
      hi.output_path = rc.output;
      hi.before = before.get();
      hi.after = m.get();
      hi.result = &result;
      hi.options = &opts;
      hi.load_ms = rc.load_ms;
      hi.write_ms = rc.write_ms;
      inspect::writeHtmlReport(html, hi);
    }
    if (!quiet) {
      std::string s = compiler::humanSummary(result, opts, rc);
      std::FILE* f = (out == "-" || report == "-") ? stderr : stdout;
      std::fputs(s.c_str(), f);
    }
    exit_code = 0;
  });
}

void registerExplain(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("explain", "Show every candidate site: canonicalized/fused or the first failing condition");
  static CommonFlags flags;
  static std::string node;
  flags.add(cmd, /*input_required=*/false);
  cmd->add_option("--node", node, "only decisions about this node (anchor or source node name)");
  cmd->callback([&exit_code] {
    std::string name;
    auto m = flags.load(&name);
    auto result = compiler::compileModule(*m, flags.options());
    std::fputs(compiler::explainText(result, node).c_str(), stdout);
    exit_code = 0;
  });
}

}  // namespace fxfuse::cli
