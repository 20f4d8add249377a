// CPU random kernels: threads split the Philox blocks (multinomial: the rows),
// and each computes its blocks from the counter (offset + block index) alone,
// so the tensor is the same for any thread count and equals the reference
// kernels' bit for bit.
#include <algorithm>

#include "core/ops/random_kernels.h"
#include "core/parallel.h"
#include "kernels/cpu/families.h"

namespace ember::cpu {
namespace {

using namespace random_detail;

// Calls write(block_words, first_element, count) for every block of the
// stream covering out's elements, in parallel above kParallelGrain elements.
using Block = std::array<uint32_t, 4>;

template <class F>
void for_each_block(int64_t numel, GeneratorState stream, int per_block, F write) {
  const int64_t blocks = (numel + per_block - 1) / per_block;
  const auto key = philox_key(stream.seed);
  parallel_for(0, blocks, std::max<int64_t>(1, kParallelGrain / per_block), [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const auto words = philox4x32(philox_counter(stream.offset, uint64_t(b)), key);
      const int64_t first = b * per_block;
      write(words, first, int(std::min<int64_t>(per_block, numel - first)));
    }
  });
}

template <class T>
void uniform_kernel(const Tensor& out, GeneratorState stream) {
  T* data = static_cast<T*>(out.data_ptr());
  for_each_block(out.numel(), stream, kUniformsPerBlock<T>, [&](const Block& words, int64_t first, int count) {
    for (int lane = 0; lane < count; ++lane) data[first + lane] = uniform<T>(words, lane);
  });
}

template <class T>
void normal_kernel(const Tensor& out, GeneratorState stream) {
  T* data = static_cast<T*>(out.data_ptr());
  for_each_block(out.numel(), stream, kUniformsPerBlock<T>, [&](const Block& words, int64_t first, int count) {
    for (int pair = 0; 2 * pair < count; ++pair) {
      const std::array<ComputeType<T>, 2> values = normal_pair<T>(words, pair);
      data[first + 2 * pair] = values[0];
      if (2 * pair + 1 < count) data[first + 2 * pair + 1] = values[1];
    }
  });
}

template <class T>
void randint_kernel(const Tensor& out, GeneratorState stream, int64_t low, int64_t high) {
  const uint64_t range = uint64_t(high) - uint64_t(low);
  T* data = static_cast<T*>(out.data_ptr());
  for_each_block(out.numel(), stream, randint_per_block(range), [&](const Block& words, int64_t first, int count) {
    for (int lane = 0; lane < count; ++lane) data[first + lane] = randint<T>(words, lane, low, range);
  });
}

// Rows split across threads; each row's draws depend on its weights and its
// own stream elements only, so any split gives the reference's samples.
void multinomial_kernel(const MultinomialProblem& p) {
  const int64_t work_per_row = std::max<int64_t>(1, p.categories * (p.replacement ? p.samples : 1));
  parallel_for(0, p.rows, std::max<int64_t>(1, kParallelGrain / work_per_row), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) multinomial_row(p, row);
  });
}

}  // namespace

void register_random_kernels() {
  multinomial_op.set(DeviceType::cpu, DType::f64, &multinomial_kernel);
  register_for<float, double, Half, BFloat16>(uniform_op, DeviceType::cpu,
                                              [](auto tag) { return &uniform_kernel<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(normal_op, DeviceType::cpu,
                                              [](auto tag) { return &normal_kernel<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      randint_op, DeviceType::cpu, [](auto tag) { return &randint_kernel<decltype(tag)>; });
}

}  // namespace ember::cpu
