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
#include "ir/sniff.h"
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

std::unique_ptr<Module> loadModule(const std::string& path) {
  // The format comes from the content, whatever the file is called (sniff.h).
  std::string bytes = readFile(path);
  FileFormat format = sniffFormat(bytes);
  if (format == FileFormat::kGzip) {
    bytes = readGzipFile(path);
    format = sniffFormat(bytes);
    if (format == FileFormat::kGzip || format == FileFormat::kZipArchive) format = FileFormat::kUnknown;
  }
  std::unique_ptr<Module> m;
  switch (format) {
    case FileFormat::kZipArchive: m = importExportArchive(bytes, path); break;
    case FileFormat::kFxg: m = parseFxg(bytes, path); break;
    case FileFormat::kModuleBinary: m = moduleFromBinary(bytes, path); break;
    case FileFormat::kExportJson: m = importExportJson(bytes, path, "", /*padded=*/true); break;
    case FileFormat::kFxfuseJson: m = moduleFromJson(bytes, path); break;
    case FileFormat::kFxText: m = importFxText(bytes, path); break;
    case FileFormat::kPlanText:
    case FileFormat::kPlanBinary:
      fail("{}: is a launch plan ({}), not a graph (run, bench and embed take plans)", path, formatName(format));
    case FileFormat::kGzip:
    case FileFormat::kUnknown:
      fail("{}: unrecognized input format (tried: {})", path, knownFormats());
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
