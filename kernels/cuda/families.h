// The CUDA backend's families; register.cpp calls each one's init.
#pragma once

namespace ember {
class DeviceRuntime;
void register_cuda_kernels();
}  // namespace ember

namespace ember::cuda {
DeviceRuntime& cuda_runtime();        // runtime.cpp
void register_copy_kernels();         // copy.cu (copy, fill)
void register_matmul_kernels();       // matmul.cu (cuBLAS)
void register_attention_kernels();    // attention.cu (fused causal attention)
}  // namespace ember::cuda
