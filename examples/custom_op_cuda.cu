// The CUDA kernels of examples/custom_op.cpp's squared_relu, built only with
// the CUDA backend (examples/CMakeLists.txt). A kernel runs on ember's current
// stream, so it is ordered after the ops that produced its input.
#include "custom_op.h"
#include "kernels/cuda/runtime.h"

namespace example {
namespace {

template <class T>
__global__ void squared_relu_kernel(const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = x[i] > T(0) ? x[i] * x[i] : T(0);
}

template <class T>
void squared_relu_cuda(const void* x, void* y, int64_t n) {
  constexpr int kThreads = 256;
  squared_relu_kernel<T><<<ember::cuda::blocks_for(n, kThreads), kThreads, 0, ember::cuda::current_stream()>>>(
      static_cast<const T*>(x), static_cast<T*>(y), n);
  ember::cuda::check_launch("squared_relu");
}

}  // namespace

void register_squared_relu_cuda_kernels() {
  ember::register_for<float, double>(squared_relu_op, ember::DeviceType::cuda,
                                     [](auto tag) { return &squared_relu_cuda<decltype(tag)>; });
}

}  // namespace example
