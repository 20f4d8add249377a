// The user-defined op of examples/custom_op.cpp, shared with its CUDA kernel
// (examples/custom_op_cuda.cu): the dispatch-table entry, keyed by device and
// dtype, whose kernels all take dense memory and an element count.
#pragma once

#include "core/dispatch.h"  // ember::Op, register_for (also in <ember/ember.h>)

namespace example {

// y = relu(x)^2 over n contiguous elements of the entry's dtype.
extern ember::Op<void(const void* x, void* y, int64_t n)> squared_relu_op;

// Registers the CUDA kernels (custom_op_cuda.cu). Weak: a build without the
// CUDA backend leaves it out, and then the address is null.
__attribute__((weak)) void register_squared_relu_cuda_kernels();

}  // namespace example
