// nn::functional convolution and pooling: core's oneDNN-backed ops
// (core/ops/conv.h) under torch.nn.functional's names, and conv1d on top of
// conv2d (nn/functional/conv.cpp). Tests: tests/nn/test_layers.cpp,
// tests/nn/test_activations.cpp.
#pragma once

#include "core/ops/conv.h"

namespace ember::nn::functional {

using ember::avg_pool2d;
using ember::conv2d;
using ember::Conv2dOptions;
using ember::max_pool2d;
using ember::Pool2dOptions;

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
};
// input [N, C, L] (or unbatched [C, L]), weight [O, C/groups, K], bias [O] or undefined -> [N, O, L'] ([O, L']).
// conv2d over a height of 1, so its kernels and gradients serve it; its errors are told in conv1d's shapes.
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Conv1dOptions& options = {});

}  // namespace ember::nn::functional
