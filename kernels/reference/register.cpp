// The reference backend's explicit init: every family registers its naive
// kernels here. Called once by the dispatch table (core/dispatch.cpp).
#include "kernels/reference/families.h"

namespace ember {

void register_reference_kernels() {
  reference::register_copy_kernels();
  reference::register_elementwise_kernels();
  reference::register_reduction_kernels();
  reference::register_matmul_kernels();
  reference::register_indexing_kernels();
  reference::register_conv_kernels();
  reference::register_random_kernels();
  reference::register_optimizer_kernels();
  reference::register_normalization_kernels();
  reference::register_dropout_kernels();
  reference::register_loss_kernels();
  reference::register_sorting_kernels();
  reference::register_scan_kernels();
}

}  // namespace ember
