// Dropout. Entry point: core/ops/dropout.cpp; kernels:
// kernels/{reference,cpu}/dropout.cpp; gradient: autograd/functions/dropout.cpp.
// Tests: tests/core/test_dropout.cpp.
#pragma once

#include "core/random.h"
#include "core/tensor.h"

namespace ember {

// Zeroes each element with probability p from the Philox stream of `generator` (the default when null) and
// scales the rest by 1/(1-p); the identity when !training or p == 0. The same seed gives the same mask
// whatever the thread count (and later on CUDA).
Tensor dropout(const Tensor& input, double p, bool training = true, Generator* generator = nullptr);

}  // namespace ember
