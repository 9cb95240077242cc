// Files that only this user may plant or change: the multi-GPU rendezvous directory and the
// NVRTC kernel cache. A private directory is created with mode 0700; an existing one must be
// a real directory (not a symlink) owned by the effective user with no group or other write
// permission, else it is refused with one line naming it. Files inside are read only when
// they are regular files owned by the user with no group/other write (O_NOFOLLOW).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace fxfuse::runtime {

// Creates `dir` (and missing parents, 0700) or checks an existing one; `what` names it in
// messages ("kernel cache directory").
void ensurePrivateDirectory(const std::string& dir, const std::string& what);
// Checks an existing directory (FxError when missing or not private).
void checkPrivateDirectory(const std::string& dir, const std::string& what);
// A private file's contents, or nullopt when it is missing or not private.
std::optional<std::string> readPrivateFile(const std::string& path);
// `bytes` random bytes from the kernel (getrandom), as lowercase hex.
std::string randomHex(size_t bytes);
// SHA-256 (OpenSSL libcrypto) of each part, length-prefixed so parts cannot run together,
// as lowercase hex.
std::string sha256Hex(const std::vector<std::string>& parts);

}  // namespace fxfuse::runtime
