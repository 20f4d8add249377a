// Profile (profile.h): starting and stopping a session, and the Chrome trace.
#include "core/profiler/profile.h"

#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "core/file_io.h"
#include "core/profiler/recorder.h"

namespace ember::profiler {

Profile::Profile(ProfileOptions options) {
  int mask = 0;
  if (options.record_ops) mask |= kRecordOps;
  if (options.record_backward) mask |= kRecordBackward;
  if (options.record_ops && options.record_shapes) mask |= kRecordShapes;
  if (options.record_distributed) mask |= kRecordDistributed;
  if (options.record_steps) mask |= kRecordSteps;
  detail::start_session(mask, "profiler::Profile");
  begin_ns_ = now_ns();
}

Profile::~Profile() { stop(); }

void Profile::stop() {
  if (!recording_) return;
  recording_ = false;
  end_ns_ = now_ns();
  detail::stop_session(events_, tracks_);
  std::stable_sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) {
    // An enclosing span first when two begin together, so nesting reads in order.
    return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.end_ns > b.end_ns;
  });
}

const std::vector<Event>& Profile::events() {
  stop();
  return events_;
}

const std::map<int, std::string>& Profile::tracks() {
  stop();
  return tracks_;
}

namespace {

// Chrome trace timestamps are microseconds; fractions keep the nanoseconds.
double microseconds(int64_t ns) { return double(ns) / 1000.0; }

// The trace's track of each event (`events` sorted as Profile::stop sorts
// them): its own, but for the communication track's spans, which go on the
// first lane where they nest (Note [Communication lanes]).
std::vector<int> trace_tracks(const std::vector<Event>& events) {
  std::vector<int> tracks(events.size());
  std::vector<std::vector<int64_t>> open_ends;  // per lane, the ends of its open spans, innermost last
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& event = events[i];
    tracks[i] = event.thread;
    if (event.thread != kCommunicationTrack || event.instant) continue;
    size_t lane = 0;
    for (; lane < open_ends.size(); ++lane) {
      std::vector<int64_t>& ends = open_ends[lane];
      while (!ends.empty() && ends.back() <= event.begin_ns) ends.pop_back();
      if (ends.empty() || event.end_ns <= ends.back()) break;
    }
    if (lane == open_ends.size()) open_ends.emplace_back();
    open_ends[lane].push_back(event.end_ns);
    tracks[i] = kCommunicationTrack + int(lane);
  }
  return tracks;
}

nlohmann::json event_json(const Event& event, int pid, int track) {
  nlohmann::json args = event.args.is_object() ? event.args : nlohmann::json::object();
  if (event.category == Category::op || event.category == Category::device_kernel) {
    args["device"] = event.device == DeviceType::cpu ? "cpu" : "cuda";
    args["dtype"] = dtype_name(event.dtype);
    if (!event.shapes.empty()) args["shapes"] = event.shapes;
    if (event.flops >= 0) args["flops"] = event.flops;
    if (event.bytes >= 0) args["bytes"] = event.bytes;
  }
  nlohmann::json entry = {{"name", event.name},
                          {"cat", category_name(event.category)},
                          {"ph", event.instant ? "i" : "X"},
                          {"ts", microseconds(event.begin_ns)},
                          {"pid", pid},
                          {"tid", track},
                          {"args", std::move(args)}};
  if (event.instant)
    entry["s"] = "t";  // an instant on its track, not across the process
  else
    entry["dur"] = microseconds(event.duration_ns());
  return entry;
}

}  // namespace

nlohmann::json Profile::chrome_trace() {
  stop();
  const int rank = std::max(detail::process_rank(), 0);
  nlohmann::json events = nlohmann::json::array();
  // Metadata events name the process after the rank and each track after its thread.
  events.push_back(
      {{"name", "process_name"}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", fmt::format("rank {}", rank)}}}});
  events.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", rank}, {"args", {{"sort_index", rank}}}});
  const std::vector<int> event_tracks = trace_tracks(events_);
  std::map<int, std::string> names = tracks_;
  for (int track : event_tracks)
    if (track > kCommunicationTrack && track < kDeviceTrackBase)
      names[track] = fmt::format("communication ({})", track - kCommunicationTrack + 1);
  for (const auto& [thread, name] : names)
    events.push_back(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", thread}, {"args", {{"name", name}}}});
  for (size_t i = 0; i < events_.size(); ++i) events.push_back(event_json(events_[i], rank, event_tracks[i]));
  nlohmann::json ember = {{"rank", rank}, {"begin_ns", begin_ns_}, {"end_ns", end_ns_}};
  // Which job and how many ranks, so that merging refuses an earlier run's
  // files left in the same directory (tools/trace_merge.cpp).
  if (const char* job = std::getenv("EMBER_JOB_ID"); job && *job) ember["job"] = job;
  if (const char* world = std::getenv("WORLD_SIZE"); world && *world) ember["world_size"] = std::atoi(world);
  // Note [One clock for every rank]: merge subtracts this from every timestamp.
  if (detail::has_clock_offset()) ember["clock_offset_ns"] = detail::clock_offset_ns();
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}, {"ember", std::move(ember)}};
}

void Profile::export_chrome_trace(const std::string& path) {
  // Replaced whole, never written through a link (core/file_io.h).
  // A name that is not UTF-8 (a thread named after a program, cut at 15 bytes
  // inside a character) is written with U+FFFD in its place, not lost.
  write_file_atomically("profiler trace", path,
                        chrome_trace().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

std::vector<OpAverage> Profile::key_averages() { return profiler::key_averages(events()); }

StepSummary Profile::summary() {
  stop();
  return summarize(events_, begin_ns_, end_ns_);
}

std::string Profile::table(size_t rows) { return format_table(key_averages(), summary(), rows); }

}  // namespace ember::profiler
