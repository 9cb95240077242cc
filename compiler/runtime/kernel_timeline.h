// The kernels of replayed CUDA graphs as the GPU ran them (start and end of each, overlaps
// kept), and what they say about a step (docs/runtime.md "Kernel timeline"):
//
//   replay:   |--A--|                 busy: A, B or C running
//                 |---B---|  |--C--|  idle: none running (the bubble before C)
//   holding:  |A |   B    |  |  C  |  each instant belongs to the oldest kernel still running:
//                                     the one the rest of the step waits for
//
// A kernel launched early under programmatic dependent launch starts while its predecessor
// drains; its "gap before" is then negative (the overlap). Holding times and idle time add up to
// the replay's span, so they are shares of the step, unlike the durations. Recording is
// cupti_recorder.h's (CUPTI); this file is plain C++ so the analysis is tested without a GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fxfuse::runtime {

// One kernel execution, times in ns on the recorder's clock.
struct KernelSpan {
  std::string name;  // as recorded (mangled C++ names are demangled by shortKernelName)
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint32_t stream = 0;
  uint32_t grid[3] = {0, 0, 0};  // blocks; 0: not recorded
};

// A kernel name for tables: demangled, parameter list dropped, at most kShortNameChars.
constexpr size_t kShortNameChars = 96;
std::string shortKernelName(const std::string& name);
// What the tables group by: the short name and, where recorded, the grid ("name [grid 256x1x1]"),
// so one kernel template run at several shapes (a GEMM's q/k/v and down projections) stays apart.
std::string kernelLabel(const KernelSpan& k);

// The spans of each replay: replay r holds the spans starting at or after replay_starts_ns[r]
// and before replay_starts_ns[r + 1] (the recorder's clock read before each replay's launch,
// replays synchronized one after another), each replay sorted by start. Spans before the
// first mark are dropped.
std::vector<std::vector<KernelSpan>> splitReplays(std::vector<KernelSpan> spans,
                                                  const std::vector<uint64_t>& replay_starts_ns);

// One replay, measured.
struct ReplayTimes {
  double span_us = 0;  // first start to last end
  double busy_us = 0;  // union of the kernels' intervals
  std::vector<double> holding_us;     // per kernel (replay order): time it was the oldest running
  std::vector<double> gap_before_us;  // per kernel: start minus the latest end before it started (< 0: overlap)
};
ReplayTimes measureReplay(const std::vector<KernelSpan>& replay);

// Per kernel name over a replay (medians over replays of the per-replay sums).
struct KernelNameTotals {
  std::string name;  // kernelLabel
  int count = 0;     // launches per replay
  double duration_us = 0;
  double holding_us = 0;
  double idle_before_us = 0;  // idle time just before its launches (positive gaps only)
};

// A gap of the median replay where no kernel ran, with its neighbours.
struct TimelineGap {
  double at_us = 0;  // from the replay's first start
  double idle_us = 0;
  std::string after, before;  // the kernel that ended last before it, the one that started after it
};

// The step's repeating unit (a model's layer): the kernels of one period of the median
// replay's label sequence, each with the medians over every repeat of every replay that ran the
// same labels of how long after the latest end before it the kernel ends (what it adds to the
// step; negative: it ends inside an earlier kernel) and of its duration.
struct UnitKernel {
  std::string label;
  double ends_after_us = 0;
  double duration_us = 0;
};
struct RepeatedUnit {
  size_t first = 0;    // index of the unit's first kernel in the median replay
  size_t period = 0;   // kernels per unit; 0: no unit repeats kMinUnitRepeats times
  size_t repeats = 0;  // units back to back
  double unit_us = 0;  // median time from one unit's last end to the next's
  std::vector<UnitKernel> kernels;
};
constexpr size_t kMinUnitRepeats = 3;
// The period p >= 2 whose back-to-back repeats cover the most kernels of `labels` (at least
// kMinUnitRepeats repeats; ties: the shorter period), and where they start.
RepeatedUnit findRepeatedUnit(const std::vector<std::string>& labels);

struct TimelineSummary {
  int replays = 0;
  size_t kernels_per_replay = 0;  // of the median replay
  bool same_kernels = true;       // every replay ran the same number of kernels
  double span_us = 0, busy_us = 0, idle_us = 0;  // medians over replays
  std::vector<KernelNameTotals> by_name;         // most holding first
  std::vector<TimelineGap> largest_gaps;         // of the median replay, largest first
  size_t median_replay = 0;                      // index of the replay with the median span
  RepeatedUnit unit;                             // period 0 where nothing repeats
};
constexpr size_t kTimelineGapsKept = 12;
TimelineSummary summarizeTimeline(const std::vector<std::vector<KernelSpan>>& replays);

// Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev) of one replay: a complete event per
// kernel, times in µs from its first start, one track per stream.
std::string chromeTraceJson(const std::vector<KernelSpan>& replay);

}  // namespace fxfuse::runtime
