// The NVRTC cubin cache: private directory, SHA-256 keys, header-checked entries (kernel_cache.h).
#include "compiler/runtime/kernel_cache.h"

#include <unistd.h>

#include <cstdlib>

#include "compiler/runtime/private_files.h"
#include "ir/io.h"
#include "ir/status.h"

namespace fxfuse::runtime {

namespace {

const char* const kDirWhat = "kernel cache directory";

std::string entryPath(const std::string& dir, const std::string& key) { return dir + "/" + key + ".cubin"; }
std::string entryHeader(const std::string& key) { return "fxfuse-cubin-v1 " + key + "\n"; }

}  // namespace

std::string kernelCacheDir() {
  if (const char* d = std::getenv("FXFUSE_CACHE_DIR")) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME")) return std::string(x) + "/fxfuse/kernels";
  if (const char* h = std::getenv("HOME")) return std::string(h) + "/.cache/fxfuse/kernels";
  return "/tmp/fxfuse-kernels-" + std::to_string(::geteuid());
}

std::string kernelCacheKey(const std::string& source, const std::vector<std::string>& options,
                           const std::string& device) {
  std::vector<std::string> parts = {"fxfuse-kernel-cache-v1", source, device};
  parts.insert(parts.end(), options.begin(), options.end());
  return sha256Hex(parts);
}

std::optional<std::string> loadCachedKernel(const std::string& dir, const std::string& key) {
  ensurePrivateDirectory(dir, kDirWhat);
  std::optional<std::string> bytes = readPrivateFile(entryPath(dir, key));
  const std::string header = entryHeader(key);
  if (!bytes || bytes->size() <= header.size() || bytes->compare(0, header.size(), header) != 0) return std::nullopt;
  return bytes->substr(header.size());
}

void storeCachedKernel(const std::string& dir, const std::string& key, const std::string& cubin) {
  ensurePrivateDirectory(dir, kDirWhat);
  try {
    ir::writeFileAtomic(entryPath(dir, key), entryHeader(key) + cubin, 0600);
  } catch (const FxError&) {
    // A read-only cache is not an error: the kernel is compiled again next time.
  }
}

}  // namespace fxfuse::runtime
