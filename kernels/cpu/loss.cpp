// CPU cross-entropy, forward and backward (the formulas of
// core/ops/loss_kernels.h). Rows split across threads; each row is a few dense
// vectorised passes: max, sum of exp(x - max) (the SIMD exp of vector_exp.cpp
// for float), then the loss from sum_c a_c and sum_c a_c (x_c - max), or the gradient
// A p - a. Per-row losses and weights are summed in row order after the
// parallel loop, so the result does not depend on the thread count. f16/bf16
// rows are converted to float first. Tests: tests/core/test_loss.cpp.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/ops/loss_kernels.h"
#include "core/parallel.h"
#include "kernels/cpu/families.h"
#include "kernels/cpu/vector_exp.h"

namespace ember::cpu {

namespace {

int64_t class_index(const CrossEntropyProblem& p, int64_t row) {
  return p.target_dtype == DType::i64 ? static_cast<const int64_t*>(p.target)[row]
                                      : static_cast<const int32_t*>(p.target)[row];
}

// What every row shares: the weights (or null) and probabilities in V, and sum_c w_c.
template <class V>
struct Shared {
  const V* weight = nullptr;
  V weight_sum = 0;
  V smoothing = 0, smoothing_per_class = 0;  // eps and eps / C
};

// A row of T as V: the row itself for f32/f64, else converted into `buffer`.
template <class T, class V = ComputeType<T>>
const V* row_in_compute_type(const void* data, int64_t row, int64_t n, std::vector<V>& buffer) {
  const T* first = static_cast<const T*>(data) + row * n;
  if constexpr (std::is_same_v<T, V>) {
    return first;
  } else {
    buffer.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) buffer[size_t(i)] = V(first[i]);
    return buffer.data();
  }
}

// y = exp(x - shift), returning sum(y).
template <class V>
V exp_shifted(const V* x, V* y, int64_t n, V shift) {
  if constexpr (std::is_same_v<V, float>) {
    return exp_shifted_sum(x, y, n, shift);
  } else {
    V sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += (y[i] = std::exp(x[i] - shift));
    return sum;
  }
}

// A row's log-sum-exp as its maximum m and log(sum_c exp(x_c - m)), kept
// apart: the loss sum_c a_c (lse - x_c) = sum_c a_c (m - x_c) + A log_sum
// keeps its precision for logits of large magnitude, where m + log_sum rounds to m.
template <class V>
struct RowLogSumExp {
  V max, log_sum;
};

template <class V>
RowLogSumExp<V> row_logsumexp(const V* x, int64_t n, V* scratch) {
  const V m = Eigen::Map<const Eigen::Array<V, Eigen::Dynamic, 1>>(x, n).maxCoeff();  // vectorised, unlike std::max
  // All -inf, or a +inf: exp(x - m) is nan at inf - inf, and so is the row's
  // log-softmax and loss, as in PyTorch (log_softmax, then nll_loss) and the reference.
  if (std::isinf(m)) return {std::numeric_limits<V>::quiet_NaN(), std::numeric_limits<V>::quiet_NaN()};
  return {m, std::log(exp_shifted(x, scratch, n, m))};
}

// A_i = sum_c a_c and sum_c a_c (x_c - shift) of a probability row q.
template <class V>
void probability_sums(const Shared<V>& s, const V* x, const V* q, int64_t n, V shift, V& total, V& dot) {
  V a_sum = 0, ax_sum = 0;
#pragma omp simd reduction(+ : a_sum, ax_sum)
  for (int64_t i = 0; i < n; ++i) {
    const V a = (s.weight ? s.weight[i] : V(1)) * ((1 - s.smoothing) * q[i] + s.smoothing_per_class);
    a_sum += a;
    ax_sum += a * (x[i] - shift);
  }
  total = a_sum, dot = ax_sum;
}

template <class T>
void cross_entropy(const CrossEntropyProblem& p) {
  using V = ComputeType<T>;
  if (!p.probabilities) {
    for (int64_t row = 0; row < p.rows; ++row) {
      const int64_t target = class_index(p, row);
      if (target != p.ignore_index && (target < 0 || target >= p.classes)) {
        *p.invalid = {row, target};
        return;
      }
    }
  }
  const int64_t n = p.classes;
  std::vector<V> weight_storage;
  Shared<V> s;
  s.smoothing = V(p.label_smoothing), s.smoothing_per_class = V(p.label_smoothing / double(n));
  if (p.weight) {
    weight_storage.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) weight_storage[size_t(i)] = V(static_cast<const T*>(p.weight)[i]);
    s.weight = weight_storage.data();
  }
  s.weight_sum = s.weight ? V(0) : V(n);
  for (int64_t i = 0; s.weight && i < n; ++i) s.weight_sum += s.weight[i];
  std::vector<double> row_loss(size_t(p.rows)), row_weight(size_t(p.rows));
  V* row_max = static_cast<V*>(p.row_max);
  V* log_sum = static_cast<V*>(p.log_sum);
  parallel_for(0, p.rows, std::max<int64_t>(1, kParallelGrain / n), [&](int64_t begin, int64_t end) {
    std::vector<V> x_buffer, q_buffer, scratch(static_cast<size_t>(n));
    for (int64_t row = begin; row < end; ++row) {
      const V* x = row_in_compute_type<T>(p.input, row, n, x_buffer);
      const RowLogSumExp<V> lse = row_logsumexp(x, n, scratch.data());
      row_max[row] = lse.max, log_sum[row] = lse.log_sum;
      V loss = 0, weight = 1;
      if (p.probabilities) {
        V total, dot;
        probability_sums(s, x, row_in_compute_type<T>(p.target, row, n, q_buffer), n, lse.max, total, dot);
        loss = total * lse.log_sum - dot;
      } else {
        const int64_t target = class_index(p, row);
        if (target == p.ignore_index) {
          weight = 0;
        } else {
          weight = s.weight ? s.weight[target] : V(1);
          loss = (1 - s.smoothing) * weight * ((lse.max - x[target]) + lse.log_sum);
          if (p.label_smoothing > 0) {  // + eps / C sum_c w_c (lse - x_c)
            V weighted = 0;
#pragma omp simd reduction(+ : weighted)
            for (int64_t i = 0; i < n; ++i) weighted += (s.weight ? s.weight[i] : V(1)) * (x[i] - lse.max);
            loss += s.smoothing_per_class * (s.weight_sum * lse.log_sum - weighted);
          }
        }
      }
      row_loss[size_t(row)] = double(loss);
      row_weight[size_t(row)] = double(weight);
    }
  });
  double total = 0, total_weight = 0;
  for (int64_t row = 0; row < p.rows; ++row) total += row_loss[size_t(row)], total_weight += row_weight[size_t(row)];
  *static_cast<V*>(p.total_weight) = V(total_weight);
  T* loss = static_cast<T*>(p.loss);
  if (p.reduction == Reduction::none)
    for (int64_t row = 0; row < p.rows; ++row) loss[row] = T(V(row_loss[size_t(row)]));
  if (p.reduction == Reduction::sum) *loss = T(V(total));
  if (p.reduction == Reduction::mean) *loss = T(V(total / total_weight));
}

