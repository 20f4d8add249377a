// CUDA dropout: one thread per Philox block of four elements, deciding them
// with core's philox4x32 and dropout_keeps, so the same stream gives the CPU's
// mask bit for bit, and the output scales in ComputeType<T> as the CPU kernel
// does (a multiply, so a dropped nan stays nan). Tests: tests/cuda/test_cuda_random.cpp.
#include <algorithm>

#include "core/ops/dropout_kernels.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/families.h"

namespace ember::cuda {
namespace {

template <class T>
__global__ void dropout_kernel(const T* in, T* out, int64_t numel, GeneratorState stream, uint32_t threshold,
                               ComputeType<T> scale) {
  const auto key = philox_key(stream.seed);
  const int64_t blocks = (numel + kDropoutPerBlock - 1) / kDropoutPerBlock;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += int64_t(gridDim.x) * blockDim.x) {
    const std::array<uint32_t, 4> words = philox4x32(philox_counter(stream.offset, uint64_t(b)), key);
    const int64_t first = b * kDropoutPerBlock;
    const int count = int(std::min<int64_t>(kDropoutPerBlock, numel - first));
    for (int lane = 0; lane < count; ++lane) {
      const ComputeType<T> factor = dropout_keeps(words[lane], threshold) ? scale : ComputeType<T>(0);
      store(out + first + lane, load(in + first + lane) * factor);
    }
  }
}

template <class T>
void dropout(const DropoutProblem& p) {
  constexpr int kThreads = 256;
  const int64_t blocks = (p.numel + kDropoutPerBlock - 1) / kDropoutPerBlock;
  dropout_kernel<<<blocks_for(blocks, kThreads), kThreads, 0, current_stream()>>>(
      static_cast<const T*>(p.input), static_cast<T*>(p.output), p.numel, p.stream, p.threshold,
      ComputeType<T>(p.scale));
  check_launch("dropout");
}

}  // namespace

void register_dropout_kernels() {
  register_for<float, double, Half, BFloat16>(dropout_op, DeviceType::cuda,
                                              [](auto tag) { return &dropout<decltype(tag)>; });
}

}  // namespace ember::cuda
