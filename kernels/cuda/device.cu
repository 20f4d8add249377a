// CUDA device queries of the plugin (core/cuda_backend.cpp asks the driver
// first, and these only when it found a GPU). "No GPU" is any error from cudaGetDeviceCount (no
// driver, no device, a stub) or a count of 0: binaries built with CUDA must
// start and run their CPU paths on machines without a GPU.
#include <cuda_runtime.h>

#include <cstdio>

#include "kernels/cuda/families.h"

namespace ember::cuda {

int runtime_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error so later queries start clean
    return 0;
  }
  return count;
}

std::string runtime_device_description(int index) {
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, index) != cudaSuccess) {
    cudaGetLastError();
    return "unknown (cudaGetDeviceProperties failed)";
  }
  char text[512];
  std::snprintf(text, sizeof text, "%s, %.1f GiB, compute capability %d.%d", properties.name,
                double(properties.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0), properties.major, properties.minor);
  return text;
}

}  // namespace ember::cuda
