// The CUDA device runtime: core's DeviceRuntime (copies, streams, events) over
// the CUDA runtime API, installed by register_cuda_kernels (register.cpp).
// Note [CUDA streams] in kernels/cuda/README.md.
#include "kernels/cuda/runtime.h"

#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "core/device_runtime.h"

namespace ember::cuda {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) [[likely]]
    return;
  cudaGetLastError();  // a non-sticky error must not resurface in the next call
  int device = -1;
  cudaGetDevice(&device);
  detail::throw_error(fmt::format("CUDA error in {} on cuda:{}: {} ({})", what, device, cudaGetErrorString(status),
                                  cudaGetErrorName(status)));
}

namespace {

constexpr int kMaxGpus = kMaxDevicesPerType;

// Per thread, as in PyTorch: a StreamGuard on one thread leaves the others alone.
thread_local cudaStream_t t_current_streams[kMaxGpus] = {};
thread_local int t_current_device = -1;

void check_index(int index, const char* what) {
  EMBER_CHECK(index >= 0 && index < kMaxGpus, "{}: cuda:{} is not a device index ember supports (0..{})", what, index,
              kMaxGpus - 1);
}

// Pinned host buffers that non-blocking host-to-device copies stage through.
// A buffer returns to the pool once the event recorded after its copy is done.
class PinnedStaging {
 public:
  void* acquire(size_t nbytes, cudaEvent_t* done) {
    std::lock_guard lock(mutex_);
    reclaim_finished();
    void* buffer = nullptr;
    EMBER_CUDA_CHECK(cudaMallocHost(&buffer, nbytes));
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(done, cudaEventDisableTiming));
    in_flight_.push_back({buffer, *done});
    return buffer;
  }

 private:
  struct InFlight {
    void* buffer;
    cudaEvent_t done;
  };
  void reclaim_finished() {
    while (!in_flight_.empty() && cudaEventQuery(in_flight_.front().done) == cudaSuccess) {
      cudaFreeHost(in_flight_.front().buffer);
      cudaEventDestroy(in_flight_.front().done);
      in_flight_.pop_front();
    }
  }
  std::mutex mutex_;
  std::deque<InFlight> in_flight_;
};

bool is_pinned(const void* ptr) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

class CudaRuntime final : public DeviceRuntime {
 public:
  int device_count() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return count;
  }
  int current_device() override { return current_device_index(); }
  void set_device(int index) override {
    check_device(index, "set_device");
    EMBER_CUDA_CHECK(cudaSetDevice(index));
    t_current_device = index;
  }
  void synchronize(int index) override {
    check_device(index, "synchronize");
    DeviceGuard guard(index);
    EMBER_CUDA_CHECK(cudaDeviceSynchronize());
    raise_deferred_errors();
  }

  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
            bool non_blocking) override {
    const Device gpu = src_device.is_cuda() ? src_device : dst_device;
    check_device(gpu.index, "to");
    DeviceGuard guard(gpu.index);
    cudaStream_t stream = cuda::current_stream(gpu.index);
    if (src_device.is_cuda() && dst_device.is_cuda()) {
      if (src_device.index == dst_device.index)
        EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, stream));
      else
        EMBER_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes, stream));
    } else if (dst_device.is_cuda()) {
      copy_to_device(dst, src, nbytes, non_blocking, stream);
      return;
    } else {
      EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, stream));
      // The host buffer is pageable (the CPU allocator's), so the host cannot
      // go on before the copy lands: a device-to-host copy always waits.
      EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
      raise_deferred_errors();
      return;
    }
    if (!non_blocking) EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  void* create_stream(int index) override {
    check_device(index, "Stream::create");
    DeviceGuard guard(index);
    cudaStream_t stream = nullptr;
    EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return stream;
  }
  void destroy_stream(int index, void* stream) override {
    DeviceGuard guard(index);
    cudaStreamDestroy(static_cast<cudaStream_t>(stream));  // in a destructor: nothing to report to
  }
  void* current_stream(int index) override { return cuda::current_stream(index); }
  void set_current_stream(int index, void* stream) override {
    check_index(index, "StreamGuard");
    t_current_streams[index] = static_cast<cudaStream_t>(stream);
  }
  void synchronize_stream(int index, void* stream) override {
    DeviceGuard guard(index);
    EMBER_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    raise_deferred_errors();
  }
  bool query_stream(int index, void* stream) override {
    DeviceGuard guard(index);
    return ready(cudaStreamQuery(static_cast<cudaStream_t>(stream)), "cudaStreamQuery");
  }

  void* create_event(int index, bool timing) override {
    check_device(index, "Event");
    DeviceGuard guard(index);
    cudaEvent_t event = nullptr;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&event, timing ? cudaEventDefault : cudaEventDisableTiming));
    return event;
  }
  void destroy_event(int index, void* event) override {
    DeviceGuard guard(index);
    cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }
  void record_event(int index, void* event, void* stream) override {
    DeviceGuard guard(index);
    EMBER_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
  }
  void wait_event(int index, void* stream, void* event) override {
    DeviceGuard guard(index);
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
  }
  void synchronize_event(int index, void* event) override {
    DeviceGuard guard(index);
    EMBER_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
    raise_deferred_errors();
  }
  bool query_event(int index, void* event) override {
    DeviceGuard guard(index);
    return ready(cudaEventQuery(static_cast<cudaEvent_t>(event)), "cudaEventQuery");
  }
  double elapsed_ms(int index, void* start, void* end) override {
    DeviceGuard guard(index);
    float ms = 0;
    EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
    return ms;
  }

 private:
  void check_device(int index, const char* what) {
    int count = device_count();
    EMBER_CHECK(index >= 0 && index < count, "{}: no device cuda:{} ({} GPU{} found)", what, index, count,
                count == 1 ? "" : "s");
  }
  static bool ready(cudaError_t status, const char* what) {
    if (status == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    check(status, what);
    return true;
  }
  void copy_to_device(void* dst, const void* src, size_t nbytes, bool non_blocking, cudaStream_t stream) {
    if (!non_blocking || is_pinned(src)) {
      EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream));
      if (!non_blocking) EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
      return;
    }
    cudaEvent_t done = nullptr;
    void* staging = staging_.acquire(nbytes, &done);
    std::memcpy(staging, src, nbytes);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, staging, nbytes, cudaMemcpyHostToDevice, stream));
    EMBER_CUDA_CHECK(cudaEventRecord(done, stream));
  }

  PinnedStaging staging_;
};

}  // namespace

