// The on-disk cache of NVRTC cubins (no GPU needed to test). Entries live in a private
// directory (private_files.h): $FXFUSE_CACHE_DIR, else $XDG_CACHE_HOME/fxfuse/kernels, else
// ~/.cache/fxfuse/kernels, else /tmp/fxfuse-kernels-<uid>; a directory that another user
// owns or can write is refused. Each entry is named by its key, the SHA-256 of the kernel
// source, the compile options and the device (target + compiler version), and starts with
// a header line repeating the key: a file whose header does not match (stale, truncated,
// renamed) is ignored and compiled again.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace fxfuse::runtime {

std::string kernelCacheDir();
std::string kernelCacheKey(const std::string& source, const std::vector<std::string>& options,
                           const std::string& device);
// The cached cubin of `key`, or nullopt. Throws FxError when `dir` is not private.
std::optional<std::string> loadCachedKernel(const std::string& dir, const std::string& key);
// Stores a cubin (best effort: a read-only cache is not an error). Throws FxError when `dir`
// exists and is not private.
void storeCachedKernel(const std::string& dir, const std::string& key, const std::string& cubin);

}  // namespace fxfuse::runtime
