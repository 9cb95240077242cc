// The NVRTC cubin cache (compiler/runtime/kernel_cache.h) without a GPU: keys are SHA-256 of
// source, options and device; the directory is created private and refused when others can
// write it; entries with a wrong header (stale, planted) or behind a symlink are not loaded.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "compiler/runtime/kernel_cache.h"
#include "compiler/runtime/private_files.h"
#include "ir/io.h"

using namespace fxfuse::runtime;

namespace {
std::string freshDir() {
  std::string t = (std::filesystem::temp_directory_path() / "fxfuse-cache-test-XXXXXX").string();
  REQUIRE(mkdtemp(t.data()) != nullptr);
  return t;
}
}  // namespace

TEST_CASE("kernel cache: the key is SHA-256 of source, options and device") {
  // SHA-256 itself, on a known vector (the empty string, no length prefix involved)
  CHECK(sha256Hex({}) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  std::string k = kernelCacheKey("__global__ void f() {}", {"-std=c++17"}, "sm_90a/nvrtc-12.4");
  CHECK(k.size() == 64);
  CHECK(k == kernelCacheKey("__global__ void f() {}", {"-std=c++17"}, "sm_90a/nvrtc-12.4"));
  CHECK(k != kernelCacheKey("__global__ void g() {}", {"-std=c++17"}, "sm_90a/nvrtc-12.4"));
  CHECK(k != kernelCacheKey("__global__ void f() {}", {"-std=c++14"}, "sm_90a/nvrtc-12.4"));
  CHECK(k != kernelCacheKey("__global__ void f() {}", {"-std=c++17"}, "sm_80/nvrtc-12.4"));
  // parts are length-prefixed: moving text between source and options changes the key
  CHECK(kernelCacheKey("ab", {"c"}, "d") != kernelCacheKey("a", {"bc"}, "d"));
}

TEST_CASE("kernel cache: store then load in a new private directory (created 0700)") {
  const std::string root = freshDir();
  const std::string dir = root + "/nested/kernels";
  std::string key = kernelCacheKey("src", {}, "dev");
  CHECK_FALSE(loadCachedKernel(dir, key).has_value());
  struct stat st;
  REQUIRE(stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  storeCachedKernel(dir, key, std::string("cubin\0bytes", 11));
  auto got = loadCachedKernel(dir, key);
  REQUIRE(got.has_value());
  CHECK(*got == std::string("cubin\0bytes", 11));
  std::filesystem::remove_all(root);
}

TEST_CASE("kernel cache: a directory others can write is refused with its name") {
  const std::string dir = freshDir();
  REQUIRE(chmod(dir.c_str(), 0777) == 0);
  std::string key = kernelCacheKey("src", {}, "dev");
  REQUIRE_THROWS_WITH(loadCachedKernel(dir, key), Catch::Contains("kernel cache directory") &&
                                                      Catch::Contains(dir) && Catch::Contains("writable by others"));
  REQUIRE_THROWS_WITH(storeCachedKernel(dir, key, "x"), Catch::Contains("writable by others"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("kernel cache: stale, planted or linked entries are not loaded") {
  const std::string dir = freshDir();
  std::string key = kernelCacheKey("src", {}, "dev");
  // a raw cubin without the header (the old cache format, or a planted file)
  fxfuse::ir::writeFileAtomic(dir + "/" + key + ".cubin", "raw cubin");
  CHECK_FALSE(loadCachedKernel(dir, key).has_value());
  // another key's entry renamed to this key
  std::string other = kernelCacheKey("other", {}, "dev");
  storeCachedKernel(dir, other, "other cubin");
  std::filesystem::rename(dir + "/" + other + ".cubin", dir + "/" + key + ".cubin");
  CHECK_FALSE(loadCachedKernel(dir, key).has_value());
  // a symlink to a valid entry
  storeCachedKernel(dir, other, "other cubin");
  std::filesystem::remove(dir + "/" + key + ".cubin");
  REQUIRE(symlink((dir + "/" + other + ".cubin").c_str(), (dir + "/" + key + ".cubin").c_str()) == 0);
  CHECK_FALSE(loadCachedKernel(dir, key).has_value());
  // a group-writable entry
  std::filesystem::remove(dir + "/" + key + ".cubin");
  storeCachedKernel(dir, key, "mine");
  REQUIRE(chmod((dir + "/" + key + ".cubin").c_str(), 0664) == 0);
  CHECK_FALSE(loadCachedKernel(dir, key).has_value());
  std::filesystem::remove_all(dir);
}
