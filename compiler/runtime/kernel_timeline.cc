#include "compiler/runtime/kernel_timeline.h"

#include <cxxabi.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "ir/json_text.h"

namespace fxfuse::runtime {

namespace {

double us(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void eraseAll(std::string& s, const std::string& what) {
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at)) s.erase(at, what.size());
}

// The end of a demangled function's name: its parameter list's '(' outside template arguments.
size_t nameEnd(const std::string& s) {
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    else if (s[i] == '>') depth = std::max(0, depth - 1);
    else if (s[i] == '(' && depth == 0) return i;
  }
  return s.size();
}

// The latest end among spans [0, i), with the index of the span that has it.
struct LatestEnd {
  uint64_t end_ns = 0;
  size_t index = 0;
};

}  // namespace

std::string shortKernelName(const std::string& name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status),
                                                   std::free);
  std::string s = status == 0 && demangled ? demangled.get() : name;
  eraseAll(s, "(anonymous namespace)::");
  s = s.substr(0, nameEnd(s));
  if (s.rfind("void ", 0) == 0) s = s.substr(5);
  if (s.size() > kShortNameChars) s = s.substr(0, kShortNameChars - 3) + "...";
  return s;
}

std::string kernelLabel(const KernelSpan& k) {
  std::string label = shortKernelName(k.name);
  if (k.grid[0] > 0) label += fmt::format(" [grid {}x{}x{}]", k.grid[0], k.grid[1], k.grid[2]);
  return label;
}

