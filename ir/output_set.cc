// Safe, all-or-nothing output files (see output_set.h for the guarantees).
#include "ir/output_set.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "ir/status.h"

namespace fxfuse::ir {

namespace {

OutputSet* g_active = nullptr;

mode_t currentUmask() {
  mode_t m = ::umask(0);
  ::umask(m);
  return m;
}

std::string dirOf(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string baseOf(const std::string& path) {
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void writeAll(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("{}: write failed: {}", path, std::strerror(n < 0 ? errno : EIO));
    done += static_cast<size_t>(n);
  }
}

// Writes into an existing character device or FIFO without replacing it. A FIFO nobody
// reads is refused (opening it for writing would block forever).
void writeInPlace(const std::string& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENXIO) fail("{}: is a FIFO with no reader; refusing to wait for one", path);
    fail("{}: cannot open for writing: {}", path, std::strerror(errno));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode))) {
    ::close(fd);
    fail("{}: changed while being written; refusing to write it", path);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  try {
    writeAll(fd, data, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

void syncDirectory(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  if (::fsync(fd) != 0) {
    // best effort: the files themselves are already fsync'd
  }
  ::close(fd);
}

}  // namespace

OutputSet::OutputSet(bool activate) : active_(activate) {
  if (activate) {
    if (g_active) fail("internal: two output sets open at once");
    g_active = this;
  }
}

OutputSet::~OutputSet() {
  discard();
  if (active_ && g_active == this) g_active = nullptr;
}

OutputSet* OutputSet::active() { return g_active; }

void OutputSet::stage(const std::string& path, const std::string& data, int force_mode) {
  for (auto it = pending_.begin(); it != pending_.end(); ++it)
    if (it->target == path) {
      if (!it->temp.empty()) ::unlink(it->temp.c_str());
      pending_.erase(it);
      break;
    }
  Pending p;
  p.target = path;
  mode_t mode = 0666 & ~currentUmask();
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    p.existed = true;
    if (S_ISLNK(st.st_mode)) fail("{}: is a symbolic link; refusing to replace it (name the file it points to)", path);
    if (S_ISDIR(st.st_mode)) fail("{}: is a directory", path);
    if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) {
      p.data = data;
      pending_.push_back(std::move(p));
      return;
    }
    if (!S_ISREG(st.st_mode)) fail("{}: is not a regular file; refusing to replace it", path);
    if (!(st.st_mode & S_IWUSR))
      fail("{}: is read-only (mode {:04o}); refusing to replace it", path, st.st_mode & 07777);
    mode = st.st_mode & 0777;
  } else if (errno != ENOENT) {
    fail("{}: cannot write here: {}", path, std::strerror(errno));
  }
  if (force_mode >= 0) mode = static_cast<mode_t>(force_mode) & 0777;
  std::string dir = dirOf(path);
  std::string tmpl = dir + "/." + baseOf(path).substr(0, 200) + ".XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  int fd = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd < 0) fail("{}: cannot create a file in {}: {}", path, dir, std::strerror(errno));
  p.temp = name.data();
  try {
    writeAll(fd, data, path);
    if (::fchmod(fd, mode) != 0) fail("{}: cannot set the file mode: {}", path, std::strerror(errno));
    // root rewriting another user's file keeps its owner (best effort)
    if (p.existed && ::geteuid() == 0 && (st.st_uid != 0 || st.st_gid != 0) && ::fchown(fd, st.st_uid, st.st_gid) != 0) {
      // best effort: the file is still written, owned by root
    }
    if (::fsync(fd) != 0) fail("{}: write failed (fsync): {}", path, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(p.temp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    int e = errno;
    ::unlink(p.temp.c_str());
    fail("{}: write failed (close): {}", path, std::strerror(e));
  }
  pending_.push_back(std::move(p));
}

void OutputSet::createDirectories(const std::string& dir) {
  std::string cur;
  size_t pos = 0;
  while (pos <= dir.size()) {
    size_t slash = dir.find('/', pos);
    if (slash == std::string::npos) slash = dir.size();
    cur = dir.substr(0, slash);
    pos = slash + 1;
    if (cur.empty() || cur == "." || cur == "..") continue;
    struct stat st;
    if (::stat(cur.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) fail("{}: {} exists and is not a directory", dir, cur);
      continue;
    }
    if (::mkdir(cur.c_str(), 0777) != 0 && errno != EEXIST) fail("{}: cannot create {}: {}", dir, cur, std::strerror(errno));
    created_dirs_.push_back(cur);
  }
}

void OutputSet::commit() {
  // In-place targets first: nothing has been renamed yet, so a failure here leaves nothing new.
  for (const auto& p : pending_)
    if (p.temp.empty()) writeInPlace(p.target, p.data);
  std::set<std::string> dirs;
  for (size_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    if (p.temp.empty()) continue;
    if (::rename(p.temp.c_str(), p.target.c_str()) != 0) {
      int e = errno;
      for (size_t j = 0; j < i; ++j)
        if (pending_[j].placed && !pending_[j].existed) ::unlink(pending_[j].target.c_str());
      discard();
      fail("{}: cannot move the written file into place: {}", p.target, std::strerror(e));
    }
    p.temp.clear();
    p.placed = true;
    dirs.insert(dirOf(p.target));
  }
  for (const auto& d : dirs) syncDirectory(d);
  pending_.clear();
  created_dirs_.clear();
}

void OutputSet::discard() {
  for (const auto& p : pending_) {
    if (!p.temp.empty()) ::unlink(p.temp.c_str());
  }
  pending_.clear();
  for (auto it = created_dirs_.rbegin(); it != created_dirs_.rend(); ++it) ::rmdir(it->c_str());
  created_dirs_.clear();
}

void writeOutputFile(const std::string& path, const std::string& data) {
  if (OutputSet* set = OutputSet::active()) {
    set->stage(path, data);
    return;
  }
  OutputSet once(/*activate=*/false);
  once.stage(path, data);
  once.commit();
}

void createOutputDirectories(const std::string& dir) {
  if (OutputSet* set = OutputSet::active()) {
    set->createDirectories(dir);
    return;
  }
  OutputSet once(/*activate=*/false);
  once.createDirectories(dir);
  once.commit();
}

}  // namespace fxfuse::ir
