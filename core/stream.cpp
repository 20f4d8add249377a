// Streams and events (core/stream.h) over the device runtime of their device
// type (core/device_runtime.h). The CPU's are trivial.
#include "core/stream.h"

#include "core/device_runtime.h"
#include "core/error.h"

namespace ember {
namespace {

// A handle the Stream or Event does not own: the device's default stream, or
// one the runtime reports as current.
std::shared_ptr<void> borrowed(void* handle) { return std::shared_ptr<void>(handle, [](void*) {}); }

}  // namespace

Stream Stream::create(Device device) {
  if (device.is_cpu()) return Stream();
  DeviceRuntime& runtime = device_runtime(device.type);
  void* handle = runtime.create_stream(device.index);
  return Stream(device, std::shared_ptr<void>(handle, [&runtime, index = device.index](void* h) {
                  runtime.destroy_stream(index, h);
                }));
}

Stream Stream::default_stream(Device device) { return Stream(device, borrowed(nullptr)); }

void Stream::synchronize() const {
  if (!device_.is_cpu()) device_runtime(device_.type).synchronize_stream(device_.index, handle());
}

bool Stream::query() const {
  return device_.is_cpu() || device_runtime(device_.type).query_stream(device_.index, handle());
}

void Stream::wait(const Event& event) const {
  if (device_.is_cpu() || event.handle() == nullptr) return;  // an event never recorded is already done
  EMBER_CHECK(event.device() == device_, "Stream::wait: the stream is on {} but the event on {}", device_,
              event.device());
  device_runtime(device_.type).wait_event(device_.index, handle(), event.handle());
}

Stream current_stream(Device device) {
  if (device.is_cpu()) return Stream();
  return Stream(device, borrowed(device_runtime(device.type).current_stream(device.index)));
}

StreamGuard::StreamGuard(const Stream& stream) : previous_(current_stream(stream.device())), device_(stream.device()) {
  if (!device_.is_cpu()) device_runtime(device_.type).set_current_stream(device_.index, stream.handle());
}

StreamGuard::~StreamGuard() {
  if (!device_.is_cpu()) device_runtime(device_.type).set_current_stream(device_.index, previous_.handle());
}

Event::Event(Device device, bool timing) : device_(device) {
  if (device.is_cpu()) return;
  DeviceRuntime& runtime = device_runtime(device.type);
  handle_ = std::shared_ptr<void>(runtime.create_event(device.index, timing),
                                  [&runtime, index = device.index](void* h) { runtime.destroy_event(index, h); });
}

void Event::record(const Stream& stream) {
  if (device_.is_cpu()) return;
  EMBER_CHECK(stream.device() == device_, "Event::record: the event is on {} but the stream on {}", device_,
              stream.device());
  device_runtime(device_.type).record_event(device_.index, handle(), stream.handle());
}

void Event::record() { record(current_stream(device_)); }

void Event::synchronize() const {
  if (!device_.is_cpu()) device_runtime(device_.type).synchronize_event(device_.index, handle());
}

bool Event::query() const { return device_.is_cpu() || device_runtime(device_.type).query_event(device_.index, handle()); }

double Event::elapsed_ms(const Event& end) const {
  EMBER_CHECK(!device_.is_cpu() && device_ == end.device(),
              "Event::elapsed_ms: both events must be on one GPU, got {} and {}", device_, end.device());
  return device_runtime(device_.type).elapsed_ms(device_.index, handle(), end.handle());
}

void synchronize(Device device) {
  if (!device.is_cpu()) device_runtime(device.type).synchronize(device.index);
}

namespace cuda {
int current_device() { return device_runtime(DeviceType::cuda).current_device(); }
void set_device(int index) { device_runtime(DeviceType::cuda).set_device(index); }
void synchronize() { ember::synchronize(Device(DeviceType::cuda, current_device())); }
}  // namespace cuda

}  // namespace ember
