// The CPU backend's explicit init: every family registers its fast
// kernels here. Called once by the dispatch table (core/dispatch.cpp).
#include "kernels/cpu/families.h"

namespace ember {

void register_cpu_kernels() {
  cpu::register_copy_kernels();
  cpu::register_elementwise_kernels();
  cpu::register_reduction_kernels();
  cpu::register_matmul_kernels();
  cpu::register_indexing_kernels();
  cpu::register_conv_kernels();
  cpu::register_pool_kernels();
  cpu::register_max_pool_backward_kernels();
  cpu::register_random_kernels();
  cpu::register_optimizer_kernels();
  cpu::register_normalization_kernels();
  cpu::register_dropout_kernels();
  cpu::register_loss_kernels();
  cpu::register_sorting_kernels();
  cpu::register_scan_kernels();
  cpu::register_attention_kernels();
}

}  // namespace ember
