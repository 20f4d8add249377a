// CUDA reductions: one small Reducer per op (the device twins of
// kernels/cpu/reduction.cpp's), run by the engine of reduce_launcher.cuh.
// f16/bf16/f32 accumulate in float, f64 in double, bool and integers in int64
// (wrapping), var and std in double; nan and first-index ties as the reference
// kernels (kernels/reference/reduction.cpp). Ops that differ by a flag (sum and
// mean, amax and amin, var and std, the norms) share one kernel per dtype, to
// keep the number of instantiations down. Tests: tests/cuda/test_cuda_reduction.cpp.
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/ops/reduction_kernels.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/exp_sum.cuh"
#include "kernels/cuda/families.h"
#include "kernels/cuda/reduce_launcher.cuh"

namespace ember::cuda {
namespace {

using namespace reduction_types;

template <class V>
__device__ __forceinline__ bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>) return isnan(v);
  else return false;
}

// Integers wrap on overflow, as core/arithmetic.h's add and mul.
template <class A>
__device__ __forceinline__ A wrapping_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) return A(uint64_t(a) + uint64_t(b));
  else return a + b;
}
template <class A>
__device__ __forceinline__ A wrapping_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) return A(uint64_t(a) * uint64_t(b));
  else return a * b;
}

template <class T>
const T* input_of(const ReductionLoop& loop) {
  return reinterpret_cast<const T*>(loop.input);
}
template <class Out>
Out* output_of(const ReductionLoop& loop) {
  return reinterpret_cast<Out*>(loop.output);
}

// sum, and mean when `mean` (floating dtypes only).
template <class T>
struct SumReducer {
  using Acc = Accumulator<T>;
  const T* input;
  WidenedOut<T>* output;
  bool mean;
  __device__ ComputeType<T> read(int64_t offset, int64_t) const { return load(input + offset); }
  __device__ Acc identity() const { return Acc(0); }
  __device__ Acc step(Acc a, ComputeType<T> x, int64_t) const { return wrapping_add(a, Acc(x)); }
  __device__ Acc merge(Acc a, Acc b) const { return wrapping_add(a, b); }
  __device__ void store(int64_t o, Acc a, int64_t count) const {
    if constexpr (kFloating<T>) {
      if (mean) a /= Acc(count);  // 0 / 0 = nan for an empty mean
    }
    if constexpr (kFloating<T>) cuda::store(output + o, a);
    else output[o] = a;
  }
};

template <class T>
struct ProdReducer {
  using Acc = Accumulator<T>;
  const T* input;
  WidenedOut<T>* output;
  __device__ ComputeType<T> read(int64_t offset, int64_t) const { return load(input + offset); }
  __device__ Acc identity() const { return Acc(1); }
  __device__ Acc step(Acc a, ComputeType<T> x, int64_t) const { return wrapping_mul(a, Acc(x)); }
  __device__ Acc merge(Acc a, Acc b) const { return wrapping_mul(a, b); }
  __device__ void store(int64_t o, Acc a, int64_t) const {
    if constexpr (kFloating<T>) cuda::store(output + o, a);
    else output[o] = a;
  }
};

// The lowest (maximum) or highest (minimum) value of T: the extreme's identity.
template <class V>
__device__ __forceinline__ V extreme_identity(bool maximum) {
  if constexpr (std::is_floating_point_v<V>)
    return maximum ? -std::numeric_limits<V>::infinity() : std::numeric_limits<V>::infinity();
  else return maximum ? std::numeric_limits<V>::lowest() : std::numeric_limits<V>::max();
}

// amax (maximum) or amin: nan propagates, as in PyTorch.
template <class T>
struct ExtremeReducer {
  using Acc = ComputeType<T>;
  const T* input;
  T* output;
  bool maximum;
  __device__ Acc read(int64_t offset, int64_t) const { return load(input + offset); }
  __device__ Acc identity() const { return extreme_identity<Acc>(maximum); }
  __device__ Acc step(Acc a, Acc x, int64_t) const { return ((maximum ? x > a : x < a) || is_nan(x)) ? x : a; }
  __device__ Acc merge(Acc a, Acc b) const { return step(a, b, 0); }
  __device__ void store(int64_t o, Acc a, int64_t) const { cuda::store(output + o, a); }
};

