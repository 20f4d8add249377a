// The autograd layer's explicit init (Note [Explicit kernel registration]).
#include "autograd/functions/families.h"
#include "core/autocast_ops.h"

namespace ember {

void register_autograd_functions() {
  autograd::register_elementwise_functions();
  autograd::register_reduction_functions();
  autograd::register_linalg_functions();
  autograd::register_shape_functions();
  autograd::register_indexing_functions();
  autograd::register_nn_functions();
  autograd::register_normalization_functions();
  autograd::register_dropout_functions();
  autograd::register_attention_functions();
  autograd::register_sorting_functions();
  autograd::register_loss_functions();
  autograd::register_scan_functions();
  autograd::register_reorder_functions();
  autograd::register_in_place();
  // Autocast caches the casts of parameters only (Note [Autocast cast cache] in core/README.md).
  detail::set_autocast_leaf_query([](const Tensor& t) { return t.requires_grad() && t.is_leaf(); });
}

}  // namespace ember
