// The CPU backend's families: Eigen, OpenMP and oneDNN kernels.
#pragma once

namespace ember {
void register_cpu_kernels();
}

namespace ember::cpu {
void register_copy_kernels();         // copy.cpp
void register_elementwise_kernels();  // elementwise.cpp
void register_reduction_kernels();    // reduction.cpp (and softmax)
void register_matmul_kernels();       // matmul.cpp
void register_indexing_kernels();     // indexing.cpp
void register_conv_kernels();         // conv.cpp (convolution and its gradients)
void register_pool_kernels();         // pool.cpp (pooling forward)
void register_max_pool_backward_kernels();  // max_pool_backward.cpp
void register_random_kernels();       // random.cpp
void register_optimizer_kernels();    // optimizer.cpp
void register_normalization_kernels();  // normalization.cpp (layer/rms/batch norm)
void register_dropout_kernels();        // dropout.cpp
void register_loss_kernels();           // loss.cpp (cross-entropy)
void register_sorting_kernels();        // sorting.cpp (sort, topk)
void register_scan_kernels();           // scan.cpp (cumsum, cumprod)
void register_attention_kernels();      // attention.cpp (fused attention)
}  // namespace ember::cpu