// max / min along dims with the index of the first extreme; a nan is the
// extreme. Ties go to the lower index, so the merge order does not matter.
template <class T>
struct ExtremeIndexReducer {
  struct Acc {
    ComputeType<T> value;
    int64_t index;
  };
  const T* input;
  T* values;         // null for argmax / argmin
  int64_t* indices;  // null when only values are wanted
  bool maximum;
  __device__ ComputeType<T> read(int64_t offset, int64_t) const { return load(input + offset); }
  __device__ Acc identity() const {
    return {extreme_identity<ComputeType<T>>(maximum), std::numeric_limits<int64_t>::max()};
  }
  __device__ bool better(const Acc& b, const Acc& a) const {
    if (is_nan(b.value)) return !is_nan(a.value) || b.index < a.index;
    if (is_nan(a.value)) return false;
    return (maximum ? b.value > a.value : b.value < a.value) || (b.value == a.value && b.index < a.index);
  }
  __device__ Acc step(Acc a, ComputeType<T> x, int64_t r) const { return better({x, r}, a) ? Acc{x, r} : a; }
  __device__ Acc merge(Acc a, Acc b) const { return better(b, a) ? b : a; }
  __device__ void store(int64_t o, Acc a, int64_t) const {
    if (values) cuda::store(values + o, a.value);
    if (indices) indices[o] = a.index;
  }
};

// var and std: Welford's running mean and squared deviations in double,
// merged with Chan's formula, as the CPU kernel.
template <class T>
struct VarianceReducer {
  struct Acc {
    int64_t count;
    double mean, squares;
  };
  const T* input;
  T* output;
  bool unbiased, take_sqrt;
  __device__ ComputeType<T> read(int64_t offset, int64_t) const { return load(input + offset); }
  __device__ Acc identity() const { return {0, 0.0, 0.0}; }
  __device__ Acc step(Acc a, ComputeType<T> x, int64_t) const {
    ++a.count;
    const double delta = double(x) - a.mean;
    a.mean += delta / double(a.count);
    a.squares += delta * (double(x) - a.mean);
    return a;
  }
  __device__ Acc merge(Acc a, Acc b) const {
    if (a.count == 0) return b;
    if (b.count == 0) return a;
    const int64_t count = a.count + b.count;
    const double delta = b.mean - a.mean, weight = double(b.count) / double(count);
    return {count, a.mean + delta * weight, a.squares + b.squares + delta * delta * double(a.count) * weight};
  }
  __device__ void store(int64_t o, Acc a, int64_t count) const {
    const double divisor = double(count) - (unbiased ? 1.0 : 0.0);
    const double variance = a.squares / (divisor > 0 ? divisor : 0.0);  // n <= 1 unbiased: 0 / 0 = nan
    cuda::store(output + o, ComputeType<T>(take_sqrt ? sqrt(variance) : variance));
  }
};

// log(sum(exp(x))) in one pass (exp_sum.cuh). All -inf gives -inf, any +inf +inf.
template <class T>
struct LogSumExpReducer {
  using V = ComputeType<T>;
  using Acc = ExpSum<V>;
  const T* input;
  T* output;
  __device__ V read(int64_t offset, int64_t) const { return load(input + offset); }
  __device__ Acc identity() const { return exp_sum_identity<V>(); }
  __device__ Acc step(Acc a, V x, int64_t) const { return exp_sum_add(a, x); }
  __device__ Acc merge(Acc a, Acc b) const { return exp_sum_merge(a, b); }
  __device__ void store(int64_t o, Acc a, int64_t) const {
    const V infinity = std::numeric_limits<V>::infinity();
    cuda::store(output + o, a.max == -infinity ? -infinity : a.max + log(a.sum));
  }
};

// The p-norms, the kind chosen at run time (one kernel per dtype): 2 and 1,
// p = 0 counts nonzeros, +-inf give the max / min of |x|, any other p sums |x|^p.
enum class NormKind { two, one, count, power, max, min };