// dx_c = g (A p_c - a_c), p_c = exp(x_c - m) / exp(log_sum), written into y
// (V) and then to the row of T. Not exp(x_c - (m + log_sum)): for large logits
// that sum rounds to m (CrossEntropyProblem::row_max).
template <class T>
void cross_entropy_backward(const CrossEntropyBackwardProblem& b) {
  using V = ComputeType<T>;
  const CrossEntropyProblem& p = b.forward;
  const int64_t n = p.classes;
  std::vector<V> weight_storage;
  const V* weight = nullptr;
  if (p.weight) {
    weight_storage.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) weight_storage[size_t(i)] = V(static_cast<const T*>(p.weight)[i]);
    weight = weight_storage.data();
  }
  V weight_sum = weight ? V(0) : V(n);
  for (int64_t i = 0; weight && i < n; ++i) weight_sum += weight[i];
  const V smoothing = V(p.label_smoothing), per_class = V(p.label_smoothing / double(n));
  const V* row_max = static_cast<const V*>(p.row_max);
  const V* log_sum = static_cast<const V*>(p.log_sum);
  const T* grad_output = static_cast<const T*>(b.grad_output);
  const V mean_scale = p.reduction == Reduction::mean ? V(1) / *static_cast<const V*>(p.total_weight) : V(1);
  T* grad_input = static_cast<T*>(b.grad_input);
  parallel_for(0, p.rows, std::max<int64_t>(1, kParallelGrain / n), [&](int64_t begin, int64_t end) {
    std::vector<V> x_buffer, q_buffer, y_buffer(std::is_same_v<T, V> ? 0 : static_cast<size_t>(n));
    for (int64_t row = begin; row < end; ++row) {
      T* out = grad_input + row * n;
      V* y = std::is_same_v<T, V> ? reinterpret_cast<V*>(out) : y_buffer.data();
      const V g = V(grad_output[p.reduction == Reduction::none ? row : 0]) * mean_scale;
      const int64_t target = p.probabilities ? 0 : class_index(p, row);
      if (!p.probabilities && target == p.ignore_index) {
        std::fill(y, y + n, V(0));
      } else {
        const V* x = row_in_compute_type<T>(p.input, row, n, x_buffer);
        exp_shifted(x, y, n, row_max[row]);  // y = p * exp(log_sum)
        const V to_probability = std::exp(-log_sum[row]);
        if (p.probabilities) {
          const V* q = row_in_compute_type<T>(p.target, row, n, q_buffer);
          V total, dot;
          probability_sums(Shared<V>{weight, 0, smoothing, per_class}, x, q, n, V(0), total, dot);
#pragma omp simd
          for (int64_t i = 0; i < n; ++i)
            y[i] = g * (total * to_probability * y[i] - (weight ? weight[i] : V(1)) * ((1 - smoothing) * q[i] + per_class));
        } else {
          // A = (1 - eps) w_t + eps / C sum_c w_c; a_c = eps / C w_c, plus (1 - eps) w_t at c = t.
          const V target_weight = weight ? weight[target] : V(1);
          const V total = (1 - smoothing) * target_weight + per_class * weight_sum;
#pragma omp simd
          for (int64_t i = 0; i < n; ++i)
            y[i] = g * (total * to_probability * y[i] - per_class * (weight ? weight[i] : V(1)));
          y[target] -= g * (1 - smoothing) * target_weight;
        }
      }
      if constexpr (!std::is_same_v<T, V>)
        for (int64_t i = 0; i < n; ++i) out[i] = T(y[i]);
    }
  });
}

}  // namespace

void register_loss_kernels() {
  register_for<float, double, Half, BFloat16>(cross_entropy_op, DeviceType::cpu,
                                              [](auto tag) { return &cross_entropy<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(cross_entropy_backward_op, DeviceType::cpu,
                                              [](auto tag) { return &cross_entropy_backward<decltype(tag)>; });
}

}  // namespace ember::cpu
