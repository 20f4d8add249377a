// Reference matrix product: the naive triple loop over every batch, one
// output element at a time. The oracle for kernels/cpu/matmul.cpp
// (tests/core/test_matmul.cpp).
#include <type_traits>

#include "core/convert.h"
#include "core/ops/linalg_kernels.h"
#include "kernels/reference/families.h"

namespace ember::reference {
namespace {

// Sums run in f32 for the 16-bit floats and in f64 for f32/f64 (the oracle is
// as exact as is cheap). Integers sum in uint64_t: wrap-around is defined
// there, and truncating it to the output type gives the same bits as exact
// integer arithmetic modulo 2^bits, where signed overflow would be undefined.
template <class T>
using Accumulator = std::conditional_t<std::is_integral_v<T>, uint64_t,
                                       std::conditional_t<std::is_same_v<ComputeType<T>, float> &&
                                                              !std::is_same_v<T, float>,
                                                          float, double>>;

template <class T>
Accumulator<T> load(const MatrixOperand& operand, int64_t offset, int64_t row, int64_t col) {
  const T* data = static_cast<const T*>(operand.data) + offset;
  T value = data[row * operand.row_stride + col * operand.col_stride];
  if constexpr (std::is_integral_v<T>) return uint64_t(int64_t(value));
  else return Accumulator<T>(ComputeType<T>(value));
}

template <class T>
void matmul(const MatmulProblem& p) {
  using Acc = Accumulator<T>;
  for (int64_t batch = 0; batch < p.batch_count(); ++batch) {
    int64_t a_offset = p.batch_offset(p.a, batch), b_offset = p.batch_offset(p.b, batch);
    T* out = static_cast<T*>(p.out.data) + p.batch_offset(p.out, batch);
    for (int64_t i = 0; i < p.m; ++i) {
      for (int64_t j = 0; j < p.n; ++j) {
        Acc sum = p.bias.data ? load<T>(p.bias, 0, i, j) : Acc(0);
        for (int64_t l = 0; l < p.k; ++l) sum += load<T>(p.a, a_offset, i, l) * load<T>(p.b, b_offset, l, j);
        T& result = out[i * p.out.row_stride + j * p.out.col_stride];
        if constexpr (std::is_integral_v<T>) result = T(int64_t(sum));
        else result = convert<T>(sum);
      }
    }
  }
}

}  // namespace

void register_matmul_kernels() {
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      matmul_op, [](auto tag) { return &matmul<decltype(tag)>; });
}

}  // namespace ember::reference
