// The CUDA backend as a plugin (Note [CUDA backend plugin] in core/README.md):
// libember.so links no CUDA library; libember_cuda.so (kernels/cuda and the
// NCCL backend) is dlopened from libember's own folder the first time
// something asks for CUDA, so a CPU run of a CUDA build maps none of cudart,
// cuBLAS, cuDNN or NCCL. Called by core's CUDA queries (cuda_backend.cpp), the
// allocator registry, the device runtime registry, the op table, and
// distributed/init.cpp for the NCCL backend.
// Tests: tests/tools/test_cuda_plugin.cpp.
#pragma once

#include <string>
#include <vector>

namespace ember {

class Allocator;

namespace cuda {

// What the plugin hands libember (kernels/cuda/register.cpp fills it). The
// plugin is built from the same sources as libember, so the layout agrees.
struct BackendEntryPoints {
  void (*register_kernels)();  // installs the device runtime and every family's kernels
  int (*device_count)();       // cudaGetDeviceCount, 0 on any error
  std::string (*device_description)(int index);
  std::vector<std::string> (*library_descriptions)();
  Allocator* (*make_allocator)(int index);  // GPU `index`'s caching allocator
};

// The plugin's entry points, loading it (and registering its kernels, after
// the CPU's) on the first call; nullptr in a build without CUDA. Throws
// ember::Error naming the file and the loader's message when it cannot load.
const BackendEntryPoints* backend();

// The address of the plugin's C symbol `name` (loading the plugin), for the
// layers above core (the NCCL backend's entry points); nullptr in a build
// without CUDA. Throws ember::Error when the plugin or the symbol is missing.
void* backend_symbol(const char* name);

// Whether the plugin is loaded in this process (no load is attempted).
bool backend_loaded();

}  // namespace cuda
}  // namespace ember
