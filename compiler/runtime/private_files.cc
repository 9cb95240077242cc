// Private directories and files, random names and SHA-256 keys (see private_files.h).
#include "compiler/runtime/private_files.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "ir/status.h"

namespace fxfuse::runtime {

namespace {

std::string hex(const unsigned char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

// Empty when `st` is private to this user, else why not.
std::string notPrivate(const struct stat& st) {
  if (st.st_uid != ::geteuid()) return fmt::format("owned by uid {}, not by this user (uid {})", st.st_uid, ::geteuid());
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return fmt::format("writable by others (mode {:04o})", st.st_mode & 07777);
  return {};
}

}  // namespace

void checkPrivateDirectory(const std::string& dir, const std::string& what) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) fail("{} {} does not exist", what, dir);
  if (S_ISLNK(st.st_mode)) fail("{} {} is a symbolic link; refusing it (name the real directory)", what, dir);
  if (!S_ISDIR(st.st_mode)) fail("{} {} is not a directory", what, dir);
  std::string why = notPrivate(st);
  if (!why.empty()) fail("{} {} is {}; refusing it (use a directory only you can write, mode 0700)", what, dir, why);
}

void ensurePrivateDirectory(const std::string& dir, const std::string& what) {
  std::string cur;
  size_t pos = 0;
  while (pos < dir.size()) {
    size_t slash = dir.find('/', pos);
    if (slash == std::string::npos) slash = dir.size();
    cur = dir.substr(0, slash);
    pos = slash + 1;
    if (cur.empty()) continue;
    if (::mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST)
      fail("{} {}: cannot create {}: {}", what, dir, cur, std::strerror(errno));
  }
  checkPrivateDirectory(dir, what);
}

std::optional<std::string> readPrivateFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !notPrivate(st).empty()) {
    ::close(fd);
    return std::nullopt;
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got != out.size()) return std::nullopt;
  return out;
}

std::string randomHex(size_t bytes) {
  std::string buf(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    ssize_t n = ::getrandom(buf.data() + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot read random bytes: {}", std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  return hex(reinterpret_cast<const unsigned char*>(buf.data()), bytes);
}

std::string sha256Hex(const std::vector<std::string>& parts) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (!ctx || EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx);
    fail("SHA-256 is not available from libcrypto");
  }
  for (const auto& p : parts) {
    std::string len = std::to_string(p.size()) + ":";
    EVP_DigestUpdate(ctx, len.data(), len.size());
    EVP_DigestUpdate(ctx, p.data(), p.size());
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx, md, &n);
  EVP_MD_CTX_free(ctx);
  return hex(md, n);
}

}  // namespace fxfuse::runtime
