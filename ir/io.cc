#include "ir/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "ir/fxg.h"
#include "ir/importers/export_json.h"
#include "ir/importers/fx_text.h"
#include "ir/output_set.h"
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

namespace {

const char* fileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Opens a regular file for reading. O_NONBLOCK keeps opening a FIFO from blocking until a
// writer appears; anything but a regular file is then refused.
int openRegular(const std::string& path, struct stat* st) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) fail("{}: cannot open: no such file", path);
    fail("{}: cannot open for reading: {}", path, std::strerror(errno));
  }
  if (::fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    ::close(fd);
    fail("{}: is {}; expected a regular file", path, fileKind(st->st_mode));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

std::string readFile(const std::string& path) {
  struct stat st {};
  int fd = openRegular(path, &st);
  // One allocation, with kReadPadding spare bytes after the data so JSON can be parsed in
  // place (simdjson reads up to 64 bytes past the end).
  std::string out;
  size_t size = static_cast<size_t>(st.st_size);
  out.resize(size + kReadPadding, '\0');
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::read(fd, out.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got != size) fail("{}: read failed", path);
  out.resize(size);  // capacity (and the zeroed padding) stays
  return out;
}

void writeFileAtomic(const std::string& path, const std::string& data, int force_mode) {
  OutputSet once(/*activate=*/false);
  once.stage(path, data, force_mode);
  once.commit();
}

size_t decompressedBudget(size_t compressed_bytes) {
  size_t proportional = compressed_bytes > kMaxDecompressedBytes / kMaxCompressionRatio
                            ? kMaxDecompressedBytes
                            : compressed_bytes * kMaxCompressionRatio;
  return std::min(kMaxDecompressedBytes, std::max(kMinDecompressedBudget, proportional));
}

namespace {

// Reads a gzip-compressed file whole (benchmark graphs ship as .json.gz), keeping the same
// padding guarantee as readFile. Decompression stops at decompressedBudget() of the file size.
std::string readGzipFile(const std::string& path) {
  struct stat st {};
  int fd = openRegular(path, &st);
  gzFile f = gzdopen(fd, "rb");
  if (!f) {
    ::close(fd);
    fail("{}: cannot open for reading", path);
  }
  const size_t budget = decompressedBudget(static_cast<size_t>(st.st_size));
  std::string out;
  std::vector<char> buf(1 << 20);
  int n;
  while ((n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()))) > 0) {
    if (out.size() + static_cast<size_t>(n) > budget) {
      gzclose(f);
      fail("{}: decompresses to more than {} bytes ({}x its size, at most {} bytes): refusing a likely gzip bomb",
           path, budget, kMaxCompressionRatio, kMaxDecompressedBytes);
    }
    out.append(buf.data(), static_cast<size_t>(n));
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
    writeOutputFile(path, printFxg(m));
  } else if (ext == ".pb") {
    writeOutputFile(path, moduleToBinary(m));
  } else if (ext == ".json") {
    writeOutputFile(path, moduleToJson(m));
  } else if (ext == ".pt2") {
    fail("{}: writing .pt2 archives is not supported (write .fxg, .pb or .json)", path);
  } else {
    fail("{}: unknown output format (expected .fxg, .pb or .json)", path);
  }
}

}  // namespace fxfuse::ir
