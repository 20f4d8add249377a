// The gradient families: each file fills the GradSlots of one op family with
// the recorder of its backward node, forward formula and gradient side by side.
#pragma once

namespace ember {
void register_autograd_functions();  // called once by the dispatch table's init
}

namespace ember::autograd {
void register_elementwise_functions();  // elementwise.cpp
void register_reduction_functions();    // reduction.cpp (and softmax)
void register_linalg_functions();       // linalg.cpp
void register_shape_functions();        // shape.cpp (views and copies)
void register_indexing_functions();     // indexing.cpp
void register_nn_functions();           // nn.cpp (convolution and pooling)
void register_normalization_functions();  // normalization.cpp (layer/rms/batch norm)
void register_dropout_functions();        // dropout.cpp
void register_loss_functions();           // loss.cpp (cross-entropy)
void register_attention_functions();      // attention.cpp (fused causal attention)
void register_sorting_functions();        // sorting.cpp (sort, topk)
void register_scan_functions();           // scan.cpp (cumsum, cumprod)
void register_reorder_functions();        // reorder.cpp (flip, roll)
void register_in_place();               // in_place.cpp
}  // namespace ember::autograd