int current_device_index() {
  if (t_current_device < 0) EMBER_CUDA_CHECK(cudaGetDevice(&t_current_device));
  return t_current_device;
}

cudaStream_t current_stream(int index) {
  check_index(index, "current_stream");
  return t_current_streams[index];
}
cudaStream_t current_stream() { return t_current_streams[current_device_index()]; }

DeviceGuard::DeviceGuard(int index) {
  previous_ = current_device_index();
  if (previous_ != index) {
    EMBER_CUDA_CHECK(cudaSetDevice(index));
    t_current_device = index;
  }
}

DeviceGuard::~DeviceGuard() {
  if (t_current_device != previous_) {
    cudaSetDevice(previous_);
    t_current_device = previous_;
  }
}

namespace {
struct ScratchFlag {
  void* data = nullptr;
  size_t capacity = 0;
};
thread_local ScratchFlag t_scratch[kMaxGpus];
}  // namespace

void* scratch_flag(size_t nbytes) {
  ScratchFlag& scratch = t_scratch[current_device_index()];
  if (scratch.capacity < nbytes) {
    // Leaked per thread and device on purpose: a few bytes, reused by every check.
    EMBER_CUDA_CHECK(cudaMalloc(&scratch.data, nbytes));
    scratch.capacity = nbytes;
  }
  EMBER_CUDA_CHECK(cudaMemsetAsync(scratch.data, 0, nbytes, current_stream()));
  return scratch.data;
}

namespace {

// A validation whose flag is on its way to the host (strict mode): the pinned
// copy, the event after it, and what raises the op's error from it.
struct DeferredCheck {
  void* pinned;
  cudaEvent_t copied;
  std::function<void(const void*)> raise;
};
thread_local std::vector<DeferredCheck> t_deferred;

constexpr size_t kMaxFlagBytes = 64;

}  // namespace

void check_scratch_flag(size_t nbytes, std::function<void(const void*)> raise) {
  EMBER_ASSERT(nbytes <= kMaxFlagBytes, "scratch flag of {} bytes", nbytes);
  const void* flag = t_scratch[current_device_index()].data;
  if (!strict_device_copies()) {
    alignas(16) char host[kMaxFlagBytes];
    EMBER_CUDA_CHECK(cudaMemcpyAsync(host, flag, nbytes, cudaMemcpyDeviceToHost, current_stream()));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
    raise(host);
    return;
  }
  DeferredCheck check{nullptr, nullptr, std::move(raise)};
  EMBER_CUDA_CHECK(cudaMallocHost(&check.pinned, nbytes));
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&check.copied, cudaEventDisableTiming));
  EMBER_CUDA_CHECK(cudaMemcpyAsync(check.pinned, flag, nbytes, cudaMemcpyDeviceToHost, current_stream()));
  EMBER_CUDA_CHECK(cudaEventRecord(check.copied, current_stream()));
  t_deferred.push_back(std::move(check));
}

void raise_deferred_errors() {
  if (t_deferred.empty()) [[likely]]
    return;
  std::vector<DeferredCheck> done, pending;
  for (DeferredCheck& check : t_deferred)
    (cudaEventQuery(check.copied) == cudaSuccess ? done : pending).push_back(std::move(check));
  cudaGetLastError();  // cudaErrorNotReady from the queries is not an error
  t_deferred = std::move(pending);
  // Every finished check is released before the first error is raised.
  std::function<void()> first_error;
  for (DeferredCheck& check : done) {
    if (!first_error) {
      try {
        check.raise(check.pinned);
      } catch (const Error& e) {
        first_error = [message = std::string(e.what())] {
          detail::throw_error(message + " (found by a GPU kernel queued earlier: strict device copies defer the check "
                                        "to the next synchronisation)");
        };
      }
    }
    cudaFreeHost(check.pinned);
    cudaEventDestroy(check.copied);
  }
  if (first_error) first_error();
}

DeviceRuntime& cuda_runtime() {
  static CudaRuntime* runtime = new CudaRuntime();  // leaked: tensors in static objects may outlive it
  return *runtime;
}

}  // namespace ember::cuda
