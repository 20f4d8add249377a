// CPU reductions: one small Reducer per op, run by the loop shapes and thread
// splitting of reduction_driver.h. f16/bf16/f32 accumulate in float, f64 in
// double, bool and integers in int64. Tests: tests/core/test_reduction.cpp.
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/arithmetic.h"
#include "core/convert.h"
#include "kernels/cpu/families.h"
#include "kernels/cpu/reduction_driver.h"

namespace ember::cpu {

void register_softmax_kernels();  // softmax.cpp

namespace {

using namespace reduction_types;

template <class V>
inline bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>) return std::isnan(v);
  else return false;
}

template <class Out, class V>
inline void store_value(const ReductionLoop& loop, int64_t o, V value) {
  reinterpret_cast<Out*>(loop.output)[o] = convert<Out>(value);
}

template <class T, bool kMean = false>
struct SumReducer {
  using Acc = Accumulator<T>;
  Acc identity() const { return Acc(0); }
  Acc step(Acc a, ComputeType<T> x, int64_t) const { return arith::add(a, Acc(x)); }
  Acc merge(Acc a, Acc b) const { return arith::add(a, b); }
  void store(const ReductionLoop& loop, int64_t o, Acc a, int64_t count) const {
    if constexpr (kMean) store_value<T>(loop, o, a / Acc(count));  // 0 / 0 = nan for an empty mean
    else store_value<WidenedOut<T>>(loop, o, a);
  }
};

template <class T>
struct ProdReducer {
  using Acc = Accumulator<T>;
  Acc identity() const { return Acc(1); }
  Acc step(Acc a, ComputeType<T> x, int64_t) const { return arith::mul(a, Acc(x)); }
  Acc merge(Acc a, Acc b) const { return arith::mul(a, b); }
  void store(const ReductionLoop& loop, int64_t o, Acc a, int64_t) const { store_value<WidenedOut<T>>(loop, o, a); }
};

// amax / amin: nan propagates, as in PyTorch.
template <class T, bool kMax>
struct ExtremeReducer {
  using Acc = ComputeType<T>;
  Acc identity() const {
    if constexpr (kFloating<T>) return kMax ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    else return kMax ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
  }
  // Bitwise | (not ||) keeps the select branch-free, so the lanes vectorise.
  Acc step(Acc a, Acc x, int64_t) const { return ((kMax ? x > a : x < a) | is_nan(x)) ? x : a; }
  Acc merge(Acc a, Acc b) const { return step(a, b, 0); }
  void store(const ReductionLoop& loop, int64_t o, Acc a, int64_t) const { store_value<T>(loop, o, a); }
};

// max / min with indices: the first extreme wins; a nan is the extreme. Ties are
// broken by index, so the result does not depend on the order of merges.
template <class T, bool kMax>
struct ExtremeIndexReducer {
  struct Acc {
    ComputeType<T> value;
    int64_t index;
  };
  Acc identity() const { return {ExtremeReducer<T, kMax>().identity(), std::numeric_limits<int64_t>::max()}; }
  static bool better(const Acc& b, const Acc& a) {
    if (is_nan(b.value)) return !is_nan(a.value) || b.index < a.index;
    if (is_nan(a.value)) return false;
    return (kMax ? b.value > a.value : b.value < a.value) || (b.value == a.value && b.index < a.index);
  }
  Acc step(Acc a, ComputeType<T> x, int64_t r) const { return better({x, r}, a) ? Acc{x, r} : a; }
  Acc merge(Acc a, Acc b) const { return better(b, a) ? b : a; }
  void store(const ReductionLoop& loop, int64_t o, Acc a, int64_t) const {
    if (loop.output) store_value<T>(loop, o, a.value);
    if (loop.indices) loop.indices[o] = a.index;
  }
};

// Welford's running mean and squared deviations in double, merged with Chan's
// formula: stable when the mean is large against the spread.
template <class T>
struct VarianceReducer {
  struct Acc {
    int64_t count;
    double mean, squares;
  };
  bool unbiased, take_sqrt;
  Acc identity() const { return {0, 0.0, 0.0}; }
  Acc step(Acc a, ComputeType<T> x, int64_t) const {
    ++a.count;
    double delta = double(x) - a.mean;
    a.mean += delta / double(a.count);
    a.squares += delta * (double(x) - a.mean);
    return a;
  }
  Acc merge(Acc a, Acc b) const {
    if (a.count == 0) return b;
    if (b.count == 0) return a;
    int64_t count = a.count + b.count;
    double delta = b.mean - a.mean, weight = double(b.count) / double(count);
    return {count, a.mean + delta * weight, a.squares + b.squares + delta * delta * double(a.count) * weight};
  }
  void store(const ReductionLoop& loop, int64_t o, Acc a, int64_t count) const {
    double variance = a.squares / std::max(0.0, double(count) - (unbiased ? 1.0 : 0.0));
    store_value<T>(loop, o, take_sqrt ? std::sqrt(variance) : variance);
  }
};

