// Reference random kernels: each element computes its own Philox block from
// its index, the definition of the stream that kernels/cpu/random.cpp must
// reproduce bit for bit (tests/core/test_random.cpp).
#include "core/ops/random_kernels.h"
#include "kernels/reference/families.h"

namespace ember::reference {
namespace {

using namespace random_detail;

std::array<uint32_t, 4> block_of(GeneratorState stream, int64_t element, int per_block) {
  return philox4x32(philox_counter(stream.offset, uint64_t(element / per_block)), philox_key(stream.seed));
}

template <class T>
void uniform_kernel(const Tensor& out, GeneratorState stream) {
  constexpr int per_block = kUniformsPerBlock<T>;
  T* data = static_cast<T*>(out.data_ptr());
  for (int64_t i = 0; i < out.numel(); ++i) data[i] = uniform<T>(block_of(stream, i, per_block), int(i % per_block));
}

template <class T>
void normal_kernel(const Tensor& out, GeneratorState stream) {
  constexpr int per_block = kUniformsPerBlock<T>;
  T* data = static_cast<T*>(out.data_ptr());
  for (int64_t i = 0; i < out.numel(); ++i) {
    int lane = int(i % per_block);
    data[i] = normal_pair<T>(block_of(stream, i, per_block), lane / 2)[lane % 2];
  }
}

template <class T>
void randint_kernel(const Tensor& out, GeneratorState stream, int64_t low, int64_t high) {
  uint64_t range = uint64_t(high) - uint64_t(low);
  int per_block = randint_per_block(range);
  T* data = static_cast<T*>(out.data_ptr());
  for (int64_t i = 0; i < out.numel(); ++i)
    data[i] = randint<T>(block_of(stream, i, per_block), int(i % per_block), low, range);
}

// One row after another, each drawing its samples in order (multinomial_row).
void multinomial_kernel(const MultinomialProblem& p) {
  for (int64_t row = 0; row < p.rows; ++row) multinomial_row(p, row);
}

}  // namespace

void register_random_kernels() {
  multinomial_op.set_reference(DType::f64, &multinomial_kernel);
  register_reference_for<float, double, Half, BFloat16>(uniform_op,
                                                        [](auto tag) { return &uniform_kernel<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(normal_op,
                                                        [](auto tag) { return &normal_kernel<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      randint_op, [](auto tag) { return &randint_kernel<decltype(tag)>; });
}

}  // namespace ember::reference
