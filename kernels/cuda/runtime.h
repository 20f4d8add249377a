// What every CUDA kernel file needs from the runtime: error checks that throw
// ember::Error, the current device and stream ops queue on, a device guard,
// and launch sizes. Host code; kernels/cuda/device_utils.cuh has the device side.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "core/error.h"

namespace ember::cuda {

// Throws an ember::Error naming `what` (the call, or the op) and CUDA's message.
void check(cudaError_t status, const char* what);
#define EMBER_CUDA_CHECK(call) ::ember::cuda::check((call), #call)
// After a kernel launch: a bad configuration surfaces here, naming the kernel.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

// The GPU this thread's ops run on (cudaGetDevice, cached per thread).
int current_device_index();
// The stream ops queue their work on: the current device's current stream.
cudaStream_t current_stream();
cudaStream_t current_stream(int index);

// Makes GPU `index` current for a scope and restores the caller's device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

// The number of blocks of `threads` that cover n items, capped to what a grid
// dimension holds (grid-stride loops cover the rest).
inline unsigned blocks_for(int64_t n, int threads, int64_t max_blocks = int64_t(1) << 20) {
  int64_t blocks = (n + threads - 1) / threads;
  return unsigned(blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks));
}

// Validation results of kernels (index checks, invalid targets): a kernel
// writes a small struct into the scratch flag, zeroed on the current stream by
// scratch_flag, and check_scratch_flag hands the host's copy to `raise`, which
// throws the op's error if the struct reports one. Normally the host waits for
// the kernel (one stream synchronisation per such op). Under strict device
// copies it does not: the flag is copied to pinned memory behind the kernel
// and checked at the next synchronisation on this thread (synchronize, a copy
// to the host, a stream or event wait), which raises the first error found,
// saying it came from an earlier kernel. Note [Index errors on the GPU].
void* scratch_flag(size_t nbytes);  // per thread and device, at least nbytes, zeroed on the current stream
void check_scratch_flag(size_t nbytes, std::function<void(const void*)> raise);
// Raises the first error of the deferred checks whose flags have arrived.
void raise_deferred_errors();

}  // namespace ember::cuda
