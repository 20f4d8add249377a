// The device time of kernels (Note [Device time of kernels] in
// core/profiler/README.md): KernelSpan brackets each kernel it times on a
// device with two timing events on the stream the kernel is queued on, and
// stop_session turns them into spans of category device_kernel on a track per
// stream, on the profiler's clock. Only core's Event and Stream are used, so
// the CUDA plugin needs nothing of its own.
// Tests: tests/cuda/test_cuda_profiler.cpp (skips without a GPU).
#include <algorithm>
#include <exception>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/profiler/recorder.h"
#include "core/stream.h"

namespace ember::profiler::detail {
namespace {

using DeviceEvent = ember::Event;  // a stream's event; profiler::Event is a trace's

// A device event taken while the host waited for it: the host's clock read
// just after it completed, so anchor + elapsed(anchor, e) never places e
// before it happened (it may place it a few microseconds late).
struct Anchor {
  DeviceEvent event;
  int64_t host_ns = 0;
};

struct DeviceSpan {
  std::string name;
  Device device;
  void* stream = nullptr;  // the stream's handle (null: the default stream)
  DeviceEvent start, end;
  DType dtype = DType::f32;
  int64_t flops = -1, bytes = -1;
};

struct OpenSpan {
  uint64_t epoch = 0;
  DeviceEvent start;
};

// Spans of the session now recording (`epoch`), under `mutex`.
struct DeviceSpans {
  std::mutex mutex;
  uint64_t epoch = 0;
  std::map<int, Anchor> anchors;  // by device index
  std::vector<DeviceSpan> spans;
};
DeviceSpans& state() {
  static auto* spans = new DeviceSpans;  // read by EMBER_PROFILE's exit handler: never destroyed
  return *spans;
}

// Kernel calls nest (a kernel may run others): the innermost open one ends first.
thread_local std::vector<OpenSpan> t_open;

Device current_device_of(DeviceType type) { return Device(type, type == DeviceType::cuda ? cuda::current_device() : 0); }

}  // namespace

void reset_device_spans() {
  DeviceSpans& spans = state();
  std::lock_guard lock(spans.mutex);
  ++spans.epoch;
  spans.anchors.clear();
  spans.spans.clear();
}

void begin_device_span(DeviceType type) {
  const Device device = current_device_of(type);
  DeviceSpans& spans = state();
  uint64_t epoch = 0;
  {
    std::lock_guard lock(spans.mutex);
    epoch = spans.epoch;
    if (!spans.anchors.count(device.index)) {
      // Once per device and session: the one wait for the device profiling adds.
      Anchor anchor{DeviceEvent(device, true), 0};
      anchor.event.record(current_stream(device));
      anchor.event.synchronize();
      anchor.host_ns = now_ns();
      spans.anchors.emplace(device.index, std::move(anchor));
    }
  }
  OpenSpan open{epoch, DeviceEvent(device, true)};
  open.start.record(current_stream(device));
  t_open.push_back(std::move(open));
}

void end_device_span(std::string_view name, DeviceType type, DType dtype, int64_t flops, int64_t bytes) {
  if (t_open.empty()) return;
  OpenSpan open = std::move(t_open.back());
  t_open.pop_back();
  const Device device = current_device_of(type);
  const Stream stream = current_stream(device);
  DeviceEvent end(device, true);
  end.record(stream);
  DeviceSpans& spans = state();
  std::lock_guard lock(spans.mutex);
  if (open.epoch != spans.epoch) return;  // the session that saw it begin has ended
  spans.spans.push_back({.name = std::string(name), .device = device, .stream = stream.handle(),
                         .start = std::move(open.start), .end = std::move(end), .dtype = dtype, .flops = flops,
                         .bytes = bytes});
}

void take_device_spans(std::vector<Event>& events, std::map<int, std::string>& tracks) {
  DeviceSpans& spans = state();
  std::lock_guard lock(spans.mutex);
  std::map<std::pair<int, void*>, int> track_of;  // (device index, stream) -> track
  for (DeviceSpan& span : spans.spans) {
    const int next = kDeviceTrackBase + int(track_of.size());
    auto [found, added] = track_of.try_emplace({span.device.index, span.stream}, next);
    const int track = found->second;
    if (added)
      tracks[track] = span.stream ? fmt::format("GPU {} stream {}", span.device, span.stream)
                                  : fmt::format("GPU {} default stream", span.device);
    Event event;
    event.category = Category::device_kernel;
    event.name = std::move(span.name);
    event.thread = track;
    event.device = span.device.type;
    event.dtype = span.dtype;
    event.flops = span.flops;
    event.bytes = span.bytes;
    try {
      span.end.synchronize();
      const Anchor& anchor = spans.anchors.at(span.device.index);
      event.begin_ns = anchor.host_ns + int64_t(anchor.event.elapsed_ms(span.start) * 1e6);
      event.end_ns = std::max(event.begin_ns, anchor.host_ns + int64_t(anchor.event.elapsed_ms(span.end) * 1e6));
    } catch (const std::exception& failure) {
      // A device that failed meanwhile (its error surfaced elsewhere): the
      // trace says so where the span would be, instead of dropping it silently.
      event.instant = true;
      event.begin_ns = event.end_ns = now_ns();
      event.args = {{"device time unavailable", failure.what()}};
    }
    events.push_back(std::move(event));
  }
  spans.spans.clear();
  spans.anchors.clear();
}

}  // namespace ember::profiler::detail
