// Import benchmark: times loading a graph file into the IR (read + parse + build) and
// reports MB/s over the ExportedProgram JSON and nodes/s. Median of N runs after a
// warm-up. Prints one JSON object so a driver can put it next to Python's json.loads.
//
//   bench_import FILE [--runs N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <simdjson.h>
#include <zip.h>

#include "ir/importers/export_json.h"
#include "ir/io.h"
#include "ir/status.h"

namespace {

// Size of the program JSON inside an archive (what json.loads would parse).
size_t jsonBytes(const std::string& path, const std::string& bytes) {
  if (bytes.compare(0, 2, "PK") != 0) return bytes.size();
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &err);
  if (!z) return bytes.size();
  size_t best = 0;
  for (zip_int64_t i = 0; i < zip_get_num_entries(z, 0); ++i) {
    zip_stat_t st;
    if (zip_stat_index(z, static_cast<zip_uint64_t>(i), 0, &st) != 0) continue;
    std::string n = st.name;
    if ((n.find("/models/") != std::string::npos && n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0) ||
        n.find("serialized_exported_program.json") != std::string::npos)
      best = std::max<size_t>(best, st.size);
  }
  zip_discard(z);
  return best ? best : bytes.size();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_import FILE [--runs N]\n");
    return 2;
  }
  std::string path = argv[1];
  int runs = 15;
  for (int i = 2; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--runs") == 0) runs = std::max(1, std::atoi(argv[i + 1]));
  try {
    std::string bytes = fxfuse::ir::readFile(path);
    size_t json = jsonBytes(path, bytes);
    size_t nodes = 0;
    std::vector<double> ms;
    for (int r = 0; r < runs + 1; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      auto m = fxfuse::ir::loadModule(path);  // includes reading the file
      auto t1 = std::chrono::steady_clock::now();
      nodes = 0;
      for (const auto& g : m->graphs()) nodes += g->numNodes();
      if (r > 0) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    double med = ms[ms.size() / 2];
    // JSON parse alone (simdjson DOM), for bare JSON inputs: the floor under the import.
    double parse_med = 0;
    if (bytes.compare(0, 2, "PK") != 0) {
      simdjson::dom::parser parser;
      simdjson::padded_string padded(bytes);
      std::vector<double> pm;
      for (int r = 0; r < runs + 1; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        simdjson::dom::element doc;
        if (parser.parse(padded).get(doc)) return 2;
        auto t1 = std::chrono::steady_clock::now();
        if (r > 0) pm.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
      std::sort(pm.begin(), pm.end());
      parse_med = pm[pm.size() / 2];
    }
    std::printf("{\"file\": \"%s\", \"json_bytes\": %zu, \"nodes\": %zu, \"runs\": %d, \"median_ms\": %.3f, "
                "\"min_ms\": %.3f, \"json_parse_ms\": %.3f, \"mb_per_s\": %.1f, \"nodes_per_s\": %.0f}\n",
                path.c_str(), json, nodes, runs, med, ms.front(), parse_med, json / 1e6 / (med / 1e3), nodes / (med / 1e3));
  } catch (const fxfuse::FxError& e) {
    std::fprintf(stderr, "bench_import: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
