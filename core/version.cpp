// Build facts. The CUDA backend, when built, overrides the weak queries below.
#include "core/version.h"

namespace ember {

std::string_view version() { return "0.1.0"; }

namespace cuda {
__attribute__((weak)) int device_count() { return 0; }
__attribute__((weak)) bool is_available() { return device_count() > 0; }
__attribute__((weak)) std::string device_description(int) { return ""; }
}  // namespace cuda

bool built_with_cuda() {
#ifdef EMBER_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace ember
