// CUDA device queries. "No GPU" is any error from cudaGetDeviceCount (no
// driver, no device, a stub) or a count of 0: binaries built with CUDA must
// start and run their CPU paths on machines without a GPU.
#include <cuda_runtime.h>

#include "core/version.h"

namespace ember::cuda {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later queries start clean
    return 0;
  }
  return count;
}

bool is_available() { return device_count() > 0; }

}  // namespace ember::cuda
