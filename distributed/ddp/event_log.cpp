// EventLog (see event_log.h): events in memory, written as Chrome trace JSON.
#include "distributed/ddp/event_log.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "core/file_io.h"

namespace ember::distributed {

EventLog::EventLog(std::string path, int rank)
    : path_(std::move(path)),
      rank_(rank),
      steady_origin_(Clock::now()),
      wall_origin_us_(std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count()) {}

std::string EventLog::path_for(const std::string& prefix, int rank) {
  return prefix + ".rank" + std::to_string(rank) + ".json";
}

int64_t EventLog::microseconds(Clock::time_point t) const {
  return wall_origin_us_ + std::chrono::duration_cast<std::chrono::microseconds>(t - steady_origin_).count();
}

void EventLog::span(Lane lane, std::string name, Clock::time_point begin, Clock::time_point end, nlohmann::json args) {
  int64_t ts = microseconds(begin);
  int64_t dur = std::max<int64_t>(microseconds(end) - ts, 0);
  std::lock_guard lock(mutex_);
  args["iteration"] = iteration_;
  events_.push_back({lane, false, std::move(name), ts, dur, std::move(args)});
}

void EventLog::instant(Lane lane, std::string name, Clock::time_point at, nlohmann::json args) {
  int64_t ts = microseconds(at);
  std::lock_guard lock(mutex_);
  args["iteration"] = iteration_;
  events_.push_back({lane, true, std::move(name), ts, 0, std::move(args)});
}

void EventLog::set_iteration(int64_t iteration) {
  std::lock_guard lock(mutex_);
  iteration_ = iteration;
}

size_t EventLog::size() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

void EventLog::flush() const {
  nlohmann::json events = nlohmann::json::array();
  // Metadata events name the process after the rank and the lanes after what they hold.
  events.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"name", fmt::format("rank {}", rank_)}}}});
  for (auto [lane, name] : {std::pair{Lane::backward, "backward"}, std::pair{Lane::comm, "comm"}})
    events.push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", int(lane)}, {"args", {{"name", name}}}});
  {
    std::lock_guard lock(mutex_);
    for (const Event& event : events_) {
      nlohmann::json entry = {{"name", event.name}, {"ph", event.instant ? "i" : "X"}, {"ts", event.ts_us},
                              {"pid", rank_},       {"tid", int(event.lane)},          {"args", event.args}};
      if (event.instant) {
        entry["s"] = "t";  // an instant on its lane (thread), not across the process
      } else {
        entry["dur"] = event.dur_us;
      }
      events.push_back(std::move(entry));
    }
  }
  // Replaced whole, never written through a link (core/file_io.h).
  write_file_atomically("DistributedDataParallel event log", path_,
                        nlohmann::json{{"traceEvents", std::move(events)}}.dump() + "\n");
}

}  // namespace ember::distributed