// A running maximum m and sum s of exp(x - m), rescaled when m grows: one pass.
// Infinite maxima follow PyTorch: all -inf gives -inf, any +inf gives +inf.
template <class T>
struct LogSumExpReducer {
  using V = ComputeType<T>;
  struct Acc {
    V max, sum;
  };
  static constexpr V kInf = std::numeric_limits<V>::infinity();
  Acc identity() const { return {-kInf, V(0)}; }
  Acc step(Acc a, V x, int64_t) const {
    if (x > a.max) return {x, a.sum * std::exp(a.max - x) + V(1)};
    if (x == a.max) return {a.max, a.sum + V(1)};
    if (is_nan(x) || is_nan(a.max)) return {std::numeric_limits<V>::quiet_NaN(), std::numeric_limits<V>::quiet_NaN()};
    return {a.max, a.sum + std::exp(x - a.max)};
  }
  Acc merge(Acc a, Acc b) const {
    if (is_nan(a.max) || is_nan(b.max)) return {std::numeric_limits<V>::quiet_NaN(), std::numeric_limits<V>::quiet_NaN()};
    if (b.max > a.max) std::swap(a, b);
    if (b.max == -kInf) return a;
    if (b.max == a.max) return {a.max, a.sum + b.sum};
    return {a.max, a.sum + b.sum * std::exp(b.max - a.max)};
  }
  void store(const ReductionLoop& loop, int64_t o, Acc a, int64_t) const {
    store_value<T>(loop, o, a.max == -kInf ? -kInf : a.max + std::log(a.sum));
  }
};

enum class NormKind { two, one, max, min, count, power };

template <class T, NormKind kKind>
struct NormReducer {
  using Acc = ComputeType<T>;
  double p;
  Acc identity() const {
    if constexpr (kKind == NormKind::min) return std::numeric_limits<Acc>::infinity();
    else return Acc(0);
  }
  Acc step(Acc a, Acc x, int64_t) const {
    Acc magnitude = std::abs(x);
    if constexpr (kKind == NormKind::two) return a + x * x;
    else if constexpr (kKind == NormKind::one) return a + magnitude;
    else if constexpr (kKind == NormKind::count) return a + Acc(x != Acc(0));
    else if constexpr (kKind == NormKind::power) return a + std::pow(magnitude, Acc(p));
    else return ExtremeReducer<T, kKind == NormKind::max>().step(a, magnitude, 0);
  }
  Acc merge(Acc a, Acc b) const {
    if constexpr (kKind == NormKind::max || kKind == NormKind::min) return step(a, b, 0);
    else return a + b;
  }
  void store(const ReductionLoop& loop, int64_t o, Acc a, int64_t) const {
    if constexpr (kKind == NormKind::two) store_value<T>(loop, o, std::sqrt(a));
    else if constexpr (kKind == NormKind::power) store_value<T>(loop, o, std::pow(a, Acc(1.0 / p)));
    else store_value<T>(loop, o, a);
  }
};

template <class T> void sum(const ReductionLoop& loop) { run_reduction<T>(loop, SumReducer<T>{}); }
template <class T> void mean(const ReductionLoop& loop) { run_reduction<T>(loop, SumReducer<T, true>{}); }
template <class T> void prod(const ReductionLoop& loop) { run_reduction<T>(loop, ProdReducer<T>{}); }
template <class T> void amax(const ReductionLoop& loop) { run_reduction<T>(loop, ExtremeReducer<T, true>{}); }
template <class T> void amin(const ReductionLoop& loop) { run_reduction<T>(loop, ExtremeReducer<T, false>{}); }
template <class T> void max_indices(const ReductionLoop& loop) { run_reduction<T>(loop, ExtremeIndexReducer<T, true>{}); }
template <class T> void min_indices(const ReductionLoop& loop) { run_reduction<T>(loop, ExtremeIndexReducer<T, false>{}); }
template <class T> void logsumexp(const ReductionLoop& loop) { run_reduction<T>(loop, LogSumExpReducer<T>{}); }
template <class T> void var(const ReductionLoop& loop, bool unbiased) {
  run_reduction<T>(loop, VarianceReducer<T>{.unbiased = unbiased, .take_sqrt = false});
}
template <class T> void std(const ReductionLoop& loop, bool unbiased) {
  run_reduction<T>(loop, VarianceReducer<T>{.unbiased = unbiased, .take_sqrt = true});
}

template <class T>
void norm(const ReductionLoop& loop, double p) {
  if (p == 2) run_reduction<T>(loop, NormReducer<T, NormKind::two>{p});
  else if (p == 1) run_reduction<T>(loop, NormReducer<T, NormKind::one>{p});
  else if (p == 0) run_reduction<T>(loop, NormReducer<T, NormKind::count>{p});
  else if (std::isinf(p)) {
    if (p > 0) run_reduction<T>(loop, NormReducer<T, NormKind::max>{p});
    else run_reduction<T>(loop, NormReducer<T, NormKind::min>{p});
  } else {
    run_reduction<T>(loop, NormReducer<T, NormKind::power>{p});
  }
}

}  // namespace

void register_reduction_kernels() {
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      sum_op, DeviceType::cpu, [](auto tag) { return &sum<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      prod_op, DeviceType::cpu, [](auto tag) { return &prod<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      amax_op, DeviceType::cpu, [](auto tag) { return &amax<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      amin_op, DeviceType::cpu, [](auto tag) { return &amin<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      max_indices_op, DeviceType::cpu, [](auto tag) { return &max_indices<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      min_indices_op, DeviceType::cpu, [](auto tag) { return &min_indices<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(mean_op, DeviceType::cpu, [](auto tag) { return &mean<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(var_op, DeviceType::cpu, [](auto tag) { return &var<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(std_op, DeviceType::cpu, [](auto tag) { return &std<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(
      logsumexp_op, DeviceType::cpu, [](auto tag) { return &logsumexp<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(norm_op, DeviceType::cpu, [](auto tag) { return &norm<decltype(tag)>; });
  register_softmax_kernels();
}

}  // namespace ember::cpu
