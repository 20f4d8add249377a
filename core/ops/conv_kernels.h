// The kernel interface of convolution and pooling: the entry points in
// core/ops/conv.cpp validate, compute output sizes and hand kernels contiguous
// NCHW tensors; kernels in kernels/{reference,cpu}/conv.cpp only compute.
// Tests: tests/core/test_conv.cpp.
#pragma once

#include <cmath>

#include "core/dispatch.h"
#include "core/grad_hook.h"
#include "core/ops/conv.h"

namespace ember {

// out[N, O, H', W'] = input[N, C, H, W] (*) weight[O, C / groups, kH, kW] (+ bias[O]).
// Every tensor contiguous and of the key dtype; bias null when absent.
// Every Pair is {height, width}.
struct Conv2dProblem {
  int64_t batch = 0, in_channels = 0, out_channels = 0, groups = 1;
  Pair in_size{}, out_size{}, kernel{};
  Pair stride{}, padding{}, dilation{};
  const void* input = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* out = nullptr;
};

// out[N, C, H', W'] = a reduction of each kernel window of input[N, C, H, W],
// padded symmetrically; both contiguous and of the key dtype.
struct Pool2dProblem {
  int64_t batch = 0, channels = 0;
  Pair in_size{}, out_size{}, kernel{};
  Pair stride{}, padding{};
  bool count_include_pad = true;  // average: divide by the whole window, padding included
  const void* input = nullptr;
  void* out = nullptr;
};

extern Op<void(const Conv2dProblem&)> conv2d_op;
// Max pooling treats padding as -inf; average pooling as zeros.
extern Op<void(const Pool2dProblem&)> max_pool2d_op, avg_pool2d_op;

// Max pooling's backward: grad_input (zeroed by the caller, [N, C, H, W]) gets
// each grad_output element added at its window's first maximum.
struct MaxPoolBackwardProblem {
  Pool2dProblem forward;  // input as in the forward, out unused
  const void* grad_output = nullptr;
  void* grad_input = nullptr;
};
extern Op<void(const MaxPoolBackwardProblem&)> max_pool2d_backward_op;

// One (n, c) plane of max-pool backward, shared by the reference and CPU
// kernels: each output gradient goes to the first maximum of its window
// (padding never wins; a nan wins, as in the forward).
template <class T>
void max_pool_backward_plane(const MaxPoolBackwardProblem& b, int64_t plane) {
  const Pool2dProblem& p = b.forward;
  const int64_t h = p.in_size[0], w = p.in_size[1];
  const T* in = static_cast<const T*>(p.input) + plane * h * w;
  const T* grad_out = static_cast<const T*>(b.grad_output) + plane * p.out_size[0] * p.out_size[1];
  T* grad_in = static_cast<T*>(b.grad_input) + plane * h * w;
  for (int64_t oy = 0; oy < p.out_size[0]; ++oy) {
    for (int64_t ox = 0; ox < p.out_size[1]; ++ox) {
      int64_t best_at = -1;
      double best = 0;
      for (int64_t ky = 0; ky < p.kernel[0]; ++ky) {
        int64_t y = oy * p.stride[0] - p.padding[0] + ky;
        if (y < 0 || y >= h) continue;
        for (int64_t kx = 0; kx < p.kernel[1]; ++kx) {
          int64_t x = ox * p.stride[1] - p.padding[1] + kx;
          if (x < 0 || x >= w) continue;
          double v = double(ComputeType<T>(in[y * w + x]));
          if (best_at < 0 || (!std::isnan(best) && (v > best || std::isnan(v)))) {
            best = v;
            best_at = y * w + x;
          }
        }
      }
      if (best_at >= 0)
        grad_in[best_at] = T(ComputeType<T>(grad_in[best_at]) + ComputeType<T>(grad_out[oy * p.out_size[1] + ox]));
    }
  }
}



// Gradient slots (autograd/functions/nn.cpp). Params: Conv2dOptions for
// conv2d, Pool2dOptions (stride resolved) for the poolings.
extern GradSlot conv2d_grad, max_pool2d_grad, avg_pool2d_grad;

}  // namespace ember