template <class T>
struct NormReducer {
  using Acc = ComputeType<T>;
  const T* input;
  T* output;
  NormKind kind;
  Acc p, inverse_p;
  __device__ Acc read(int64_t offset, int64_t) const { return load(input + offset); }
  __device__ Acc identity() const { return kind == NormKind::min ? std::numeric_limits<Acc>::infinity() : Acc(0); }
  __device__ Acc step(Acc a, Acc x, int64_t) const {
    const Acc magnitude = fabs(x);
    switch (kind) {
      case NormKind::two: return a + x * x;
      case NormKind::one: return a + magnitude;
      case NormKind::count: return a + Acc(x != Acc(0));
      case NormKind::power: return a + pow(magnitude, p);
      case NormKind::max: return (magnitude > a || isnan(magnitude)) ? magnitude : a;
      case NormKind::min: return (magnitude < a || isnan(magnitude)) ? magnitude : a;
    }
    return a;
  }
  __device__ Acc merge(Acc a, Acc b) const {
    if (kind == NormKind::max) return (b > a || isnan(b)) ? b : a;
    if (kind == NormKind::min) return (b < a || isnan(b)) ? b : a;
    return a + b;
  }
  __device__ void store(int64_t o, Acc a, int64_t) const {
    if (kind == NormKind::two) a = sqrt(a);
    if (kind == NormKind::power) a = pow(a, inverse_p);
    cuda::store(output + o, a);
  }
};

template <class T>
void sum(const ReductionLoop& loop) {
  launch_reduction(loop, SumReducer<T>{input_of<T>(loop), output_of<WidenedOut<T>>(loop), false}, "sum");
}
template <class T>
void mean(const ReductionLoop& loop) {
  launch_reduction(loop, SumReducer<T>{input_of<T>(loop), output_of<T>(loop), true}, "mean");
}
template <class T>
void prod(const ReductionLoop& loop) {
  launch_reduction(loop, ProdReducer<T>{input_of<T>(loop), output_of<WidenedOut<T>>(loop)}, "prod");
}
template <bool kMax, class T>
void extreme(const ReductionLoop& loop) {
  launch_reduction(loop, ExtremeReducer<T>{input_of<T>(loop), output_of<T>(loop), kMax}, kMax ? "amax" : "amin");
}
template <bool kMax, class T>
void extreme_with_index(const ReductionLoop& loop) {
  launch_reduction(loop, ExtremeIndexReducer<T>{input_of<T>(loop), output_of<T>(loop), loop.indices, kMax},
                   kMax ? "max_indices" : "min_indices");
}
template <bool kSqrt, class T>
void variance(const ReductionLoop& loop, bool unbiased) {
  launch_reduction(loop, VarianceReducer<T>{input_of<T>(loop), output_of<T>(loop), unbiased, kSqrt}, kSqrt ? "std" : "var");
}
template <class T>
void logsumexp(const ReductionLoop& loop) {
  launch_reduction(loop, LogSumExpReducer<T>{input_of<T>(loop), output_of<T>(loop)}, "logsumexp");
}

NormKind norm_kind(double p) {
  if (p == 2) return NormKind::two;
  if (p == 1) return NormKind::one;
  if (p == 0) return NormKind::count;
  if (std::isinf(p)) return p > 0 ? NormKind::max : NormKind::min;
  return NormKind::power;
}

template <class T>
void norm(const ReductionLoop& loop, double p) {
  using Acc = ComputeType<T>;
  launch_reduction(loop, NormReducer<T>{input_of<T>(loop), output_of<T>(loop), norm_kind(p), Acc(p), Acc(1.0 / p)},
                   "norm");
}

}  // namespace

void register_reduction_kernels() {
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      sum_op, DeviceType::cuda, [](auto tag) { return &sum<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      prod_op, DeviceType::cuda, [](auto tag) { return &prod<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      amax_op, DeviceType::cuda, [](auto tag) { return &extreme<true, decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      amin_op, DeviceType::cuda, [](auto tag) { return &extreme<false, decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      max_indices_op, DeviceType::cuda, [](auto tag) { return &extreme_with_index<true, decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      min_indices_op, DeviceType::cuda, [](auto tag) { return &extreme_with_index<false, decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(mean_op, DeviceType::cuda, [](auto tag) { return &mean<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(
      var_op, DeviceType::cuda, [](auto tag) { return &variance<false, decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(
      std_op, DeviceType::cuda, [](auto tag) { return &variance<true, decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(
      logsumexp_op, DeviceType::cuda, [](auto tag) { return &logsumexp<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(norm_op, DeviceType::cuda, [](auto tag) { return &norm<decltype(tag)>; });
}

}  // namespace ember::cuda
