// The CUDA libraries this process loaded (core/cuda_libraries.h asks here
// through the plugin's entry points, register.cpp): each one's
// version, as the library itself reports it, and the file the dynamic loader
// took it from, found from the address of one of its functions. The GPU
// machine has no Debian packages and resolves cuBLAS and cuDNN from its
// toolkit or from PyTorch's wheels; these lines say which one it took.
// None of the queries needs a GPU. Tests: tests/tools/test_env_command.cpp.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <fmt/format.h>

#include "core/cuda_libraries.h"
#include "kernels/cuda/families.h"

namespace ember::cuda {
namespace {

// CUDA's versions count major * 1000 + minor * 10.
std::string cuda_version(int version) { return fmt::format("{}.{}", version / 1000, version % 1000 / 10); }

std::string runtime_line() {
  const std::string file = library_file_of(reinterpret_cast<const void*>(&cudaRuntimeGetVersion));
  int version = 0;
  if (cudaRuntimeGetVersion(&version) != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("CUDA runtime: version unknown ({})", file);
  }
  return fmt::format("CUDA runtime {} ({})", cuda_version(version), file);
}

// The driver is loaded by the runtime, not linked: its version only.
std::string driver_line() {
  int version = 0;
  if (cudaDriverGetVersion(&version) != cudaSuccess || version == 0) {
    cudaGetLastError();
    return "CUDA driver: none found";
  }
  return fmt::format("CUDA driver {}", cuda_version(version));
}

std::string cublas_line() {
  int major = 0, minor = 0, patch = 0;
  const std::string file = library_file_of(reinterpret_cast<const void*>(&cublasGetProperty));
  if (cublasGetProperty(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
      cublasGetProperty(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS) {
    return fmt::format("cuBLAS: version unknown ({})", file);
  }
  return fmt::format("cuBLAS {}.{}.{} ({})", major, minor, patch, file);
}

// cuDNN 9 counts major * 10000 + minor * 100 + patch.
std::string cudnn_line() {
  const size_t version = cudnnGetVersion();
  return fmt::format("cuDNN {}.{}.{} ({})", version / 10000, version % 10000 / 100, version % 100,
                     library_file_of(reinterpret_cast<const void*>(&cudnnGetVersion)));
}

}  // namespace

std::vector<std::string> loaded_library_descriptions() { return {runtime_line(), driver_line(), cublas_line(), cudnn_line()}; }

}  // namespace ember::cuda
