// Streams and events of a device, PyTorch's torch.cuda.Stream/Event: work
// queued on one stream runs in order, work on two streams may overlap, and an
// event recorded on one stream orders another after it. Ops queue their
// kernels on the current stream of their device, which StreamGuard swaps for a
// scope. On the CPU every call is a no-op, so device-agnostic code needs no
// branch: the CPU runs everything in order on the host.
//
//   Stream side = Stream::create(device);
//   { StreamGuard guard(side); y = f(x); }      // f's kernels go to `side`
//   Event done; done.record(side);
//   current_stream(device).wait(done);           // later work waits for f
#pragma once

#include <memory>

#include "core/device.h"

namespace ember {

class Event;

class Stream {
 public:
  Stream() = default;  // the CPU's (trivial) stream
  // A new stream of `device`, distinct from its default stream.
  static Stream create(Device device);
  // The device's default stream.
  static Stream default_stream(Device device);

  Device device() const { return device_; }
  void* handle() const { return handle_.get(); }  // cudaStream_t on a GPU; null for a default stream
  void synchronize() const;                       // blocks the host until the stream's work is done
  bool query() const;                             // whether it is done, without blocking
  void wait(const Event& event) const;            // later work on this stream waits for `event`
  friend bool operator==(const Stream& a, const Stream& b) {
    return a.device_ == b.device_ && a.handle() == b.handle();
  }

 private:
  friend Stream current_stream(Device device);
  Stream(Device device, std::shared_ptr<void> handle) : device_(device), handle_(std::move(handle)) {}
  Device device_;
  std::shared_ptr<void> handle_;  // owns a created stream; a default or borrowed one has no deleter
};

// The stream that ops on `device` queue their work on now.
Stream current_stream(Device device);

// Makes `stream` current on its device for the guard's scope, then restores the previous one.
class StreamGuard {
 public:
  [[nodiscard]] explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream previous_;
  Device device_;
};

class Event {
 public:
  // timing: whether elapsed_ms may be asked of it (timing events cost more).
  explicit Event(Device device = kCPU, bool timing = false);

  void record(const Stream& stream);
  void record();  // on the current stream of the event's device
  void synchronize() const;
  bool query() const;
  // Milliseconds from this event to `end`; both recorded with timing, and done.
  double elapsed_ms(const Event& end) const;
  Device device() const { return device_; }
  void* handle() const { return handle_.get(); }

 private:
  Device device_;
  std::shared_ptr<void> handle_;
};

// Blocks the host until every stream of `device` is idle; no-op on the CPU.
void synchronize(Device device);

namespace cuda {
// The GPU that ops and allocations of "cuda" without an index use, per thread;
// the Accelerator sets it to the process's local rank.
int current_device();
void set_device(int index);
void synchronize();  // the current GPU
}  // namespace cuda

}  // namespace ember
