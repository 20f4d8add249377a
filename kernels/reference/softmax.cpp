// Reference softmax and log_softmax in double, the oracle of
// tests/core/test_softmax.cpp: per line along the dim, subtract the maximum,
// exponentiate, normalise. A line of all -inf gives nan (-inf - -inf), as PyTorch.
#include <cmath>
#include <limits>
#include <vector>

#include "core/convert.h"
#include "core/ops/reduction_kernels.h"
#include "kernels/reference/families.h"

namespace ember::reference {

void register_softmax_kernels();

namespace {

template <bool kLog, class T>
void softmax_lines(const SoftmaxLoop& loop) {
  const T* in = reinterpret_cast<const T*>(loop.input);
  T* out = reinterpret_cast<T*>(loop.output);
  for (int64_t outer = 0; outer < loop.outer; ++outer) {
    for (int64_t inner = 0; inner < loop.inner; ++inner) {
      const int64_t first = outer * loop.size * loop.inner + inner;
      std::vector<double> line;
      for (int64_t i = 0; i < loop.size; ++i) line.push_back(double(ComputeType<T>(in[first + i * loop.inner])));
      double m = -std::numeric_limits<double>::infinity();
      for (double v : line) m = v > m ? v : m;
      double sum = 0;
      for (double v : line) sum += std::exp(v - m);
      for (int64_t i = 0; i < loop.size; ++i) {
        double v = line[size_t(i)];
        out[first + i * loop.inner] = convert<T>(kLog ? v - m - std::log(sum) : std::exp(v - m) / sum);
      }
    }
  }
}

}  // namespace

void register_softmax_kernels() {
  register_reference_for<float, double, Half, BFloat16>(
      softmax_op, [](auto tag) { return &softmax_lines<false, decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(
      log_softmax_op, [](auto tag) { return &softmax_lines<true, decltype(tag)>; });
}

}  // namespace ember::reference
