// Reference reductions, the oracle of tests/core/test_reduction.cpp: for each
// output element, gather its reduced elements in logical order (as double for
// floating inputs, int64 otherwise), then apply the textbook formula.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/arithmetic.h"
#include "core/convert.h"
#include "core/ops/reduction_kernels.h"
#include "kernels/reference/families.h"

namespace ember::reference {

void register_softmax_kernels();  // softmax.cpp

namespace {

// Exact for every integer; double holds every floating dtype with room to spare.
template <class T>
using Wide = std::conditional_t<std::is_floating_point_v<ComputeType<T>>, double, int64_t>;

// The reduced elements of output o, in flat reduced order.
template <class T>
std::vector<Wide<T>> gather(const ReductionLoop& loop, int64_t o) {
  const T* base = reinterpret_cast<const T*>(loop.input) + loop.kept_offset(o);
  std::vector<Wide<T>> values;
  for (int64_t r = 0; r < loop.reduced_numel; ++r) {
    int64_t offset = 0, rest = r;
    for (int d = loop.reduced_ndim - 1; d >= 0; --d) {
      offset += (rest % loop.reduced_shape[d]) * loop.reduced_strides[d];
      rest /= loop.reduced_shape[d];
    }
    values.push_back(Wide<T>(ComputeType<T>(base[offset])));
  }
  return values;
}

// output[o] = formula(values of o), for every output element.
template <class T, class Out, class Formula>
void each_output(const ReductionLoop& loop, Formula formula) {
  for (int64_t o = 0; o < loop.kept_numel; ++o)
    reinterpret_cast<Out*>(loop.output)[o] = convert<Out>(formula(gather<T>(loop, o)));
}

template <class V>
V total(const std::vector<V>& values) {
  V sum = 0;
  for (V v : values) sum = arith::add(sum, v);  // integers wrap, as in PyTorch
  return sum;
}

// The index of the first maximum (or minimum); a nan wins at its first position.
template <bool kMax, class V>
int64_t extreme_index(const std::vector<V>& values) {
  int64_t best = 0;
  for (int64_t i = 0; i < int64_t(values.size()); ++i) {
    V v = values[size_t(i)];
    if (v != v) return i;
    if (kMax ? v > values[size_t(best)] : v < values[size_t(best)]) best = i;
  }
  return best;
}

template <class T>
using SumOut = std::conditional_t<std::is_floating_point_v<ComputeType<T>>, T, int64_t>;

template <class T>
void sum(const ReductionLoop& loop) {
  each_output<T, SumOut<T>>(loop, [](const auto& values) { return total(values); });
}

template <class T>
void mean(const ReductionLoop& loop) {
  each_output<T, T>(loop, [](const auto& values) { return total(values) / double(values.size()); });
}

template <class T>
void prod(const ReductionLoop& loop) {
  each_output<T, SumOut<T>>(loop, [](const auto& values) {
    Wide<T> product = 1;
    for (Wide<T> v : values) product = arith::mul(product, v);
    return product;
  });
}

template <bool kMax, class T>
void extreme_value(const ReductionLoop& loop) {
  each_output<T, T>(loop, [](const auto& values) { return values[size_t(extreme_index<kMax>(values))]; });
}

template <bool kMax, class T>
void extreme_with_index(const ReductionLoop& loop) {
  for (int64_t o = 0; o < loop.kept_numel; ++o) {
    auto values = gather<T>(loop, o);
    int64_t best = extreme_index<kMax>(values);
    if (loop.output) reinterpret_cast<T*>(loop.output)[o] = convert<T>(values[size_t(best)]);
    if (loop.indices) loop.indices[o] = best;
  }
}

// Two passes: the mean, then the squared deviations from it.
template <class T>
void variance(const ReductionLoop& loop, bool unbiased, bool take_sqrt) {
  each_output<T, T>(loop, [&](const std::vector<double>& values) {
    double n = double(values.size()), mean = total(values) / n, squares = 0;
    for (double v : values) squares += (v - mean) * (v - mean);
    double variance = squares / std::max(0.0, n - (unbiased ? 1 : 0));
    return take_sqrt ? std::sqrt(variance) : variance;
  });
}
template <class T> void var(const ReductionLoop& loop, bool unbiased) { variance<T>(loop, unbiased, false); }
template <class T> void std(const ReductionLoop& loop, bool unbiased) { variance<T>(loop, unbiased, true); }

// log(sum(exp(x - m))) + m with m the maximum, taken as 0 when infinite (as PyTorch).
template <class T>
void logsumexp(const ReductionLoop& loop) {
  each_output<T, T>(loop, [](const std::vector<double>& values) {
    double m = values.empty() ? 0.0 : values[size_t(extreme_index<true>(values))];
    if (std::isinf(m)) m = 0;
    double sum = 0;
    for (double v : values) sum += std::exp(v - m);
    return std::log(sum) + m;
  });
}

template <class T>
void norm(const ReductionLoop& loop, double p) {
  each_output<T, T>(loop, [p](std::vector<double> values) {
    for (double& v : values) v = std::abs(v);
    if (std::isinf(p)) return values[size_t(p > 0 ? extreme_index<true>(values) : extreme_index<false>(values))];
    double sum = 0;
    for (double v : values) sum += p == 0 ? double(v != 0) : std::pow(v, p);
    return p == 0 ? sum : std::pow(sum, 1.0 / p);
  });
}

}  // namespace

void register_reduction_kernels() {
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      sum_op, [](auto tag) { return &sum<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      prod_op, [](auto tag) { return &prod<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      amax_op, [](auto tag) { return &extreme_value<true, decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      amin_op, [](auto tag) { return &extreme_value<false, decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      max_indices_op, [](auto tag) { return &extreme_with_index<true, decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      min_indices_op, [](auto tag) { return &extreme_with_index<false, decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(mean_op, [](auto tag) { return &mean<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(var_op, [](auto tag) { return &var<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(std_op, [](auto tag) { return &std<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(
      logsumexp_op, [](auto tag) { return &logsumexp<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(norm_op, [](auto tag) { return &norm<decltype(tag)>; });
  register_softmax_kernels();
}

}  // namespace ember::reference
