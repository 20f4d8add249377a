// Reference convolution and pooling: direct loops over every output element
// and its window, skipping taps that fall in the padding. The oracle for
// kernels/cpu/conv.cpp (tests/core/test_conv.cpp).
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/convert.h"
#include "core/ops/conv_kernels.h"
#include "kernels/reference/families.h"

namespace ember::reference {
namespace {

// f32 for the 16-bit floats, f64 otherwise: one rounding at the end.
template <class T>
using Accumulator = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, double>;

template <class T>
void conv2d(const Conv2dProblem& p) {
  using Acc = Accumulator<T>;
  const T* input = static_cast<const T*>(p.input);
  const T* weight = static_cast<const T*>(p.weight);
  const T* bias = static_cast<const T*>(p.bias);
  T* out = static_cast<T*>(p.out);
  const int64_t group_in = p.in_channels / p.groups, group_out = p.out_channels / p.groups;
  const auto [in_h, in_w] = p.in_size;
  const auto [out_h, out_w] = p.out_size;
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t o = 0; o < p.out_channels; ++o)
      for (int64_t y = 0; y < out_h; ++y)
        for (int64_t x = 0; x < out_w; ++x) {
          Acc sum = bias ? Acc(ComputeType<T>(bias[o])) : Acc(0);
          for (int64_t c = 0; c < group_in; ++c) {
            int64_t channel = (o / group_out) * group_in + c;
            for (int64_t ky = 0; ky < p.kernel[0]; ++ky)
              for (int64_t kx = 0; kx < p.kernel[1]; ++kx) {
                int64_t iy = y * p.stride[0] - p.padding[0] + ky * p.dilation[0];
                int64_t ix = x * p.stride[1] - p.padding[1] + kx * p.dilation[1];
                if (iy < 0 || iy >= in_h || ix < 0 || ix >= in_w) continue;
                Acc value = Acc(ComputeType<T>(input[((n * p.in_channels + channel) * in_h + iy) * in_w + ix]));
                Acc tap = Acc(ComputeType<T>(weight[((o * group_in + c) * p.kernel[0] + ky) * p.kernel[1] + kx]));
                sum += value * tap;
              }
          }
          out[((n * p.out_channels + o) * out_h + y) * out_w + x] = convert<T>(sum);
        }
}

// The gradients: every multiply-add of the forward, run backwards into an
// accumulator array, rounded once at the end.
template <class T>
void conv2d_backward_input(const Conv2dBackwardProblem& b) {
  using Acc = Accumulator<T>;
  const Conv2dProblem& p = b.forward;
  const T* grad_output = static_cast<const T*>(b.grad_output);
  const T* weight = static_cast<const T*>(p.weight);
  std::vector<Acc> sum(size_t(p.batch * p.in_channels * p.in_size[0] * p.in_size[1]), Acc(0));
  for_each_conv_tap(p, [&](int64_t out_index, int64_t input_index, int64_t weight_index) {
    sum[size_t(input_index)] += Acc(ComputeType<T>(grad_output[out_index])) * Acc(ComputeType<T>(weight[weight_index]));
  });
  T* grad = static_cast<T*>(b.grad);
  for (size_t i = 0; i < sum.size(); ++i) grad[i] = convert<T>(sum[i]);
}

template <class T>
void conv2d_backward_weight(const Conv2dBackwardProblem& b) {
  using Acc = Accumulator<T>;
  const Conv2dProblem& p = b.forward;
  const T* grad_output = static_cast<const T*>(b.grad_output);
  const T* input = static_cast<const T*>(p.input);
  std::vector<Acc> sum(size_t(p.out_channels * (p.in_channels / p.groups) * p.kernel[0] * p.kernel[1]), Acc(0));
  for_each_conv_tap(p, [&](int64_t out_index, int64_t input_index, int64_t weight_index) {
    sum[size_t(weight_index)] += Acc(ComputeType<T>(grad_output[out_index])) * Acc(ComputeType<T>(input[input_index]));
  });
  T* grad = static_cast<T*>(b.grad);
  for (size_t i = 0; i < sum.size(); ++i) grad[i] = convert<T>(sum[i]);
}

// Both gradients: the two passes above, one after the other.
template <class T>
void conv2d_backward_both(const Conv2dBackwardBothProblem& b) {
  conv2d_backward_input<T>(b.input_pass());
  conv2d_backward_weight<T>(b.weight_pass());
}

// Calls tap(value) for every in-bounds input element of the window of output
// (plane, y, x); returns how many window positions lie inside the padded input.
template <class T, class Tap>
int64_t for_each_tap(const Pool2dProblem& p, const T* plane, int64_t y, int64_t x, Tap tap) {
  int64_t padded_count = 0;
  for (int64_t ky = 0; ky < p.kernel[0]; ++ky)
    for (int64_t kx = 0; kx < p.kernel[1]; ++kx) {
      int64_t iy = y * p.stride[0] - p.padding[0] + ky, ix = x * p.stride[1] - p.padding[1] + kx;
      if (iy < p.in_size[0] + p.padding[0] && ix < p.in_size[1] + p.padding[1]) ++padded_count;
      if (iy < 0 || iy >= p.in_size[0] || ix < 0 || ix >= p.in_size[1]) continue;
      tap(ComputeType<T>(plane[iy * p.in_size[1] + ix]));
    }
  return padded_count;
}

template <class T, class Reduce>
void pool(const Pool2dProblem& p, Reduce reduce) {
  const T* input = static_cast<const T*>(p.input);
  T* out = static_cast<T*>(p.out);
  for (int64_t plane = 0; plane < p.batch * p.channels; ++plane)
    for (int64_t y = 0; y < p.out_size[0]; ++y)
      for (int64_t x = 0; x < p.out_size[1]; ++x)
        out[(plane * p.out_size[0] + y) * p.out_size[1] + x] =
            convert<T>(reduce(input + plane * p.in_size[0] * p.in_size[1], y, x));
}

template <class T>
void max_pool2d(const Pool2dProblem& p) {
  pool<T>(p, [&](const T* plane, int64_t y, int64_t x) {
    double best = -std::numeric_limits<double>::infinity();
    bool nan = false;
    for_each_tap(p, plane, y, x, [&](double v) {
      nan = nan || v != v;
      best = v > best ? v : best;
    });
    return nan ? std::numeric_limits<double>::quiet_NaN() : best;  // nan propagates, as in PyTorch
  });
}

template <class T>
void avg_pool2d(const Pool2dProblem& p) {
  pool<T>(p, [&](const T* plane, int64_t y, int64_t x) {
    double sum = 0;
    int64_t inside = 0;
    int64_t padded = for_each_tap(p, plane, y, x, [&](double v) {
      sum += v;
      ++inside;
    });
    return sum / double(p.count_include_pad ? padded : inside);
  });
}


template <class T>
void max_pool2d_backward(const MaxPoolBackwardProblem& b) {
  for (int64_t plane = 0; plane < b.forward.batch * b.forward.channels; ++plane) max_pool_backward_plane<T>(b, plane);
}

}  // namespace

void register_conv_kernels() {
  register_reference_for<float, double, Half, BFloat16>(conv2d_op, [](auto tag) { return &conv2d<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(
      conv2d_backward_input_op, [](auto tag) { return &conv2d_backward_input<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(
      conv2d_backward_weight_op, [](auto tag) { return &conv2d_backward_weight<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(
      conv2d_backward_op, [](auto tag) { return &conv2d_backward_both<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(max_pool2d_op,
                                                        [](auto tag) { return &max_pool2d<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(avg_pool2d_op,
                                                        [](auto tag) { return &avg_pool2d<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(
      max_pool2d_backward_op, [](auto tag) { return &max_pool2d_backward<decltype(tag)>; });
}

}  // namespace ember::reference
