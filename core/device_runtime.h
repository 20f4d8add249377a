// The runtime of a device type other than the CPU: copies to and from it,
// the current device, streams and events. Core owns the interface, a backend
// installs the implementation (the CUDA one: kernels/cuda/runtime.cpp), so core
// moves tensors between devices without including any vendor header, as the
// allocator registry does for memory (Note [Device runtime] in core/README.md).
//
// Handles are opaque: a stream or event is whatever the backend's API calls
// one (cudaStream_t, cudaEvent_t); the null stream handle is the device's
// default stream.
#pragma once

#include <cstddef>

#include "core/device.h"

namespace ember {

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;

  virtual int device_count() = 0;
  virtual int current_device() = 0;
  virtual void set_device(int index) = 0;
  virtual void synchronize(int index) = 0;

  // Copies nbytes between dense buffers, at least one of them on a device of
  // this runtime, in order with the work queued on that device's current
  // stream. Blocking unless non_blocking; a non-blocking copy from pageable
  // host memory goes through a pinned staging buffer, so the source may be
  // reused as soon as this returns.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                    bool non_blocking) = 0;

  virtual void* create_stream(int index) = 0;
  virtual void destroy_stream(int index, void* stream) = 0;
  virtual void* current_stream(int index) = 0;
  virtual void set_current_stream(int index, void* stream) = 0;
  virtual void synchronize_stream(int index, void* stream) = 0;
  virtual bool query_stream(int index, void* stream) = 0;  // whether all its work is done

  virtual void* create_event(int index, bool timing) = 0;
  virtual void destroy_event(int index, void* event) = 0;
  virtual void record_event(int index, void* event, void* stream) = 0;
  virtual void wait_event(int index, void* stream, void* event) = 0;  // the stream waits, not the host
  virtual void synchronize_event(int index, void* event) = 0;
  virtual bool query_event(int index, void* event) = 0;
  virtual double elapsed_ms(int index, void* start, void* end) = 0;
};

// The runtime of `type`; throws naming the device type when the build has no
// such backend. Never called for the CPU.
DeviceRuntime& device_runtime(DeviceType type);
void set_device_runtime(DeviceType type, DeviceRuntime* runtime);

// Strict device copies (EMBER_STRICT_DEVICE_COPIES=1, or set_strict_device_copies):
// every device-to-host copy the user did not ask for with to() or copy_()
// throws instead of stalling the host: item(), to_vector(), printing, and a
// kernel that reads a result back to validate it. PyTorch's
// set_sync_debug_mode("error") plays the same part.
bool strict_device_copies();
void set_strict_device_copies(bool strict);
// Called before an implicit device-to-host copy: throws under strict mode,
// naming the op and the device.
void check_implicit_device_copy(const char* op, Device device);

}  // namespace ember
