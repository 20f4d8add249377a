// CUDA random creation: one thread per Philox block, running core's own
// philox4x32 and value functions (core/ops/random_kernels.h), so for the same
// GeneratorState uniform and randint equal the CPU's bit for bit and normal
// within a few ulps (Note [Random streams on the GPU]). Tests:
// tests/cuda/test_cuda_random.cpp.
#include <algorithm>

#include "core/ops/random_kernels.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/families.h"

namespace ember::cuda {
namespace {

using namespace random_detail;
using Block = std::array<uint32_t, 4>;

// Block b of the stream decides elements [b * per_block, b * per_block + count);
// `draw` stores them.
template <class T, class Draw>
__global__ void random_kernel(T* out, int64_t numel, GeneratorState stream, int per_block, Draw draw) {
  const auto key = philox_key(stream.seed);
  const int64_t blocks = (numel + per_block - 1) / per_block;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += int64_t(gridDim.x) * blockDim.x) {
    const Block words = philox4x32(philox_counter(stream.offset, uint64_t(b)), key);
    const int64_t first = b * per_block;
    draw(words, out + first, int(std::min<int64_t>(per_block, numel - first)));
  }
}

template <class T>
struct UniformDraw {
  __device__ void operator()(const Block& words, T* out, int count) const {
    for (int lane = 0; lane < count; ++lane) store(out + lane, uniform<T>(words, lane));
  }
};

template <class T>
struct NormalDraw {
  __device__ void operator()(const Block& words, T* out, int count) const {
    for (int pair = 0; 2 * pair < count; ++pair) {
      const std::array<ComputeType<T>, 2> values = normal_pair<T>(words, pair);
      store(out + 2 * pair, values[0]);
      if (2 * pair + 1 < count) store(out + 2 * pair + 1, values[1]);
    }
  }
};

template <class T>
struct RandintDraw {
  int64_t low;
  uint64_t range;
  __device__ void operator()(const Block& words, T* out, int count) const {
    for (int lane = 0; lane < count; ++lane) store(out + lane, randint<T>(words, lane, low, range));
  }
};

constexpr int kThreads = 256;

template <class T, class Draw>
void launch(const Tensor& out, GeneratorState stream, int per_block, Draw draw, const char* name) {
  const int64_t numel = out.numel(), blocks = (numel + per_block - 1) / per_block;
  random_kernel<<<blocks_for(blocks, kThreads), kThreads, 0, current_stream()>>>(static_cast<T*>(out.data_ptr()),
                                                                                numel, stream, per_block, draw);
  check_launch(name);
}

template <class T>
void uniform_kernel(const Tensor& out, GeneratorState stream) {
  launch<T>(out, stream, kUniformsPerBlock<T>, UniformDraw<T>{}, "uniform");
}

template <class T>
void normal_kernel(const Tensor& out, GeneratorState stream) {
  launch<T>(out, stream, kUniformsPerBlock<T>, NormalDraw<T>{}, "normal");
}

template <class T>
void randint_kernel(const Tensor& out, GeneratorState stream, int64_t low, int64_t high) {
  const uint64_t range = uint64_t(high) - uint64_t(low);
  launch<T>(out, stream, randint_per_block(range), RandintDraw<T>{low, range}, "randint");
}

// A thread per row, drawing the row's samples in order with the CPU's code
// (multinomial_row), so the samples equal the CPU's for the same stream.
__global__ void multinomial_rows_kernel(MultinomialProblem p) {
  for (int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; row < p.rows;
       row += int64_t(gridDim.x) * blockDim.x)
    multinomial_row(p, row);
}

void multinomial_kernel(const MultinomialProblem& p) {
  multinomial_rows_kernel<<<blocks_for(p.rows, kThreads), kThreads, 0, current_stream()>>>(p);
  check_launch("multinomial");
}

}  // namespace

void register_random_kernels() {
  multinomial_op.set(DeviceType::cuda, DType::f64, &multinomial_kernel);
  register_for<float, double, Half, BFloat16>(uniform_op, DeviceType::cuda,
                                              [](auto tag) { return &uniform_kernel<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(normal_op, DeviceType::cuda,
                                              [](auto tag) { return &normal_kernel<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      randint_op, DeviceType::cuda, [](auto tag) { return &randint_kernel<decltype(tag)>; });
}

}  // namespace ember::cuda
