// Reference cross-entropy, forward and backward, in double: per row the
// coefficients a_c of core/ops/loss_kernels.h written out, then the loss
// sum_c a_c (lse - x_c) and the gradient A p_c - a_c. The oracle of tests/core/test_loss.cpp.
#include <cmath>
#include <limits>
#include <vector>

#include "core/convert.h"
#include "core/ops/loss_kernels.h"
#include "kernels/reference/families.h"

namespace ember::reference {

namespace {

template <class T>
double at(const void* data, int64_t i) {
  return double(ComputeType<T>(static_cast<const T*>(data)[i]));
}

int64_t class_index(const CrossEntropyProblem& p, int64_t row) {
  return p.target_dtype == DType::i64 ? static_cast<const int64_t*>(p.target)[row]
                                      : static_cast<const int32_t*>(p.target)[row];
}

// The coefficients a_c of one row, or false when the row is ignored.
template <class T>
bool coefficients(const CrossEntropyProblem& p, int64_t row, std::vector<double>& a) {
  const double smoothing = p.label_smoothing, classes = double(p.classes);
  auto weight = [&](int64_t c) { return p.weight ? at<T>(p.weight, c) : 1.0; };
  if (p.probabilities) {
    for (int64_t c = 0; c < p.classes; ++c)
      a[size_t(c)] = weight(c) * ((1 - smoothing) * at<T>(p.target, row * p.classes + c) + smoothing / classes);
    return true;
  }
  const int64_t target = class_index(p, row);
  if (target == p.ignore_index) return false;
  for (int64_t c = 0; c < p.classes; ++c)
    a[size_t(c)] = weight(c) * ((c == target ? 1 - smoothing : 0.0) + smoothing / classes);
  return true;
}

// A row's largest logit m and log sum_c exp(x_c - m), apart: lse - x_c is
// computed as (m - x_c) + log_sum, since m + log_sum rounds the log-sum away
// for logits near 2^53 (found by the op fuzzer: 0.676 for 0.703).
struct RowLogSumExp {
  double max = 0, log_sum = 0;
};

template <class T>
RowLogSumExp row_logsumexp(const CrossEntropyProblem& p, int64_t row) {
  double m = -std::numeric_limits<double>::infinity(), s = 0;
  for (int64_t c = 0; c < p.classes; ++c) m = std::max(m, at<T>(p.input, row * p.classes + c));
  for (int64_t c = 0; c < p.classes; ++c) s += std::exp(at<T>(p.input, row * p.classes + c) - m);
  return {m, std::log(s)};
}

// The mean's contribution of a row: w_t for class indices, 1 for probabilities.
template <class T>
double row_weight(const CrossEntropyProblem& p, int64_t row) {
  if (p.probabilities) return 1;
  int64_t target = class_index(p, row);
  if (target == p.ignore_index) return 0;
  return p.weight ? at<T>(p.weight, target) : 1.0;
}

template <class T>
void cross_entropy(const CrossEntropyProblem& p) {
  using S = ComputeType<T>;
  if (!p.probabilities) {
    for (int64_t row = 0; row < p.rows; ++row) {
      int64_t target = class_index(p, row);
      if (target != p.ignore_index && (target < 0 || target >= p.classes)) {
        *p.invalid = {row, target};
        return;
      }
    }
  }
  std::vector<double> a(size_t(p.classes));
  double total = 0, total_weight = 0;
  for (int64_t row = 0; row < p.rows; ++row) {
    const RowLogSumExp lse = row_logsumexp<T>(p, row);
    double loss = 0;
    if (coefficients<T>(p, row, a))
      for (int64_t c = 0; c < p.classes; ++c) {
        // Without smoothing a class index selects one class; the others (a_c = 0)
        // take no part, so a masked -inf logit there does not make 0 * inf = nan.
        if (!p.probabilities && p.label_smoothing == 0 && c != class_index(p, row)) continue;
        loss += a[size_t(c)] * ((lse.max - at<T>(p.input, row * p.classes + c)) + lse.log_sum);
      }
    static_cast<S*>(p.row_max)[row] = S(lse.max);
    static_cast<S*>(p.log_sum)[row] = S(lse.log_sum);
    if (p.reduction == Reduction::none) static_cast<T*>(p.loss)[row] = convert<T>(loss);
    total += loss;
    total_weight += row_weight<T>(p, row);
  }
  *static_cast<S*>(p.total_weight) = S(total_weight);
  if (p.reduction == Reduction::sum) *static_cast<T*>(p.loss) = convert<T>(total);
  if (p.reduction == Reduction::mean) *static_cast<T*>(p.loss) = convert<T>(total / total_weight);
}

template <class T>
void cross_entropy_backward(const CrossEntropyBackwardProblem& b) {
  using S = ComputeType<T>;
  const CrossEntropyProblem& p = b.forward;
  std::vector<double> a(size_t(p.classes));
  for (int64_t row = 0; row < p.rows; ++row) {
    double g = at<T>(b.grad_output, p.reduction == Reduction::none ? row : 0);
    if (p.reduction == Reduction::mean) g /= at<S>(p.total_weight, 0);
    const bool counted = coefficients<T>(p, row, a);
    double total = 0;
    for (int64_t c = 0; c < p.classes; ++c) total += counted ? a[size_t(c)] : 0.0;
    const double max = at<S>(p.row_max, row), log_sum = at<S>(p.log_sum, row);
    for (int64_t c = 0; c < p.classes; ++c) {
      const int64_t i = row * p.classes + c;
      double probability = std::exp((at<T>(p.input, i) - max) - log_sum);
      double grad = counted ? g * (total * probability - a[size_t(c)]) : 0.0;
      static_cast<T*>(b.grad_input)[i] = convert<T>(grad);
    }
  }
}

}  // namespace

void register_loss_kernels() {
  register_reference_for<float, double, Half, BFloat16>(cross_entropy_op,
                                                        [](auto tag) { return &cross_entropy<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(
      cross_entropy_backward_op, [](auto tag) { return &cross_entropy_backward<decltype(tag)>; });
}

}  // namespace ember::reference
