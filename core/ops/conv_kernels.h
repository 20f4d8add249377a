// The kernel interface of convolution and pooling: the entry points in
// core/ops/conv.cpp validate, compute output sizes and hand kernels contiguous
// NCHW tensors; kernels in kernels/{reference,cpu}/conv.cpp and
// kernels/cuda/conv.cu only compute. Tests: tests/core/test_conv.cpp, and
// tests/core/test_primitive_cache.cpp for the geometry key.
#pragma once

#include <cmath>

#include "core/dispatch.h"
#include "core/grad_hook.h"
#include "core/ops/conv.h"
#include "core/primitive_cache.h"

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

// Adds every integer that determines convolution `p`'s geometry (sizes,
// groups, stride, padding, dilation, whether it has a bias) to `key`: the part
// of a primitive cache key that oneDNN's (kernels/cpu/conv.cpp) and cuDNN's
// (kernels/cuda/conv.cu) convolutions share. A field left out would let two
// problems share a primitive and give one of them wrong results.
inline void add_conv2d_geometry(PrimitiveKey& key, const Conv2dProblem& p) {
  for (int64_t v : {p.batch, p.in_channels, p.out_channels, p.groups, int64_t(p.bias != nullptr)}) key.add(v);
  for (const Pair* pair : {&p.in_size, &p.out_size, &p.kernel, &p.stride, &p.padding, &p.dilation}) {
    key.add((*pair)[0]);
    key.add((*pair)[1]);
  }
}

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

// conv2d's gradients given grad_output [N, O, H', W'], with `forward` the
// forward problem (its out pointer unused):
//   backward input:  grad [N, C, H, W] = grad_output (*)^T weight (reads forward.weight)
//   backward weight: grad [O, C / groups, kH, kW] = input (*) grad_output (reads forward.input)
// Every tensor contiguous and of the key dtype; `grad` is overwritten.
struct Conv2dBackwardProblem {
  Conv2dProblem forward;
  const void* grad_output = nullptr;
  void* grad = nullptr;
};
extern Op<void(const Conv2dBackwardProblem&)> conv2d_backward_input_op, conv2d_backward_weight_op;

// Both gradients from one grad_output (reads forward.input and forward.weight):
// each must equal, bit for bit, what its single pass above writes, so a
// kernel may share work between the passes (the CPU's reorder of grad_output)
// but not change either's arithmetic.
struct Conv2dBackwardBothProblem {
  Conv2dProblem forward;
  const void* grad_output = nullptr;
  void* grad_input = nullptr;
  void* grad_weight = nullptr;
  Conv2dBackwardProblem input_pass() const { return {forward, grad_output, grad_input}; }
  Conv2dBackwardProblem weight_pass() const { return {forward, grad_output, grad_weight}; }
};
extern Op<void(const Conv2dBackwardBothProblem&)> conv2d_backward_op;

// Calls tap(out_index, input_index, weight_index) for every multiply-add of
// the convolution `p` (flat indices into its contiguous output, input and
// weight), skipping taps in the padding: the reference kernels' one loop.
template <class Tap>
void for_each_conv_tap(const Conv2dProblem& p, Tap tap) {
  const int64_t group_in = p.in_channels / p.groups, group_out = p.out_channels / p.groups;
  const int64_t in_h = p.in_size[0], in_w = p.in_size[1], out_h = p.out_size[0], out_w = p.out_size[1];
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t o = 0; o < p.out_channels; ++o)
      for (int64_t y = 0; y < out_h; ++y)
        for (int64_t x = 0; x < out_w; ++x) {
          const int64_t out_index = ((n * p.out_channels + o) * out_h + y) * out_w + x;
          for (int64_t c = 0; c < group_in; ++c) {
            const int64_t channel = (o / group_out) * group_in + c;
            for (int64_t ky = 0; ky < p.kernel[0]; ++ky)
              for (int64_t kx = 0; kx < p.kernel[1]; ++kx) {
                const int64_t iy = y * p.stride[0] - p.padding[0] + ky * p.dilation[0];
                const int64_t ix = x * p.stride[1] - p.padding[1] + kx * p.dilation[1];
                if (iy < 0 || iy >= in_h || ix < 0 || ix >= in_w) continue;
                tap(out_index, ((n * p.in_channels + channel) * in_h + iy) * in_w + ix,
                    ((o * group_in + c) * p.kernel[0] + ky) * p.kernel[1] + kx);
              }
          }
        }
}
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
