// What every CUDA kernel file needs from the runtime: error checks that throw
// ember::Error, the current device and stream ops queue on, a device guard,
// and launch sizes. Host code; kernels/cuda/device_utils.cuh has the device side.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

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

// A device buffer of one small struct that a kernel writes and the host reads
// back after the kernel (index checks, invalid targets). The read is an
// implicit device-to-host copy: refused in strict mode (core/device_runtime.h).
void* scratch_flag(size_t nbytes);  // per thread and device, at least nbytes, zeroed on the current stream
void read_scratch_flag(void* host, size_t nbytes, const char* op);

}  // namespace ember::cuda
