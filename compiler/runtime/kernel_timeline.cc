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

std::vector<std::string> labelsOf(const std::vector<KernelSpan>& replay) {
  std::vector<std::string> labels;
  for (const KernelSpan& k : replay) labels.push_back(kernelLabel(k));
  return labels;
}

// The latest end among kernels 0..i of a replay, for every i.
std::vector<double> frontierUs(const std::vector<KernelSpan>& replay) {
  std::vector<double> f;
  uint64_t latest = 0;
  for (const KernelSpan& k : replay) f.push_back(us(latest = std::max(latest, k.end_ns)));
  return f;
}

// Fills unit.kernels and unit.unit_us from the replays that ran `labels`.
void measureUnit(RepeatedUnit& unit, const std::vector<std::vector<KernelSpan>>& replays,
                 const std::vector<ReplayTimes>& times, const std::vector<std::string>& labels) {
  std::vector<std::vector<double>> ends_after(unit.period), durations(unit.period);
  std::vector<double> unit_times;
  for (size_t r = 0; r < replays.size(); ++r) {
    if (replays[r].size() != labels.size() || labelsOf(replays[r]) != labels) continue;
    const std::vector<double> frontier = frontierUs(replays[r]);
    for (size_t k = 0; k < unit.repeats; ++k) {
      const size_t base = unit.first + k * unit.period;
      for (size_t j = 0; j < unit.period; ++j) {
        const KernelSpan& span = replays[r][base + j];
        const double duration = us(span.end_ns) - us(span.start_ns);
        durations[j].push_back(duration);
        ends_after[j].push_back(base + j == 0 ? duration : times[r].gap_before_us[base + j] + duration);
      }
      if (k > 0) unit_times.push_back(frontier[base + unit.period - 1] - frontier[base - 1]);
    }
  }
  for (size_t j = 0; j < unit.period; ++j)
    unit.kernels.push_back({labels[unit.first + j], median(ends_after[j]), median(durations[j])});
  unit.unit_us = median(unit_times);
}

}  // namespace

RepeatedUnit findRepeatedUnit(const std::vector<std::string>& labels) {
  RepeatedUnit best;
  const size_t n = labels.size();
  for (size_t p = 2; p * kMinUnitRepeats <= n; ++p) {
    size_t run = 0;  // matches labels[i - run .. i) == labels[i - run + p .. i + p)
    for (size_t i = 0; i + p <= n; ++i) {
      const bool match = i + p < n && labels[i] == labels[i + p];
      if (match) {
        ++run;
        continue;
      }
      const size_t repeats = run / p + 1;
      if (repeats >= kMinUnitRepeats && repeats * p > best.repeats * best.period) best = {i - run, p, repeats, 0, {}};
      run = 0;
    }
  }
  return best;
}

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
  const std::vector<std::string> labels = labelsOf(replays[s.median_replay]);
  s.unit = findRepeatedUnit(labels);
  if (s.unit.period > 0) measureUnit(s.unit, replays, times, labels);
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