std::vector<std::vector<KernelSpan>> splitReplays(std::vector<KernelSpan> spans,
                                                  const std::vector<uint64_t>& replay_starts_ns) {
  std::vector<std::vector<KernelSpan>> replays(replay_starts_ns.size());
  for (KernelSpan& k : spans) {
    auto after = std::upper_bound(replay_starts_ns.begin(), replay_starts_ns.end(), k.start_ns);
    if (after == replay_starts_ns.begin()) continue;  // before the first replay
    replays[static_cast<size_t>(after - replay_starts_ns.begin()) - 1].push_back(std::move(k));
  }
  for (auto& r : replays)
    std::stable_sort(r.begin(), r.end(), [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
  return replays;
}

// A sweep over the start and end times: between two consecutive times, the running kernel
// that started first holds the step (or none runs: idle).
ReplayTimes measureReplay(const std::vector<KernelSpan>& replay) {
  ReplayTimes t;
  t.holding_us.assign(replay.size(), 0.0);
  t.gap_before_us.assign(replay.size(), 0.0);
  if (replay.empty()) return t;
  std::vector<std::pair<uint64_t, size_t>> ends;  // (end, kernel), visited in time order
  LatestEnd latest{replay[0].end_ns, 0};
  for (size_t i = 0; i < replay.size(); ++i) {
    ends.emplace_back(replay[i].end_ns, i);
    if (i == 0) continue;
    t.gap_before_us[i] = us(replay[i].start_ns) - us(latest.end_ns);
    if (replay[i].end_ns > latest.end_ns) latest = {replay[i].end_ns, i};
  }
  t.span_us = us(latest.end_ns) - us(replay[0].start_ns);
  std::sort(ends.begin(), ends.end());
  std::set<size_t> running;  // indices; replay order is start order, so *begin() is the oldest
  size_t next_start = 0, next_end = 0;
  uint64_t now = replay[0].start_ns;
  while (next_end < ends.size()) {
    const bool start_first = next_start < replay.size() && replay[next_start].start_ns <= ends[next_end].first;
    const uint64_t at = start_first ? replay[next_start].start_ns : ends[next_end].first;
    if (!running.empty()) {
      t.holding_us[*running.begin()] += us(at) - us(now);
      t.busy_us += us(at) - us(now);
    }
    now = at;
    if (start_first) running.insert(next_start++);
    else running.erase(ends[next_end++].second);
  }
  return t;
}

namespace {

// Per-label sums of one replay.
std::map<std::string, KernelNameTotals> nameSums(const std::vector<KernelSpan>& replay, const ReplayTimes& t) {
  std::map<std::string, KernelNameTotals> sums;
  for (size_t i = 0; i < replay.size(); ++i) {
    const std::string label = kernelLabel(replay[i]);
    KernelNameTotals& n = sums[label];
    n.name = label;
    ++n.count;
    n.duration_us += us(replay[i].end_ns) - us(replay[i].start_ns);
    n.holding_us += t.holding_us[i];
    n.idle_before_us += std::max(0.0, t.gap_before_us[i]);
  }
  return sums;
}

std::vector<KernelNameTotals> medianNameTotals(const std::vector<std::map<std::string, KernelNameTotals>>& per_replay) {
  std::map<std::string, std::vector<KernelNameTotals>> rows;
  for (const auto& sums : per_replay)
    for (const auto& [name, n] : sums) rows[name].push_back(n);
  std::vector<KernelNameTotals> out;
  for (const auto& [name, v] : rows) {
    auto pick = [&v](auto field) {
      std::vector<double> x;
      for (const auto& n : v) x.push_back(field(n));
      return median(x);
    };
    KernelNameTotals m;
    m.name = name;
    m.count = static_cast<int>(pick([](const KernelNameTotals& n) { return n.count; }));
    m.duration_us = pick([](const KernelNameTotals& n) { return n.duration_us; });
    m.holding_us = pick([](const KernelNameTotals& n) { return n.holding_us; });
    m.idle_before_us = pick([](const KernelNameTotals& n) { return n.idle_before_us; });
    out.push_back(m);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.holding_us > b.holding_us; });
  return out;
}

std::vector<TimelineGap> largestGaps(const std::vector<KernelSpan>& replay, const ReplayTimes& t) {
  std::vector<TimelineGap> gaps;
  LatestEnd latest;
  for (size_t i = 0; i < replay.size(); ++i) {
    if (i > 0 && t.gap_before_us[i] > 0)
      gaps.push_back({us(latest.end_ns) - us(replay[0].start_ns), t.gap_before_us[i], kernelLabel(replay[latest.index]),
                      kernelLabel(replay[i])});
    if (i == 0 || replay[i].end_ns > latest.end_ns) latest = {replay[i].end_ns, i};
  }
  std::sort(gaps.begin(), gaps.end(), [](const auto& a, const auto& b) { return a.idle_us > b.idle_us; });
  if (gaps.size() > kTimelineGapsKept) gaps.resize(kTimelineGapsKept);
  return gaps;
}

}  // namespace

TimelineSummary summarizeTimeline(const std::vector<std::vector<KernelSpan>>& replays) {
  TimelineSummary s;
  s.replays = static_cast<int>(replays.size());
  if (replays.empty()) return s;
  std::vector<ReplayTimes> times;
  std::vector<std::map<std::string, KernelNameTotals>> sums;
  std::vector<double> spans, busy;
  for (const auto& r : replays) {
    times.push_back(measureReplay(r));
    sums.push_back(nameSums(r, times.back()));
    spans.push_back(times.back().span_us);
    busy.push_back(times.back().busy_us);
    s.same_kernels = s.same_kernels && r.size() == replays[0].size();
  }
  std::vector<size_t> order(replays.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&spans](size_t a, size_t b) { return spans[a] < spans[b]; });
  s.median_replay = order[order.size() / 2];
  s.kernels_per_replay = replays[s.median_replay].size();
  s.span_us = median(spans);
  s.busy_us = median(busy);
  std::vector<double> idle;
  for (const auto& t : times) idle.push_back(t.span_us - t.busy_us);
  s.idle_us = median(idle);
  s.by_name = medianNameTotals(sums);
  s.largest_gaps = largestGaps(replays[s.median_replay], times[s.median_replay]);
  return s;
}

std::string chromeTraceJson(const std::vector<KernelSpan>& replay) {
  std::string events;
  const uint64_t t0 = replay.empty() ? 0 : replay[0].start_ns;
  for (const KernelSpan& k : replay)
    events += fmt::format("{}\n  {{\"name\": \"{}\", \"cat\": \"kernel\", \"ph\": \"X\", \"ts\": {:.3f}, \"dur\": {:.3f}, "
                          "\"pid\": 0, \"tid\": {}, \"args\": {{\"kernel\": \"{}\"}}}}",
                          events.empty() ? "" : ",", ir::jsonEscaped(kernelLabel(k)), us(k.start_ns) - us(t0),
                          us(k.end_ns) - us(k.start_ns), k.stream, ir::jsonEscaped(k.name));
  return "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [" + events + "\n]}\n";
}

}  // namespace fxfuse::runtime
