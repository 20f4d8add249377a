// The kernel interface of convolution and pooling: the entry points in
// core/ops/conv.cpp validate, compute output sizes and hand kernels contiguous
// NCHW tensors; kernels in kernels/{reference,cpu}/conv.cpp only compute.
// Tests: tests/core/test_conv.cpp.
#pragma once

#include "core/dispatch.h"
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

}  // namespace ember
