// The CUDA libraries this process loaded, with their versions and the files
// they came from: `ember env` prints them, and the GPU check's library probe
// (scripts/gpu-check.sh) reads them to see which cuDNN or cuBLAS a machine
// without ember's packages resolved. core/cuda_backend.cpp asks the CUDA
// plugin (kernels/cuda/libraries.cpp), loading it, and answers {} in builds
// without CUDA; core/version.cpp defines library_file_of, which NCCL's line
// (distributed/backends/nccl_backend.h) uses too.
// Tests: tests/tools/test_env_command.cpp.
#pragma once

#include <string>
#include <vector>

namespace ember {

// The file the dynamic loader mapped `function` from: the path of the shared
// library that defines it, or "file unknown".
std::string library_file_of(const void* function);

namespace cuda {

// One line each for the CUDA runtime, the driver, cuBLAS and cuDNN, e.g.
// "cuDNN 9.13.0 (/usr/local/cuda/lib/libcudnn.so.9)"; {} without CUDA. Loads
// the CUDA plugin (core/cuda_backend.h).
std::vector<std::string> library_descriptions();

}  // namespace cuda
}  // namespace ember
