// The profiler's event store, inside core/profiler only: one buffer per
// thread that records (plus the communication track's), owned by the session
// now recording, so recording never takes a lock another thread holds.
// Used by: profile.cpp (start, stop), recorder.cpp (the recording calls).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/profiler/profile.h"

namespace ember::profiler::detail {

// Starts a session recording `mask` (Recording bits); an error if one records.
void start_session(int mask, const char* who);
// Ends it and hands over its events (unsorted) and track names.
void stop_session(std::vector<Event>& events, std::map<int, std::string>& tracks);

// Appends `event` to the current session's buffer for `track`.
void append(Event event, Track track);

// The device time of kernels (device_spans.cpp, Note [Device time of
// kernels]): start_session forgets the last session's spans; KernelSpan
// begins and ends one around each kernel on a device (nested calls end in
// reverse order); stop_session takes them as events on a track per stream.
void reset_device_spans();
void begin_device_span(DeviceType type);
void end_device_span(std::string_view name, DeviceType type, DType dtype, int64_t flops, int64_t bytes);
void take_device_spans(std::vector<Event>& events, std::map<int, std::string>& tracks);

int process_rank();
// Whether set_clock_offset_ns was called, and its value.
bool has_clock_offset();
int64_t clock_offset_ns();

}  // namespace ember::profiler::detail
