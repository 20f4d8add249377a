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
