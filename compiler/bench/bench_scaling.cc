// Compile scaling benchmark: generates graphs of growing size in several shapes and times
// parsing and the default pass pipeline on each, to show that compile time grows linearly
// with the graph (docs/benchmarks/compile_scaling.md).
//
//   bench_scaling [--sizes 1000,10000,100000,1000000] [--shapes chain,dead_users,...] [--runs N]
//
// Shapes (N = size):
//   chain       x -> relu -> relu -> ... N nodes deep, the last one the output
//   dead_users  N unused relu's of one input value (DCE removes all N users of one value)
//   dead_chain  a used chain of N/2 plus a dead chain of N/2 hanging off its start
//   cse_users   N/2 identical relu's of one input, each added into a running sum: CSE merges
//               them all into one (N/2 - 1 erasures of users of one value, and use-list moves)
//   rms_blocks  N/8 copies of an RMSNorm decomposition in core ATen (pow, mean, add, rsqrt,
//               mul, convert, mul), chained: canonicalization and fusion rewrite every block
// Prints a markdown table (one row per shape and size: nodes, parse ms, compile ms, compile
// microseconds per node) and one JSON line per row on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "passes/pipeline/pipeline.h"
#include "ir/fxg.h"
#include "ir/status.h"

namespace {

std::string header(const char* extra_inputs) {
  return std::string("fxfuse.module {\n  symbol s0 range=[1, 8192] hint=16\n  graph @main {\n") +
         "    input %1 \"T\": Sym(s0)\n    input %2 \"x\": bf16[s0, 64]\n" + extra_inputs;
}

std::string chain(int64_t n) {
  std::ostringstream s;
  s << header("");
  for (int64_t i = 0; i < n; ++i)
    s << "    %" << i + 3 << ": bf16[s0, 64] = aten.relu.default(self=%" << (i == 0 ? 2 : i + 2) << ")\n";
  s << "    output %" << n + 2 << "\n  }\n}\n";
  return s.str();
}

std::string deadUsers(int64_t n) {
  std::ostringstream s;
  s << header("");
  for (int64_t i = 0; i < n; ++i) s << "    %" << i + 3 << ": bf16[s0, 64] = aten.relu.default(self=%2)\n";
  s << "    %" << n + 3 << ": bf16[s0, 64] = aten.neg.default(self=%2)\n";
  s << "    output %" << n + 3 << "\n  }\n}\n";
  return s.str();
}

std::string deadChain(int64_t n) {
  std::ostringstream s;
  s << header("");
  int64_t half = n / 2, id = 3;
  int64_t start = id;
  s << "    %" << id++ << ": bf16[s0, 64] = aten.relu.default(self=%2)\n";
  for (int64_t i = 1; i < half; ++i, ++id) s << "    %" << id << ": bf16[s0, 64] = aten.relu.default(self=%" << id - 1 << ")\n";
  int64_t live_end = id - 1;
  s << "    %" << id << ": bf16[s0, 64] = aten.neg.default(self=%" << start << ")\n";
  ++id;
  for (int64_t i = 1; i < n - half; ++i, ++id) s << "    %" << id << ": bf16[s0, 64] = aten.neg.default(self=%" << id - 1 << ")\n";
  s << "    output %" << live_end << "\n  }\n}\n";
  return s.str();
}

std::string cseUsers(int64_t n) {
  std::ostringstream s;
  s << header("");
  int64_t acc = 2, id = 3;
  for (int64_t i = 0; i < std::max<int64_t>(1, n / 2); ++i) {
    int64_t r = id++, a = id++;
    s << "    %" << r << ": bf16[s0, 64] = aten.relu.default(self=%2)\n";
    s << "    %" << a << ": bf16[s0, 64] = aten.add.Tensor(self=%" << acc << ", other=%" << r << ")\n";
    acc = a;
  }
  s << "    output %" << acc << "\n  }\n}\n";
  return s.str();
}

std::string rmsBlocks(int64_t n) {
  std::ostringstream s;
  s << header("    input %3 \"w\": bf16[64]\n");
  int64_t x = 2, id = 4;
  for (int64_t b = 0; b < std::max<int64_t>(1, n / 8); ++b) {
    int64_t f = id++, p = id++, m = id++, a = id++, r = id++, y = id++, c = id++, o = id++;
    s << "    %" << f << ": f32[s0, 64] = prims.convert_element_type.default(a=%" << x << ", dtype=f32)\n";
    s << "    %" << p << ": f32[s0, 64] = aten.pow.Tensor_Scalar(self=%" << f << ", exponent=2)\n";
    s << "    %" << m << ": f32[s0, 1] = aten.mean.dim(self=%" << p << ", dim=[-1], keepdim=true)\n";
    s << "    %" << a << ": f32[s0, 1] = aten.add.Scalar(self=%" << m << ", other=1e-06)\n";
    s << "    %" << r << ": f32[s0, 1] = aten.rsqrt.default(self=%" << a << ")\n";
    s << "    %" << y << ": f32[s0, 64] = aten.mul.Tensor(self=%" << f << ", other=%" << r << ")\n";
    s << "    %" << c << ": bf16[s0, 64] = prims.convert_element_type.default(a=%" << y << ", dtype=bf16)\n";
    s << "    %" << o << ": bf16[s0, 64] = aten.mul.Tensor(self=%" << c << ", other=%3)\n";
    x = o;
  }
  s << "    output %" << x << "\n  }\n}\n";
  return s.str();
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ','))
    if (!part.empty()) out.push_back(part);
  return out;
}

double msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> sizes = {"1000", "10000", "100000", "1000000"};
  std::vector<std::string> shapes = {"chain", "dead_users", "dead_chain", "cse_users", "rms_blocks"};
  int runs = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--sizes") sizes = split(argv[i + 1]);
    else if (k == "--shapes") shapes = split(argv[i + 1]);
    else if (k == "--runs") runs = std::max(1, std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: bench_scaling [--sizes N,N,...] [--shapes chain,dead_users,dead_chain,cse_users,rms_blocks] [--runs N]\n");
      return 2;
    }
  }
  std::printf("| shape | nodes | nodes after | parse ms | compile ms | compile us/node |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  try {
    for (const auto& shape : shapes)
      for (const auto& size : sizes) {
        int64_t n = std::stoll(size);
        std::string text = shape == "chain"        ? chain(n)
                           : shape == "dead_users" ? deadUsers(n)
                           : shape == "dead_chain" ? deadChain(n)
                           : shape == "cse_users"  ? cseUsers(n)
                           : shape == "rms_blocks" ? rmsBlocks(n)
                                                   : (fxfuse::fail("unknown shape {}", shape), std::string());
        std::vector<double> parse_ms, compile_ms;
        size_t before = 0, after = 0;
        for (int r = 0; r < runs; ++r) {
          auto t0 = std::chrono::steady_clock::now();
          auto m = fxfuse::ir::parseFxg(text, shape + ".fxg");
          parse_ms.push_back(msSince(t0));
          fxfuse::compiler::CompileOptions opts;
          opts.verify_each_pass = false;
          auto t1 = std::chrono::steady_clock::now();
          auto res = fxfuse::compiler::compileModule(*m, opts);
          compile_ms.push_back(msSince(t1));
          before = res.nodes_before;
          after = res.nodes_after;
        }
        std::sort(parse_ms.begin(), parse_ms.end());
        std::sort(compile_ms.begin(), compile_ms.end());
        double pm = parse_ms[parse_ms.size() / 2], cm = compile_ms[compile_ms.size() / 2];
        std::printf("| %s | %zu | %zu | %.1f | %.1f | %.2f |\n", shape.c_str(), before, after, pm, cm,
                    1e3 * cm / static_cast<double>(std::max<size_t>(before, 1)));
        std::fprintf(stderr, "{\"shape\": \"%s\", \"nodes\": %zu, \"nodes_after\": %zu, \"parse_ms\": %.2f, \"compile_ms\": %.2f}\n",
                     shape.c_str(), before, after, pm, cm);
        std::fflush(stdout);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_scaling: %s\n", e.what());
    return 2;
  }
  return 0;
}
