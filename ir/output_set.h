// Safe, all-or-nothing output files.
//
// Every file is first written to a temporary created exclusively (mkstemp: O_EXCL, an
// unpredictable name, mode 0600) in the target's own directory, given the mode the target
// will have (an existing file's mode and owner are kept; a new file gets 0666 & ~umask),
// fsync'd, and renamed over the target only when the whole set is committed. So:
//   * a symbolic link planted at any name is never followed;
//   * a reader never sees half a file, and of two concurrent writers one file wins whole;
//   * an output set (every file one command writes: -o, --report, --html, --dump-dir ...)
//     is all-or-nothing: if any output fails before commit, no temporary and no new file
//     or directory is left, and existing targets are untouched.
// Targets that must not be replaced are handled explicitly: a character device or FIFO
// (/dev/null, a pipe) is written in place at commit (a FIFO without a reader is refused
// instead of blocking); a symbolic link, directory, block device or socket is refused; a
// read-only file (no owner write bit, e.g. 0444) is refused rather than replaced.
//
// The CLI opens one OutputSet for the whole command (tools/cli/main.cc) and commits it
// when the command finishes with exit code 0 or 1; writeOutputFile() stages into it.
// Without an open set, writeOutputFile() writes and commits at once.
#pragma once

#include <string>
#include <sys/types.h>
#include <vector>

namespace fxfuse::ir {

class OutputSet {
 public:
  // `activate`: become the set writeOutputFile() stages into (one at a time).
  explicit OutputSet(bool activate = true);
  ~OutputSet();  // discards whatever was not committed
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;

  // Writes `data` to a private temporary next to `path` (replacing an earlier staging of
  // the same path). Throws FxError naming `path` on any failure. `force_mode` >= 0 gives the
  // file that mode instead of the target's or the umask's (0600 for private files).
  void stage(const std::string& path, const std::string& data, int force_mode = -1);
  // Creates `dir` (and missing parents) for outputs; directories created here are removed
  // again when the set is discarded.
  void createDirectories(const std::string& dir);
  // Moves every staged file into place. On failure, files that did not exist before are
  // removed again and FxError is thrown.
  void commit();
  // Removes temporaries and the directories this set created.
  void discard();

  static OutputSet* active();

 private:
  struct Pending {
    std::string target;
    std::string temp;     // empty for in-place targets
    std::string data;     // in-place targets only (written at commit)
    bool existed = false;
    bool placed = false;  // renamed into place by commit()
  };
  std::vector<Pending> pending_;
  std::vector<std::string> created_dirs_;
  bool active_ = false;
};

// Stages into the active OutputSet, or writes `path` safely at once when none is open.
void writeOutputFile(const std::string& path, const std::string& data);
// Creates an output directory through the active OutputSet (or directly when none is open).
void createOutputDirectories(const std::string& dir);

}  // namespace fxfuse::ir
