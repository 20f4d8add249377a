// Reference layer_norm, rms_norm and batch_norm, forward and backward, in
// double: the textbook formulas one element at a time, the oracle of
// tests/core/test_normalization.cpp. Statistics are written in ComputeType<T>.
#include <cmath>
#include <vector>

#include "core/convert.h"
#include "core/ops/normalization_kernels.h"
#include "kernels/reference/families.h"

namespace ember::reference {

namespace {

template <class T>
double at(const void* data, int64_t i) {
  return double(ComputeType<T>(static_cast<const T*>(data)[i]));
}
template <class T>
double at_or(const void* data, int64_t i, double absent) {
  return data ? at<T>(data, i) : absent;
}
template <class T>
void store(void* data, int64_t i, double value) {
  static_cast<T*>(data)[i] = convert<T>(value);
}

// y = (x - mean) rstd w + b (layer_norm), y = x rstd w (rms_norm), per row.
template <bool kCentered, class T>
void row_norm(const RowNormProblem& p) {
  using S = ComputeType<T>;
  for (int64_t row = 0; row < p.rows; ++row) {
    const int64_t first = row * p.cols;
    double mean = 0, square = 0;
    for (int64_t c = 0; c < p.cols; ++c) mean += at<T>(p.input, first + c) / double(p.cols);
    if (!kCentered) mean = 0;
    for (int64_t c = 0; c < p.cols; ++c) {
      double centered = at<T>(p.input, first + c) - mean;
      square += centered * centered / double(p.cols);
    }
    double rstd = 1.0 / std::sqrt(square + p.eps);
    for (int64_t c = 0; c < p.cols; ++c) {
      double normalized = (at<T>(p.input, first + c) - mean) * rstd;
      store<T>(p.output, first + c, normalized * at_or<T>(p.weight, c, 1) + at_or<T>(p.bias, c, 0));
    }
    if (kCentered) store<S>(p.mean, row, mean);
    store<S>(p.rstd, row, rstd);
  }
}

// With xhat = (x - mean) rstd and dxhat = g w, per row:
//   layer_norm: dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat))
//   rms_norm:   dx = rstd (dxhat - xhat mean(dxhat xhat))
//   dw = sum over rows of g xhat, db = sum over rows of g.
template <bool kCentered, class T>
void row_norm_backward(const RowNormBackwardProblem& p) {
  using S = ComputeType<T>;
  std::vector<double> grad_weight(size_t(p.cols), 0.0), grad_bias(size_t(p.cols), 0.0);
  for (int64_t row = 0; row < p.rows; ++row) {
    const int64_t first = row * p.cols;
    const double mean = kCentered ? at<S>(p.mean, row) : 0.0, rstd = at<S>(p.rstd, row);
    double mean_dxhat = 0, mean_dxhat_xhat = 0;
    for (int64_t c = 0; c < p.cols; ++c) {
      double xhat = (at<T>(p.input, first + c) - mean) * rstd;
      double dxhat = at<T>(p.grad_output, first + c) * at_or<T>(p.weight, c, 1);
      mean_dxhat += dxhat / double(p.cols);
      mean_dxhat_xhat += dxhat * xhat / double(p.cols);
    }
    if (!kCentered) mean_dxhat = 0;
    for (int64_t c = 0; c < p.cols; ++c) {
      double g = at<T>(p.grad_output, first + c);
      double xhat = (at<T>(p.input, first + c) - mean) * rstd;
      double dxhat = g * at_or<T>(p.weight, c, 1);
      store<T>(p.grad_input, first + c, rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
      grad_weight[size_t(c)] += g * xhat;
      grad_bias[size_t(c)] += g;
    }
  }
  for (int64_t c = 0; c < p.cols; ++c) {
    if (p.grad_weight) store<T>(p.grad_weight, c, grad_weight[size_t(c)]);
    if (p.grad_bias) store<T>(p.grad_bias, c, grad_bias[size_t(c)]);
  }
}

// Element (n, c, s) of a [batch, channels, spatial] tensor.
int64_t element(int64_t n, int64_t c, int64_t s, int64_t channels, int64_t spatial) {
  return (n * channels + c) * spatial + s;
}

// y = (x - mean_c) rstd_c w_c + b_c with the batch's mean and biased variance
// (training) or the running ones (eval).
template <class T>
void batch_norm(const BatchNormProblem& p) {
  using S = ComputeType<T>;
  const double count = double(p.batch * p.spatial);
  for (int64_t c = 0; c < p.channels; ++c) {
    double mean = 0, var = 0;
    if (p.training) {
      for (int64_t n = 0; n < p.batch; ++n)
        for (int64_t s = 0; s < p.spatial; ++s) mean += at<T>(p.input, element(n, c, s, p.channels, p.spatial));
      mean /= count;
      for (int64_t n = 0; n < p.batch; ++n)
        for (int64_t s = 0; s < p.spatial; ++s) {
          double centered = at<T>(p.input, element(n, c, s, p.channels, p.spatial)) - mean;
          var += centered * centered;
        }
      var /= count;
      if (p.var) store<S>(p.var, c, var);
    } else {
      mean = at<S>(p.running_mean, c), var = at<S>(p.running_var, c);
    }
    const double rstd = 1.0 / std::sqrt(var + p.eps);
    store<S>(p.mean, c, mean);
    store<S>(p.rstd, c, rstd);
    for (int64_t n = 0; n < p.batch; ++n)
      for (int64_t s = 0; s < p.spatial; ++s) {
        int64_t i = element(n, c, s, p.channels, p.spatial);
        store<T>(p.output, i, (at<T>(p.input, i) - mean) * rstd * at_or<T>(p.weight, c, 1) + at_or<T>(p.bias, c, 0));
      }
  }
}

// Per channel, means over batch x spatial, xhat = (x - mean) rstd:
//   training: dx = w rstd (g - mean(g) - xhat mean(g xhat));  eval: dx = w rstd g
//   dw = sum g xhat, db = sum g.
template <class T>
void batch_norm_backward(const BatchNormBackwardProblem& p) {
  using S = ComputeType<T>;
  const double count = double(p.batch * p.spatial);
  for (int64_t c = 0; c < p.channels; ++c) {
    const double mean = at<S>(p.mean, c), rstd = at<S>(p.rstd, c), w = at_or<T>(p.weight, c, 1);
    double sum_g = 0, sum_g_xhat = 0;
    for (int64_t n = 0; n < p.batch; ++n)
      for (int64_t s = 0; s < p.spatial; ++s) {
        int64_t i = element(n, c, s, p.channels, p.spatial);
        double g = at<T>(p.grad_output, i);
        sum_g += g;
        sum_g_xhat += g * (at<T>(p.input, i) - mean) * rstd;
      }
    for (int64_t n = 0; n < p.batch; ++n)
      for (int64_t s = 0; s < p.spatial; ++s) {
        int64_t i = element(n, c, s, p.channels, p.spatial);
        double g = at<T>(p.grad_output, i), xhat = (at<T>(p.input, i) - mean) * rstd;
        double dx = p.training ? w * rstd * (g - sum_g / count - xhat * sum_g_xhat / count) : w * rstd * g;
        store<T>(p.grad_input, i, dx);
      }
    if (p.grad_weight) store<T>(p.grad_weight, c, sum_g_xhat);
    if (p.grad_bias) store<T>(p.grad_bias, c, sum_g);
  }
}

}  // namespace

void register_normalization_kernels() {
  register_reference_for<float, double, Half, BFloat16>(layer_norm_op,
                                                        [](auto tag) { return &row_norm<true, decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(rms_norm_op,
                                                        [](auto tag) { return &row_norm<false, decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(
      layer_norm_backward_op, [](auto tag) { return &row_norm_backward<true, decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(
      rms_norm_backward_op, [](auto tag) { return &row_norm_backward<false, decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(batch_norm_op,
                                                        [](auto tag) { return &batch_norm<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(
      batch_norm_backward_op, [](auto tag) { return &batch_norm_backward<decltype(tag)>; });
}

}  // namespace ember::reference
