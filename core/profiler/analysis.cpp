// key_averages() and the step summary (profile.h) from a profile's events,
// and the table printed at the end of an EMBER_PROFILE run.
#include <algorithm>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "core/profiler/profile.h"

namespace ember::profiler {
namespace {

bool is_compute(const Event& event) {
  return !event.instant && (event.category == Category::op || event.category == Category::backward);
}

using Interval = std::pair<int64_t, int64_t>;

// The intervals of the events `select` picks, merged where they overlap.
template <class Select>
std::vector<Interval> merged(const std::vector<Event>& events, Select select) {
  std::vector<Interval> intervals;
  for (const Event& event : events)
    if (!event.instant && select(event)) intervals.emplace_back(event.begin_ns, event.end_ns);
  std::sort(intervals.begin(), intervals.end());
  std::vector<Interval> out;
  for (const Interval& interval : intervals) {
    if (!out.empty() && interval.first <= out.back().second)
      out.back().second = std::max(out.back().second, interval.second);
    else
      out.push_back(interval);
  }
  return out;
}

int64_t length(const std::vector<Interval>& intervals) {
  int64_t total = 0;
  for (const auto& [begin, end] : intervals) total += end - begin;
  return total;
}

// The length of `a` outside `b` (both merged and sorted).
int64_t length_outside(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  int64_t covered = 0;
  size_t j = 0;
  for (const auto& [begin, end] : a) {
    while (j < b.size() && b[j].second <= begin) ++j;
    for (size_t k = j; k < b.size() && b[k].first < end; ++k)
      covered += std::min(end, b[k].second) - std::max(begin, b[k].first);
  }
  return length(a) - covered;
}

}  // namespace

std::vector<OpAverage> key_averages(const std::vector<Event>& events) {
  // Self time: on each track, a span's direct children are the compute spans
  // that begin inside it; a stack of the open spans finds them.
  std::vector<const Event*> compute;
  for (const Event& event : events)
    if (is_compute(event)) compute.push_back(&event);
  std::stable_sort(compute.begin(), compute.end(), [](const Event* a, const Event* b) {
    if (a->thread != b->thread) return a->thread < b->thread;
    return a->begin_ns != b->begin_ns ? a->begin_ns < b->begin_ns : a->end_ns > b->end_ns;
  });
  std::vector<int64_t> children_ns(compute.size(), 0);
  std::vector<size_t> open;
  for (size_t i = 0; i < compute.size(); ++i) {
    while (!open.empty() && (compute[open.back()]->thread != compute[i]->thread ||
                             compute[open.back()]->end_ns <= compute[i]->begin_ns))
      open.pop_back();
    if (!open.empty()) children_ns[open.back()] += compute[i]->duration_ns();
    open.push_back(i);
  }

  std::vector<OpAverage> rows;
  std::unordered_map<std::string, size_t> row_of;
  for (size_t i = 0; i < compute.size(); ++i) {
    const Event& event = *compute[i];
    std::string key = std::string(category_name(event.category)) + "/" + event.name;
    auto [found, added] = row_of.try_emplace(key, rows.size());
    if (added) rows.push_back({event.category, event.name});
    OpAverage& row = rows[found->second];
    ++row.calls;
    row.total_ns += event.duration_ns();
    row.self_ns += event.duration_ns() - children_ns[i];
    if (event.flops > 0) row.flops += event.flops;
    if (event.bytes > 0) row.bytes += event.bytes;
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const OpAverage& a, const OpAverage& b) { return a.self_ns > b.self_ns; });
  return rows;
}

StepSummary summarize(const std::vector<Event>& events, int64_t begin_ns, int64_t end_ns) {
  auto in = [](Category category) { return [category](const Event& e) { return e.category == category; }; };
  StepSummary summary;
  summary.wall_ns = end_ns - begin_ns;
  for (const Event& event : events) summary.steps += !event.instant && event.category == Category::optimizer;
  const auto compute = merged(events, is_compute);
  const auto optimizer = merged(events, in(Category::optimizer));
  const auto communication = merged(events, [](const Event& e) {
    return e.category == Category::collective || e.category == Category::bucket;
  });
  // Kernels that run inside an optimizer step, a DataLoader wait (a batch
  // made on this thread) or a checkpoint save count there, not as compute.
  summary.compute_ns = length_outside(compute, merged(events, [](const Event& e) {
    return e.category == Category::optimizer || e.category == Category::data || e.category == Category::checkpoint;
  }));
  summary.communication_ns = length(communication);
  summary.exposed_communication_ns = length_outside(communication, compute);
  summary.data_wait_ns = length(merged(events, in(Category::data)));
  summary.optimizer_ns = length(optimizer);
  summary.checkpoint_ns = length(merged(events, in(Category::checkpoint)));
  return summary;
}

std::string format_table(const std::vector<OpAverage>& rows, const StepSummary& summary, size_t max_rows) {
  int64_t self_total = 0;
  for (const OpAverage& row : rows) self_total += row.self_ns;
  std::string out = fmt::format("{:<36} {:>9} {:>8} {:>11} {:>11} {:>7} {:>9} {:>8}\n", "Name", "Category", "Calls",
                                "Total ms", "Self ms", "Self %", "GFLOP/s", "GB/s");
  for (size_t i = 0; i < rows.size() && i < max_rows; ++i) {
    const OpAverage& row = rows[i];
    std::string name = row.name.size() > 36 ? row.name.substr(0, 33) + "..." : row.name;
    out += fmt::format("{:<36} {:>9} {:>8} {:>11.3f} {:>11.3f} {:>6.1f}% {:>9.2f} {:>8.2f}\n", name,
                       category_name(row.category), row.calls, row.total_ns / 1e6, row.self_ns / 1e6,
                       self_total > 0 ? 100.0 * double(row.self_ns) / double(self_total) : 0.0,
                       row.gflops_per_second(), row.gigabytes_per_second());
  }
  const double steps = double(std::max<int64_t>(summary.steps, 1));
  out += fmt::format("Self time total: {:.3f} ms over {} rows\n", self_total / 1e6, rows.size());
  out += fmt::format("{:<26} {:>12} {:>12}\n", "Where the time went", "total ms",
                     summary.steps > 0 ? "per step ms" : "");
  for (auto [label, ns] : {std::pair{"wall", summary.wall_ns}, std::pair{"compute", summary.compute_ns},
                           std::pair{"communication", summary.communication_ns},
                           std::pair{"exposed communication", summary.exposed_communication_ns},
                           std::pair{"data wait", summary.data_wait_ns}, std::pair{"optimizer", summary.optimizer_ns},
                           std::pair{"checkpoint", summary.checkpoint_ns}})
    out += summary.steps > 0 ? fmt::format("{:<26} {:>12.3f} {:>12.3f}\n", label, ns / 1e6, ns / 1e6 / steps)
                             : fmt::format("{:<26} {:>12.3f}\n", label, ns / 1e6);
  out += fmt::format("steps (optimizer steps): {}\n", summary.steps);
  return out;
}

}  // namespace ember::profiler
