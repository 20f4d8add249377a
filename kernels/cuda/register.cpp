// The CUDA plugin's entry points (Note [CUDA backend plugin] in
// core/README.md): libember dlopens libember_cuda.so, looks up
// ember_cuda_backend_entry_points and calls register_kernels once, which
// installs the device runtime and registers every family's kernels.
// Registering needs no GPU, so the op coverage test runs on any machine with
// a CUDA build. Tests: tests/tools/test_cuda_plugin.cpp, tests/cuda.
#include "core/cuda_backend.h"
#include "core/device_runtime.h"
#include "kernels/cuda/families.h"

namespace ember {

void register_cuda_kernels() {
  set_device_runtime(DeviceType::cuda, &cuda::cuda_runtime());
  cuda::register_copy_kernels();
  cuda::register_matmul_kernels();
  cuda::register_attention_kernels();
  cuda::register_conv_kernels();
  cuda::register_elementwise_binary_kernels();
  cuda::register_elementwise_compare_kernels();
  cuda::register_elementwise_unary_kernels();
  cuda::register_reduction_kernels();
  cuda::register_softmax_kernels();
  cuda::register_loss_kernels();
  cuda::register_normalization_kernels();
  cuda::register_indexing_kernels();
  cuda::register_random_kernels();
  cuda::register_dropout_kernels();
  cuda::register_optimizer_kernels();
  cuda::register_sorting_kernels();
  cuda::register_scan_kernels();
}

}  // namespace ember

// A C symbol, so that libember finds it with dlsym; returns a pointer, not a
// C++ value, across the C linkage.
extern "C" const ember::cuda::BackendEntryPoints* ember_cuda_backend_entry_points() {
  static const ember::cuda::BackendEntryPoints entry_points{
      .register_kernels = &ember::register_cuda_kernels,
      .device_count = &ember::cuda::runtime_device_count,
      .device_description = &ember::cuda::runtime_device_description,
      .library_descriptions = &ember::cuda::loaded_library_descriptions,
      .make_allocator = &ember::make_cuda_allocator,
  };
  return &entry_points;
}
