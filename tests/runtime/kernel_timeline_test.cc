// The kernel timeline's arithmetic without a GPU (compiler/runtime/kernel_timeline.h): replays
// split by the recorder's marks, idle gaps, overlaps under programmatic launch, holding times that
// add up to the span, per-name medians, and the Chrome trace's JSON.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "compiler/runtime/kernel_timeline.h"

namespace rt = fxfuse::runtime;

namespace {

// Spans in µs (converted to ns) on stream 7.
rt::KernelSpan span(const std::string& name, double start_us, double end_us) {
  return {name, static_cast<uint64_t>(start_us * 1000), static_cast<uint64_t>(end_us * 1000), 7};
}

}  // namespace

TEST_CASE("a gap where no kernel runs is idle; an overlap is a negative gap", "[runtime][timeline]") {
  //  A 0..10, B 8..20 (starts under A: programmatic launch), C 23..30 (3 us idle before it)
  const rt::ReplayTimes t = rt::measureReplay({span("A", 0, 10), span("B", 8, 20), span("C", 23, 30)});
  CHECK(t.span_us == Approx(30));
  CHECK(t.busy_us == Approx(27));
  CHECK(t.gap_before_us[1] == Approx(-2));
  CHECK(t.gap_before_us[2] == Approx(3));
  // A holds 0..10 (the oldest running), B holds 10..20, C 23..30.
  CHECK_THAT(t.holding_us, Catch::Matchers::Approx(std::vector<double>{10, 10, 7}));
}

TEST_CASE("holding times and idle time add up to the span", "[runtime][timeline]") {
  // B runs entirely inside A; C overlaps A's end; D starts after a gap, E inside D.
  const std::vector<rt::KernelSpan> r = {span("A", 0, 20), span("B", 2, 5), span("C", 15, 25), span("D", 26, 40),
                                         span("E", 30, 35)};
  const rt::ReplayTimes t = rt::measureReplay(r);
  double holding = 0;
  for (double h : t.holding_us) holding += h;
  CHECK(holding == Approx(t.busy_us));
  CHECK(t.span_us - t.busy_us == Approx(1));           // 25..26
  CHECK(t.holding_us[1] == Approx(0));                  // B never the oldest
  CHECK(t.gap_before_us[3] == Approx(1));               // after C's end, the latest so far
  CHECK(t.gap_before_us[2] == Approx(-5));              // A still running until 20
}

TEST_CASE("replays are split by the recorder's marks and sorted by start", "[runtime][timeline]") {
  // Records arrive in any order; one before the first mark (the warm-up replay) is dropped.
  const auto replays = rt::splitReplays({span("y", 105, 110), span("warm", 1, 2), span("x", 100, 104),
                                         span("z", 205, 209), span("x", 201, 204)},
                                        {50000, 200000});
  REQUIRE(replays.size() == 2);
  REQUIRE(replays[0].size() == 2);
  CHECK(replays[0][0].name == "x");
  CHECK(replays[0][1].name == "y");
  REQUIRE(replays[1].size() == 2);
  CHECK(replays[1][0].start_ns == 201000);
}

TEST_CASE("the summary takes medians over replays and names the largest gaps", "[runtime][timeline]") {
  // Three replays of gemm, norm, gemm; the middle one has the median span (31 us).
  std::vector<std::vector<rt::KernelSpan>> replays = {
      {span("gemm", 0, 10), span("norm", 12, 14), span("gemm", 15, 30)},
      {span("gemm", 0, 10), span("norm", 11, 14), span("gemm", 14, 31)},
      {span("gemm", 0, 12), span("norm", 15, 17), span("gemm", 17, 40)},
  };
  const rt::TimelineSummary s = rt::summarizeTimeline(replays);
  CHECK(s.replays == 3);
  CHECK(s.same_kernels);
  CHECK(s.kernels_per_replay == 3);
  CHECK(s.median_replay == 1);
  CHECK(s.span_us == Approx(31));
  CHECK(s.idle_us == Approx(3));  // spans 30/31/40 with idle 3/1/3
  REQUIRE(s.by_name.size() == 2);
  CHECK(s.by_name[0].name == "gemm");  // most holding first
  CHECK(s.by_name[0].count == 2);
  CHECK(s.by_name[0].holding_us == Approx(27));  // per-replay sums 25, 27, 35
  CHECK(s.by_name[1].idle_before_us == Approx(2));  // 2, 1, 3
  REQUIRE(s.largest_gaps.size() == 1);  // the median replay's one gap: 10..11
  CHECK(s.largest_gaps[0].idle_us == Approx(1));
  CHECK(s.largest_gaps[0].at_us == Approx(10));
  CHECK(s.largest_gaps[0].after == "gemm");
  CHECK(s.largest_gaps[0].before == "norm");
}

