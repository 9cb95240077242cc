// Shared checks for the importer fuzz targets (built by tools/run_fuzzers.sh with clang,
// libFuzzer, ASan and UBSan).
//
// Each target feeds the input to one reader. A reader may reject the input, but only with
// FxError (any other exception is reported as a finding). On success the module must
// survive the verifier and printing; when it verifies, its .fxg text must parse back and
// print identically (the .fxg stability promise).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "ir/fxg.h"
#include "ir/graph.h"
#include "ir/status.h"
#include "ir/verifier.h"

namespace fxfuse::fuzz {

[[noreturn]] inline void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "\n==fxfuse-fuzz== FINDING: %s\n%s\n", what, detail.substr(0, 1 << 16).c_str());
  std::fflush(stderr);
  std::abort();
}

inline void checkModule(ir::Module& m) {
  std::vector<std::string> problems = ir::verifyModule(m);
  std::string text = ir::printFxg(m);
  ir::FxgPrintOptions with_locs;
  with_locs.locations = true;
  (void)ir::printFxg(m, with_locs);
  if (!problems.empty()) return;  // an invalid module is not printed back
  // FXFUSE_FUZZ_NO_ROUNDTRIP=1 skips the .fxg stability check (to look past a known
  // finding for memory errors).
  static const bool skip = std::getenv("FXFUSE_FUZZ_NO_ROUNDTRIP") != nullptr;
  if (skip) return;
  std::unique_ptr<ir::Module> again;
  try {
    again = ir::parseFxg(text, "reprint.fxg");
  } catch (const FxError& e) {
    finding("printed .fxg does not parse back", std::string(e.what()) + "\n--- text ---\n" + text);
  }
  std::string text2 = ir::printFxg(*again);
  if (text2 != text) finding("print(parse(print(m))) != print(m)", "--- first ---\n" + text + "--- second ---\n" + text2);
}

// Runs `read` (returning a unique_ptr<Module>) and the checks; FxError is a clean rejection.
template <typename F>
int run(F read) {
  std::unique_ptr<ir::Module> m;
  try {
    m = read();
  } catch (const FxError&) {
    return 0;
  } catch (const std::bad_alloc&) {
    finding("std::bad_alloc escaped the reader", "");
  } catch (const std::exception& e) {
    finding("non-FxError exception escaped the reader", e.what());
  }
  if (!m) finding("reader returned null", "");
  try {
    checkModule(*m);
  } catch (const FxError& e) {
    finding("FxError while verifying/printing an imported module", e.what());
  } catch (const std::exception& e) {
    finding("exception while verifying/printing an imported module", e.what());
  }
  return 0;
}

// Runs a target whose stages catch the FxError of a clean rejection themselves: any exception
// escaping `stages` is a finding (`what` names what it escaped, e.g. "the pipeline").
template <typename F>
int runStages(const char* what, F stages) {
  const std::string from(what);
  try {
    stages();
  } catch (const std::bad_alloc&) {
    finding(("std::bad_alloc escaped " + from).c_str(), "");
  } catch (const FxError& e) {
    finding("FxError escaped a stage that should have caught it", e.what());
  } catch (const std::exception& e) {
    finding(("non-FxError exception escaped " + from).c_str(), e.what());
  }
  return 0;
}

}  // namespace fxfuse::fuzz
