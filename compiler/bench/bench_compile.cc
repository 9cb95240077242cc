// Compile benchmark: load + all passes + write, timed per phase, median of N runs.
//   bench_compile FILE [--runs N] [--out OUT.{fxg,pb,json}] [--world-size N]
// Prints one JSON object: {"nodes", "nodes_after", "load_ms", "passes_ms", "write_ms",
// "median_ms", "runs", "fusions", "canonical"} (medians; median_ms is the median total).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "passes/pipeline/pipeline.h"
#include "ir/fxg.h"
#include "ir/io.h"
#include "ir/status.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double ms(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_compile FILE [--runs N] [--out OUT] [--world-size N]\n");
    return 2;
  }
  std::string in = argv[1], out = "/tmp/fxfuse_bench_out.pb";
  int runs = 5, ws = 1;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--runs") runs = std::stoi(argv[i + 1]);
    else if (k == "--out") out = argv[i + 1];
    else if (k == "--world-size") ws = std::stoi(argv[i + 1]);
  }
  try {
    std::vector<double> load, passes, write, total;
    nlohmann::json last;
    for (int r = 0; r < runs + 1; ++r) {  // one warm-up
      auto t0 = std::chrono::steady_clock::now();
      auto m = fxfuse::ir::loadModule(in);
      auto t1 = std::chrono::steady_clock::now();
      fxfuse::compiler::CompileOptions opts;
      opts.world_size = ws;
      opts.verify_each_pass = false;
      auto res = fxfuse::compiler::compileModule(*m, opts);
      auto t2 = std::chrono::steady_clock::now();
      if (out.size() > 4 && out.compare(out.size() - 4, 4, ".fxg") == 0)
        fxfuse::ir::writeFileAtomic(out, fxfuse::ir::printFxg(*m));
      else
        fxfuse::ir::saveModule(*m, out);
      auto t3 = std::chrono::steady_clock::now();
      if (r == 0) continue;
      load.push_back(ms(t0, t1));
      passes.push_back(ms(t1, t2));
      write.push_back(ms(t2, t3));
      total.push_back(ms(t0, t3));
      last = {{"nodes", res.nodes_before}, {"nodes_after", res.nodes_after}, {"fusions", res.fusions},
              {"canonical", res.canonical}};
      for (const auto& p : res.passes) last["pass_ms"][p.name] = p.ms;
    }
    last["load_ms"] = median(load);
    last["passes_ms"] = median(passes);
    last["write_ms"] = median(write);
    last["median_ms"] = median(total);
    last["runs"] = runs;
    std::printf("%s\n", last.dump().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_compile: %s\n", e.what());
    return 2;
  }
  return 0;
}
