#include "tools/cli/timeline_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "compiler/runtime/cupti_recorder.h"
#include "compiler/runtime/kernel_timeline.h"
#include "ir/json_text.h"
#include "ir/output_set.h"
#include "ir/status.h"

namespace fxfuse::cli {

namespace rt = fxfuse::runtime;

namespace {

constexpr size_t kTimelineNamesShown = 16;

void cudaOk(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("bench --timeline: {}: {}", what, cudaGetErrorString(e));
}

struct Recorded {
  std::vector<std::vector<rt::KernelSpan>> replays;
  double traced_median_us = 0;  // event-timed, under the recorder
};

Recorded recordReplays(rt::Session& s, cudaStream_t stream, int replays) {
  rt::KernelRecorder recorder;
  s.capture(stream);  // instantiated while recording, so every CUPTI version sees its nodes
  s.replay(stream);
  cudaOk(cudaStreamSynchronize(stream), "first traced replay");
  cudaEvent_t a, b;
  cudaOk(cudaEventCreate(&a), "creating an event");
  cudaOk(cudaEventCreate(&b), "creating an event");
  std::vector<uint64_t> marks;
  std::vector<double> us;
  for (int i = 0; i < replays; ++i) {
    marks.push_back(recorder.now());
    cudaEventRecord(a, stream);
    s.replay(stream);
    cudaEventRecord(b, stream);
    cudaOk(cudaEventSynchronize(b), "traced replay");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    us.push_back(ms * 1000.0);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  Recorded r;
  r.replays = rt::splitReplays(recorder.collect(), marks);
  std::sort(us.begin(), us.end());
  r.traced_median_us = us[us.size() / 2];
  return r;
}

void printSummary(const rt::TimelineSummary& t, const Recorded& r, double untraced_us) {
  std::printf("timeline (CUPTI, %d replays; %zu kernels in the median replay%s; replay %.1f us traced, %.1f us "
              "untraced):\n", t.replays, t.kernels_per_replay, t.same_kernels ? "" : ", replays differ in kernels",
              r.traced_median_us, untraced_us);
  const double share = t.span_us > 0 ? 100.0 / t.span_us : 0.0;
  std::printf("  first start to last end %.1f us = kernels running %.1f us + none running %.1f us (%.1f %%)\n",
              t.span_us, t.busy_us, t.idle_us, t.idle_us * share);
  std::printf("  %9s %6s %10s %11s %6s  kernel (holding: the oldest kernel still running)\n", "holding", "%",
              "duration", "idle before", "count");
  for (size_t i = 0; i < t.by_name.size() && i < kTimelineNamesShown; ++i) {
    const rt::KernelNameTotals& n = t.by_name[i];
    std::printf("  %6.1f us %5.1f%% %7.1f us %8.1f us %6d  %s\n", n.holding_us, n.holding_us * share, n.duration_us,
                n.idle_before_us, n.count, n.name.c_str());
  }
  if (t.by_name.size() > kTimelineNamesShown)
    std::printf("  ... %zu more kernel names (all of them in --json)\n", t.by_name.size() - kTimelineNamesShown);
  if (t.unit.period > 0) {
    std::printf("  repeating unit: %zu kernels x %zu (kernels %zu to %zu of the median replay), %.1f us each:\n",
                t.unit.period, t.unit.repeats, t.unit.first, t.unit.first + t.unit.period * t.unit.repeats - 1,
                t.unit.unit_us);
    std::printf("  %10s %10s  kernel (ends after: its end minus the latest end before it)\n", "ends after", "duration");
    for (const rt::UnitKernel& k : t.unit.kernels)
      std::printf("  %7.2f us %7.2f us  %s\n", k.ends_after_us, k.duration_us, k.label.c_str());
  }
  if (!t.largest_gaps.empty()) std::printf("  largest gaps of the median replay (none running):\n");
  for (const rt::TimelineGap& g : t.largest_gaps)
    std::printf("  %6.2f us at %8.1f us: after %s, before %s\n", g.idle_us, g.at_us, g.after.c_str(), g.before.c_str());
}

std::string summaryJson(const rt::TimelineSummary& t, const Recorded& r) {
  std::string names, gaps, unit;
  for (const rt::KernelNameTotals& n : t.by_name)
    names += fmt::format("{}{{\"kernel\": {}, \"count\": {}, \"duration_us\": {:.3f}, \"holding_us\": {:.3f}, "
                         "\"idle_before_us\": {:.3f}}}", names.empty() ? "" : ", ", ir::jsonString(n.name), n.count,
                         n.duration_us, n.holding_us, n.idle_before_us);
  for (const rt::TimelineGap& g : t.largest_gaps)
    gaps += fmt::format("{}{{\"at_us\": {:.3f}, \"idle_us\": {:.3f}, \"after\": {}, \"before\": {}}}",
                        gaps.empty() ? "" : ", ", g.at_us, g.idle_us, ir::jsonString(g.after), ir::jsonString(g.before));
  for (const rt::UnitKernel& k : t.unit.kernels)
    unit += fmt::format("{}{{\"kernel\": {}, \"ends_after_us\": {:.3f}, \"duration_us\": {:.3f}}}",
                        unit.empty() ? "" : ", ", ir::jsonString(k.label), k.ends_after_us, k.duration_us);
  return fmt::format("{{\"replays\": {}, \"traced_median_us\": {:.3f}, \"kernels_per_replay\": {}, \"same_kernels\": {}, "
                     "\"span_us\": {:.3f}, \"busy_us\": {:.3f}, \"idle_us\": {:.3f}, \"kernels\": [{}], \"gaps\": [{}], "
                     "\"unit\": {{\"first\": {}, \"period\": {}, \"repeats\": {}, \"unit_us\": {:.3f}, \"kernels\": [{}]}}}}",
                     t.replays, r.traced_median_us, t.kernels_per_replay, t.same_kernels ? "true" : "false", t.span_us,
                     t.busy_us, t.idle_us, names, gaps, t.unit.first, t.unit.period, t.unit.repeats, t.unit.unit_us, unit);
}

}  // namespace

std::string printTimeline(rt::Session& s, cudaStream_t stream, int replays, const std::string& trace_path,
                          double untraced_us) {
  const Recorded r = recordReplays(s, stream, replays);
  const rt::TimelineSummary t = rt::summarizeTimeline(r.replays);
  if (t.kernels_per_replay == 0)
    fail("bench --timeline: CUPTI recorded no kernels of the replays (another profiler attached?)");
  printSummary(t, r, untraced_us);
  if (!trace_path.empty()) {
    ir::writeOutputFile(trace_path, rt::chromeTraceJson(r.replays[t.median_replay]));
    std::printf("  median replay as a Chrome trace: %s (ui.perfetto.dev)\n", trace_path.c_str());
  }
  return summaryJson(t, r);
}

}  // namespace fxfuse::cli
