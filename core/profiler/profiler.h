// ember::profiler, the recording side: what the layers call to put an event on
// the timeline of the profile now recording (a `Profile`, profile.h, or the
// process-wide one of EMBER_PROFILE). Every call first tests one bit of one
// word (Note [One branch when off] in core/profiler/README.md) and does
// nothing when it is clear.
// Called by: core/dispatch.h (kernels), autograd/engine.cpp (backward nodes),
// data/ (DataLoader waits), optim/ (optimizer steps), distributed/ (collectives,
// buckets, clock offsets, checkpoint saves).
// Tests: tests/core/test_profiler.cpp, tests/distributed/test_profiler.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/profiler/kernel_span.h"

namespace ember::profiler {

// What an event is; the summary (Note [Step summary]) adds time up by category.
// device_kernel: a kernel's run on its device's stream (Note [Device time of
// kernels]), beside the `op` span of its launch on the host.
enum class Category : uint8_t {
  op, backward, module, collective, bucket, data, optimizer, checkpoint, user, device_kernel
};
const char* category_name(Category category);

// The timeline's clock: steady (monotonic) nanoseconds, the same clock for
// every process of one host.
using Clock = std::chrono::steady_clock;
inline int64_t to_ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
inline int64_t now_ns() { return to_ns(Clock::now()); }

// Where an event shows: the thread that records it, or the process's
// communication track, where asynchronous collectives are drawn apart from
// the compute they overlap.
enum class Track : uint8_t { this_thread, communication };

// Records a finished span [begin_ns, end_ns] or an instant when `what` is on.
void record_span(Recording what, Category category, std::string name, int64_t begin_ns, int64_t end_ns,
                 nlohmann::json args = nullptr, Track track = Track::this_thread);
void record_instant(Recording what, Category category, std::string name, nlohmann::json args = nullptr,
                    Track track = Track::this_thread);
inline void record_span(Recording what, Category category, std::string name, Clock::time_point begin,
                        Clock::time_point end, nlohmann::json args = nullptr, Track track = Track::this_thread) {
  record_span(what, category, std::move(name), to_ns(begin), to_ns(end), std::move(args), track);
}

// A span from construction to destruction, recorded only when `what` was on
// at construction:
//   profiler::Span span(kRecordSteps, Category::optimizer, "AdamW.step");
class Span {
 public:
  // The name is copied when recording (a name built per step may die before the span ends).
  Span(Recording what, Category category, std::string_view name, Track track = Track::this_thread)
      : what_(recording(what) ? what : Recording(0)), category_(category), track_(track),
        name_(what_ ? name : std::string_view()), begin_ns_(what_ ? now_ns() : 0) {}
  ~Span() {
    if (what_) record_span(what_, category_, std::move(name_), begin_ns_, now_ns(), std::move(args_), track_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  bool active() const { return what_ != 0; }
  // Details shown with the event (bytes, backend, ...); ignored when inactive.
  nlohmann::json& args() { return args_; }

 private:
  Recording what_;
  Category category_;
  Track track_;
  std::string name_;
  int64_t begin_ns_;
  nlohmann::json args_;
};

// This process's rank and the offset of its clock from rank 0's (its clock
// minus rank 0's, in ns), written into the trace's metadata so that
// `ember trace merge` puts every rank on rank 0's clock.
void set_process_rank(int rank);
void set_clock_offset_ns(int64_t offset_ns);

}  // namespace ember::profiler
