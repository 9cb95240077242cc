// The compile report: the JSON contract of `fxfuse compile --report FILE`
// (docs/report.md) and the human summary printed by `fxfuse compile`.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "passes/toolkit/options.h"
#include "passes/pipeline/pipeline.h"

namespace fxfuse::compiler {

struct ReportContext {
  std::string input;   // path, or "<default graph>"
  std::string output;  // path or empty
  double load_ms = 0;
  double write_ms = 0;
  double total_ms = 0;  // load + passes + write
};

nlohmann::json reportJson(const CompileResult& r, const CompileOptions& opts, const ReportContext& rc);

// Human summary: passes table, canonical ops found, fusions made, unfused sites.
std::string humanSummary(const CompileResult& r, const CompileOptions& opts, const ReportContext& rc);

// Decisions as text (`fxfuse explain`); `node` filters by anchor node or source node name.
std::string explainText(const CompileResult& r, const std::string& node);

// True for decisions about fusion sites (the report's "unfused" list).
bool isFusionPattern(const std::string& pattern);

}  // namespace fxfuse::compiler
