// The CUDA backend's families, and the plugin's other entry points, which
// register.cpp hands to libember (core/cuda_backend.h).
#pragma once

#include <string>
#include <vector>

namespace ember {
class Allocator;
class DeviceRuntime;
void register_cuda_kernels();
Allocator* make_cuda_allocator(int index);  // cuda_allocator.cpp
}  // namespace ember

namespace ember::cuda {
int runtime_device_count();                           // device.cu (cudaGetDeviceCount)
std::string runtime_device_description(int index);    // device.cu
std::vector<std::string> loaded_library_descriptions();  // libraries.cpp
DeviceRuntime& cuda_runtime();        // runtime.cpp
void register_copy_kernels();         // copy.cu (copy, fill)
void register_matmul_kernels();       // matmul.cu (cuBLAS)
void register_attention_kernels();    // attention.cu (fused causal attention)
void register_conv_kernels();         // conv.cu (cuDNN convolution, pooling)
void register_elementwise_binary_kernels();   // elementwise_binary.cu (arithmetic, pow, where, addcmul, masked_fill)
void register_elementwise_compare_kernels();  // elementwise_compare.cu (comparisons, logic, isnan, isinf)
void register_elementwise_unary_kernels();    // elementwise_unary.cu (unary math, clamp, activation gradients)
void register_reduction_kernels();      // reduction.cu (every op of core/ops/reduction_kernels.h but softmax)
void register_softmax_kernels();        // softmax.cu (softmax, log_softmax)
void register_loss_kernels();           // loss.cu (cross_entropy, forward and backward)
void register_normalization_kernels();  // normalization.cu (layer, RMS and batch norm, forward and backward)
void register_indexing_kernels();     // indexing.cu (gather, scatter_add, index_select, embedding, tril, triu, one_hot)
void register_random_kernels();       // random.cu (uniform, normal, randint)
void register_dropout_kernels();      // dropout.cu
void register_optimizer_kernels();    // optimizer.cu (the fused updates, unscale_and_check)
void register_sorting_kernels();      // sorting.cu (sort, topk)
void register_scan_kernels();         // scan.cu (cumsum, cumprod)
}  // namespace ember::cuda
