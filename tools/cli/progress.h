// Progress on stderr for work that takes a while: commands name their current stage
// (progress::stage("making inputs")); once a command has run longer than ~2 s, a ticker
// thread keeps one status line on stderr up to date ("fxfuse verify: making inputs, 4 s").
// Only when stderr is a terminal, never with --quiet, and the line is erased when the
// command ends, so pipes, files and CI logs see nothing of it.
// FXFUSE_PROGRESS_AFTER_S overrides the 2 s delay (tests use 0).
#pragma once

#include <string>

namespace fxfuse::cli::progress {

// Starts timing `command` (from main, before the command runs).
void begin(const std::string& command);
// The stage the command is in now; shown from the next tick.
void stage(const std::string& what);
// Erases the status line before the command prints results to a terminal; the next tick
// draws it again below them.
void clear();
// --quiet: no progress for the rest of the process.
void setQuiet(bool quiet);
// Stops the ticker and erases the status line (idempotent; main calls it before exiting).
void end();

}  // namespace fxfuse::cli::progress
