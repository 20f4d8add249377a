// EventLog: what DistributedDataParallel did and when, as a Chrome trace
// (chrome://tracing or https://ui.perfetto.dev): one file per rank with a
// "backward" lane (every autograd node, through the engine's node observer)
// and a "comm" lane (each bucket's all-reduce from launch to completion, with
// an instant when the bucket became ready). Loaded side by side, the ranks'
// files show whether communication overlapped backward.
// Written by DistributedDataParallel when EMBER_DDP_TRACE=<prefix> (or
// DDPOptions::trace_prefix) is set, to <prefix>.rank<N>.json.
// Tests: tests/distributed/test_ddp.cpp (Overlap*).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ember::distributed {

class EventLog {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Lane { backward = 1, comm = 2 };

  // Events of rank `rank`; `path` is where flush() writes them.
  EventLog(std::string path, int rank);
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // A span ("ph": "X") and an instant ("ph": "i") on a lane; `args` shows in
  // the viewer's details pane. Safe to call from any thread.
  void span(Lane lane, std::string name, Clock::time_point begin, Clock::time_point end,
            nlohmann::json args = nlohmann::json::object());
  void instant(Lane lane, std::string name, Clock::time_point at, nlohmann::json args = nlohmann::json::object());

  // Every event recorded from now on carries {"iteration": iteration} in its
  // args (the reducer counts synced forwards), so a reader can group them.
  void set_iteration(int64_t iteration);

  // Writes every event so far as {"traceEvents": [...]} (replacing the file);
  // an error names the path.
  void flush() const;
  const std::string& path() const { return path_; }
  size_t size() const;

  // <prefix>.rank<rank>.json
  static std::string path_for(const std::string& prefix, int rank);

 private:
  struct Event {
    Lane lane;
    bool instant;
    std::string name;
    int64_t ts_us;
    int64_t dur_us;
    nlohmann::json args;
  };
  int64_t microseconds(Clock::time_point t) const;

  std::string path_;
  int rank_;
  // Timestamps are wall-clock microseconds (so different ranks' files line
  // up) computed from the monotonic clock: wall time at construction plus the
  // steady time elapsed since.
  Clock::time_point steady_origin_;
  int64_t wall_origin_us_;
  mutable std::mutex mutex_;
  int64_t iteration_ = 0;
  std::vector<Event> events_;
};

}  // namespace ember::distributed
