#include "ir/io.h"

#include <cstdio>
#include <fstream>
#include <vector>
#include <sstream>
#include <sys/stat.h>
#include <zlib.h>

#include "ir/fxg.h"
#include "ir/importers/export_json.h"
#include "ir/importers/fx_text.h"
#include "ir/proto_io.h"
#include "ir/status.h"
#include "ir/validate.h"
#include "ir/verifier.h"

namespace fxfuse::ir {

namespace {

std::string extensionOf(const std::string& path) {
  auto slash = path.find_last_of('/');
  auto dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return path.substr(dot);
}

bool startsWithZipMagic(const std::string& b) { return b.size() >= 4 && b.compare(0, 4, "PK\x03\x04") == 0; }

}  // namespace

std::string readFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) fail("{}: cannot open: no such file", path);
  if (S_ISDIR(st.st_mode)) fail("{}: is a directory", path);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail("{}: cannot open for reading", path);
  // One allocation, with kReadPadding spare bytes after the data so JSON can be parsed in
  // place (simdjson reads up to 64 bytes past the end).
  std::string out;
  size_t size = static_cast<size_t>(st.st_size);
  out.resize(size + kReadPadding, '\0');
  size_t got = size ? std::fread(out.data(), 1, size, f) : 0;
  std::fclose(f);
  if (got != size) fail("{}: read failed", path);
  out.resize(size);  // capacity (and the zeroed padding) stays
  return out;
}

void writeFileAtomic(const std::string& path, const std::string& data) {
  std::string tmp = path + ".tmp~";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("{}: cannot open for writing", path);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) {
      std::remove(tmp.c_str());
      fail("{}: write failed", path);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("{}: cannot move the written file into place", path);
  }
}

namespace {

// Reads a gzip-compressed file whole (benchmark graphs ship as .json.gz), keeping the same
// padding guarantee as readFile.
std::string readGzipFile(const std::string& path) {
  readFile(path);  // existence and readability, with the usual messages
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) fail("{}: cannot open for reading", path);
  std::string out;
  std::vector<char> buf(1 << 20);
  int n;
  while ((n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()))) > 0) {
    out.append(buf.data(), static_cast<size_t>(n));
    if (out.size() > (size_t{8} << 30)) {
      gzclose(f);
      fail("{}: decompressed size exceeds 8 GiB", path);
    }
  }
  int err = 0;
  std::string msg = n < 0 ? gzerror(f, &err) : "";
  gzclose(f);
  if (n < 0) fail("{}: corrupt gzip data ({})", path, msg);
  size_t size = out.size();
  out.resize(size + kReadPadding, '\0');
  out.resize(size);
  return out;
}

}  // namespace

namespace {

std::unique_ptr<Module> importByType(const std::string& path) {
  std::string ext = extensionOf(path);
  bool gz = ext == ".gz";
  std::string bytes = gz ? readGzipFile(path) : readFile(path);
  if (gz) ext = extensionOf(path.substr(0, path.size() - 3));
  std::unique_ptr<Module> m;
  if (ext == ".pt2" || ext == ".zip" || startsWithZipMagic(bytes)) {
    m = importExportArchive(bytes, path);
  } else if (ext == ".fxg") {
    m = parseFxg(bytes, path);
  } else if (ext == ".pb") {
    m = moduleFromBinary(bytes, path);
  } else if (ext == ".json") {
    // fxfuse JSON has "graphs"; torch.export JSON has "graph_module".
    size_t probe = std::min<size_t>(bytes.size(), 4096);
    std::string head = bytes.substr(0, probe);
    if (head.find("\"graph_module\"") != std::string::npos || bytes.find("\"graph_module\"") != std::string::npos) {
      m = importExportJson(bytes, path, "", /*padded=*/true);
    } else {
      m = moduleFromJson(bytes, path);
    }
  } else if (ext == ".py" || ext == ".txt" || looksLikeFxText(bytes)) {
    m = importFxText(bytes, path);
  } else {
    fail("{}: unknown input format (expected .pt2, .json, .pb, .fxg, or FX readable text .py/.txt)", path);
  }
  return m;
}

}  // namespace

std::unique_ptr<Module> loadModule(const std::string& path) {
  std::unique_ptr<Module> m;
  try {
    m = importByType(path);
  } catch (const FxError& e) {
    // Every message names the file, also those from helpers that do not know it.
    if (std::string_view(e.what()).find(path) == std::string_view::npos) fail("{}: {}", path, e.what());
    throw;
  }
  if (m->producer.source_path.empty()) m->producer.source_path = path;
  validateModule(*m, path);
  return m;
}

std::unique_ptr<Module> loadModuleForCompute(const std::string& path) {
  auto m = loadModule(path);
  verifyOrThrow(*m, path);
  validateNodesAgainstSchemas(*m, path);
  return m;
}

void saveModule(Module& m, const std::string& path) {
  std::string ext = extensionOf(path);
  if (ext == ".fxg") {
    writeFileAtomic(path, printFxg(m));
  } else if (ext == ".pb") {
    writeFileAtomic(path, moduleToBinary(m));
  } else if (ext == ".json") {
    writeFileAtomic(path, moduleToJson(m));
  } else if (ext == ".pt2") {
    fail("{}: writing .pt2 archives is not supported (write .fxg, .pb or .json)", path);
  } else {
    fail("{}: unknown output format (expected .fxg, .pb or .json)", path);
  }
}

}  // namespace fxfuse::ir
