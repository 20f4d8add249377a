// The CUDA backend's explicit init, called once by the dispatch table
// (core/dispatch.cpp, where it is weak): installs the device runtime and
// registers every family's kernels. Registering needs no GPU, so the op
// coverage test runs on any machine with a CUDA build.
#include "core/device_runtime.h"
#include "kernels/cuda/families.h"

namespace ember {

void register_cuda_kernels() {
  set_device_runtime(DeviceType::cuda, &cuda::cuda_runtime());
  cuda::register_copy_kernels();
  cuda::register_indexing_kernels();
  cuda::register_random_kernels();
  cuda::register_dropout_kernels();
  cuda::register_optimizer_kernels();
}

}  // namespace ember
