// The one-pass log-sum-exp shared by logsumexp (reduction.cu), softmax and
// log_softmax (softmax.cu) and cross-entropy (loss.cu): a running maximum m
// and sum s of exp(x - m), rescaled when m grows, so a row is read once.
// The rules are those of kernels/cpu/reduction.cpp's LogSumExpReducer: a nan
// makes both nan; elements equal to the maximum add exactly 1, so a row of
// -inf keeps m = -inf (and the callers decide what that means) instead of
// turning into exp(-inf - -inf) = nan.
#pragma once

#include <cuda_runtime.h>

#include <limits>

namespace ember::cuda {

template <class V>
struct ExpSum {
  V max, sum;
};

template <class V>
__device__ __forceinline__ ExpSum<V> exp_sum_identity() {
  return {-std::numeric_limits<V>::infinity(), V(0)};
}

template <class V>
__device__ __forceinline__ ExpSum<V> exp_sum_add(ExpSum<V> a, V x) {
  if (x > a.max) return {x, a.sum * exp(a.max - x) + V(1)};
  if (x == a.max) return {a.max, a.sum + V(1)};
  if (isnan(x) || isnan(a.max)) return {std::numeric_limits<V>::quiet_NaN(), std::numeric_limits<V>::quiet_NaN()};
  return {a.max, a.sum + exp(x - a.max)};
}

template <class V>
__device__ __forceinline__ ExpSum<V> exp_sum_merge(ExpSum<V> a, ExpSum<V> b) {
  if (isnan(a.max) || isnan(b.max)) return {std::numeric_limits<V>::quiet_NaN(), std::numeric_limits<V>::quiet_NaN()};
  if (b.max > a.max) {
    const ExpSum<V> larger = b;
    b = a;
    a = larger;
  }
  if (b.max == -std::numeric_limits<V>::infinity()) return a;
  if (b.max == a.max) return {a.max, a.sum + b.sum};
  return {a.max, a.sum + b.sum * exp(b.max - a.max)};
}

struct ExpSumMerge {
  template <class V>
  __device__ ExpSum<V> operator()(const ExpSum<V>& a, const ExpSum<V>& b) const {
    return exp_sum_merge(a, b);
  }
};

}  // namespace ember::cuda
