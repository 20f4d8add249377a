// The CUDA backend's families; register.cpp calls each one's init.
#pragma once

namespace ember {
class DeviceRuntime;
void register_cuda_kernels();
}  // namespace ember

namespace ember::cuda {
DeviceRuntime& cuda_runtime();        // runtime.cpp
void register_copy_kernels();         // copy.cu (copy, fill)
void register_indexing_kernels();     // indexing.cu (gather, scatter_add, index_select, embedding, tril, triu, one_hot)
void register_random_kernels();       // random.cu (uniform, normal, randint)
void register_dropout_kernels();      // dropout.cu
void register_optimizer_kernels();    // optimizer.cu (the fused updates, unscale_and_check)
}  // namespace ember::cuda
