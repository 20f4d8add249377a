// Build facts. The CUDA backend, when built, overrides the weak queries below
// (kernels/cuda/device.cu, kernels/cuda/libraries.cpp).
#include "core/version.h"

#include <dlfcn.h>

#include "core/cuda_libraries.h"

namespace ember {

std::string_view version() { return "0.1.0"; }

std::string library_file_of(const void* function) {
  Dl_info info{};
  if (dladdr(function, &info) == 0 || info.dli_fname == nullptr) return "file unknown";
  return info.dli_fname;
}

namespace cuda {
__attribute__((weak)) int device_count() { return 0; }
__attribute__((weak)) bool is_available() { return device_count() > 0; }
__attribute__((weak)) std::string device_description(int) { return ""; }
__attribute__((weak)) std::vector<std::string> library_descriptions() { return {}; }
}  // namespace cuda

bool built_with_cuda() {
#ifdef EMBER_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace ember