TEST_CASE("replays that ran different kernels are flagged", "[runtime][timeline]") {
  const rt::TimelineSummary s = rt::summarizeTimeline({{span("a", 0, 1)}, {span("a", 0, 1), span("b", 2, 3)}});
  CHECK_FALSE(s.same_kernels);
  CHECK(rt::summarizeTimeline({}).replays == 0);
}

TEST_CASE("kernel names are demangled and cut to their name", "[runtime][timeline]") {
  // void fxfuse::(anonymous namespace)::gemm<8, true>(float const*, int)
  CHECK(rt::shortKernelName("_ZN6fxfuse12_GLOBAL__N_14gemmILi8ELb1EEEvPKfi") == "fxfuse::gemm<8, true>");
  CHECK(rt::shortKernelName("sm90_xmma_gemm_e4m3bf16") == "sm90_xmma_gemm_e4m3bf16");  // not mangled: as is
  const std::string longest = rt::shortKernelName(std::string(300, 'k'));
  CHECK(longest.size() == rt::kShortNameChars);
  CHECK(longest.substr(longest.size() - 3) == "...");
}

TEST_CASE("the Chrome trace is one complete event per kernel, escaped", "[runtime][timeline]") {
  const std::string json = rt::chromeTraceJson({span("k\"1", 10, 12.5), span("k2", 11, 20)});
  CHECK(json.find("\"name\": \"k\\\"1\"") != std::string::npos);
  CHECK(json.find("\"ts\": 0.000, \"dur\": 2.500") != std::string::npos);
  CHECK(json.find("\"ts\": 1.000, \"dur\": 9.000") != std::string::npos);
  CHECK(json.find("\"tid\": 7") != std::string::npos);
  CHECK(rt::chromeTraceJson({}) == "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n]}\n");
}

TEST_CASE("one kernel run at two grids is two rows", "[runtime][timeline]") {
  // A GEMM template as the q/k/v projection (grid 384) and the down projection (grid 256).
  rt::KernelSpan qkv = span("gemm", 0, 10), down = span("gemm", 10, 30);
  qkv.grid[0] = 384;
  qkv.grid[1] = qkv.grid[2] = 1;
  down.grid[0] = 256;
  down.grid[1] = down.grid[2] = 1;
  CHECK(rt::kernelLabel(qkv) == "gemm [grid 384x1x1]");
  CHECK(rt::kernelLabel(span("gemm", 0, 1)) == "gemm");  // no grid recorded
  const rt::TimelineSummary s = rt::summarizeTimeline({{qkv, down}});
  REQUIRE(s.by_name.size() == 2);
  CHECK(s.by_name[0].name == "gemm [grid 256x1x1]");
  CHECK(s.by_name[0].holding_us == Approx(20));
}

TEST_CASE("the repeating unit is the period that covers the most kernels", "[runtime][timeline]") {
  // embed, then 4 layers of (norm, gemm, attn), then the head: period 3 from kernel 1.
  const std::vector<std::string> step = {"embed", "norm", "gemm", "attn", "norm", "gemm", "attn",
                                         "norm", "gemm", "attn", "norm", "gemm", "attn", "head"};
  const rt::RepeatedUnit u = rt::findRepeatedUnit(step);
  CHECK(u.first == 1);
  CHECK(u.period == 3);
  CHECK(u.repeats == 4);
  // Period 2 repeats "a b" 3 times; the 6-kernel unit "a b a b a c" would cover no more.
  CHECK(rt::findRepeatedUnit({"a", "b", "a", "b", "a", "b", "c"}).period == 2);
  // Fewer than kMinUnitRepeats repeats: no unit.
  CHECK(rt::findRepeatedUnit({"x", "y", "x", "y", "z"}).period == 0);
  CHECK(rt::findRepeatedUnit({}).period == 0);
}

TEST_CASE("the unit's kernels carry medians over repeats of what each adds to the step", "[runtime][timeline]") {
  // Three layers of (gemm 10 us, norm starting 1 us before the gemm ends, ending 2 us after it).
  std::vector<rt::KernelSpan> replay;
  for (int layer = 0; layer < 3; ++layer) {
    const double t0 = 12.0 * layer;
    replay.push_back(span("gemm", t0, t0 + 10));
    replay.push_back(span("norm", t0 + 9, t0 + 12));
  }
  const rt::TimelineSummary s = rt::summarizeTimeline({replay, replay});
  REQUIRE(s.unit.period == 2);
  CHECK(s.unit.repeats == 3);
  REQUIRE(s.unit.kernels.size() == 2);
  CHECK(s.unit.kernels[0].label == "gemm");
  CHECK(s.unit.kernels[0].ends_after_us == Approx(10));  // starts when the norm before it ends
  CHECK(s.unit.kernels[1].ends_after_us == Approx(2));
  CHECK(s.unit.kernels[1].duration_us == Approx(3));
  CHECK(s.unit.unit_us == Approx(12));
}
