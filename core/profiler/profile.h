// ember::profiler::Profile, torch.profiler's `profile` in C++: while one is
// alive (and not stopped) every kernel an op runs, every autograd node,
// collective, bucket, DataLoader wait, optimizer step and checkpoint save is
// recorded with its time, and afterwards read as events, a Chrome trace
// (Perfetto, chrome://tracing), a key_averages() table and a step summary:
//   profiler::Profile profile({.record_shapes = true});
//   auto loss = model(inputs) ... loss.backward(); optimizer.step();
//   profile.export_chrome_trace("trace.json");
//   std::cout << profile.table();
// One profile records at a time in a process (EMBER_PROFILE's included).
// Tests: tests/core/test_profiler.cpp, tests/autograd/test_profiler.cpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/profiler/profiler.h"

namespace ember::profiler {

struct ProfileOptions {
  bool record_shapes = false;      // operand shapes of every kernel (costs a string per kernel)
  bool record_ops = true;          // every kernel an op runs
  bool record_backward = true;     // every autograd node
  bool record_distributed = true;  // collectives, buckets
  bool record_steps = true;        // DataLoader waits, optimizer steps, checkpoint saves
};

// One recorded event. Times are on profiler::Clock, in ns.
struct Event {
  Category category = Category::user;
  std::string name;
  int64_t begin_ns = 0;
  int64_t end_ns = 0;  // == begin_ns for an instant
  bool instant = false;
  int thread = 0;  // the track: a thread of this process, kCommunicationTrack or a device stream's
  // Kernels (categories op and device_kernel) only:
  DeviceType device = DeviceType::cpu;
  DType dtype = DType::f32;
  int64_t flops = -1;  // -1: unknown
  int64_t bytes = -1;
  std::string shapes;  // when record_shapes, e.g. "[[4, 8], [8, 3]]"
  nlohmann::json args;  // details of the other categories (bytes, backend, ...)

  int64_t duration_ns() const { return end_ns - begin_ns; }
};

// The track of asynchronous communication (Track::communication).
inline constexpr int kCommunicationTrack = 1000000;
// The tracks of device streams (category device_kernel): kDeviceTrackBase,
// kDeviceTrackBase + 1, ... in the order their first kernel was recorded.
inline constexpr int kDeviceTrackBase = 2000000;

// One row of key_averages(): the events of one name (and category), summed.
// Self time is the total less the time of the events nested directly inside
// on the same track, so the self times of a table add up to the time its
// outermost events cover.
struct OpAverage {
  Category category = Category::op;
  std::string name;
  int64_t calls = 0;
  int64_t total_ns = 0;
  int64_t self_ns = 0;
  int64_t flops = 0;  // summed over the calls whose flops are known
  int64_t bytes = 0;
  double gflops_per_second() const { return total_ns > 0 ? double(flops) / double(total_ns) : 0; }
  double gigabytes_per_second() const { return total_ns > 0 ? double(bytes) / double(total_ns) : 0; }
};

// Note [Step summary] in core/profiler/README.md: where the time of a
// profile went, each figure the length of a union of intervals.
struct StepSummary {
  int64_t steps = 0;                     // optimizer steps seen
  int64_t wall_ns = 0;                   // the profile's length
  int64_t compute_ns = 0;                // kernels and autograd nodes, outside optimizer steps
  int64_t communication_ns = 0;          // collectives and bucket reductions
  int64_t exposed_communication_ns = 0;  // communication while no compute ran
  int64_t data_wait_ns = 0;              // DataLoader waits
  int64_t optimizer_ns = 0;              // optimizer steps
  int64_t checkpoint_ns = 0;             // checkpoint saves
};

class Profile {
 public:
  explicit Profile(ProfileOptions options = {});
  ~Profile();
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  // Stops recording; idempotent. Every reader below stops the profile first.
  void stop();
  bool recording() const { return recording_; }

  // Sorted by begin time.
  const std::vector<Event>& events();
  // Names of the tracks the events are on (thread names, "communication").
  const std::map<int, std::string>& tracks();

  // The trace as Chrome trace JSON ({"traceEvents": [...], "ember": {...}}):
  // pid = rank, tid = track; "ember" holds the rank and clock offset.
  nlohmann::json chrome_trace();
  void export_chrome_trace(const std::string& path);

  // Rows for kernels and autograd nodes, by self time, longest first.
  std::vector<OpAverage> key_averages();
  StepSummary summary();
  // key_averages() (the first `rows`) and summary() as text.
  std::string table(size_t rows = 20);

 private:
  bool recording_ = true;
  int64_t begin_ns_ = 0;
  int64_t end_ns_ = 0;
  std::vector<Event> events_;
  std::map<int, std::string> tracks_;
};

// The summary and table of events recorded elsewhere (a trace read back).
std::vector<OpAverage> key_averages(const std::vector<Event>& events);
StepSummary summarize(const std::vector<Event>& events, int64_t begin_ns, int64_t end_ns);
std::string format_table(const std::vector<OpAverage>& rows, const StepSummary& summary, size_t max_rows);

}  // namespace ember::profiler
