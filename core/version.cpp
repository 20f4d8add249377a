// Build facts. The CUDA queries are in core/cuda_backend.cpp.
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

bool built_with_cuda() {
#ifdef EMBER_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace ember
