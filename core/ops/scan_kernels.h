// The kernel interface of the scan family (entry points: core/ops/scan.cpp;
// kernels: kernels/{reference,cpu}/scan.cpp, kernels/cuda/scan.cu). The entry
// point converts the input to the output dtype, so a kernel reads and writes
// one dtype; it accumulates in reduction_types::Accumulator (float for the
// 16-bit floats, int64 for integers) and rounds each prefix once on the store.
#pragma once

#include "core/arithmetic.h"
#include "core/dispatch.h"
#include "core/elementwise_loop.h"
#include "core/grad_hook.h"
#include "core/ops/reduction_kernels.h"

namespace ember {

// The operands (out, input) seen without the scanned dim: `slices` walks the
// positions whose coordinate along dim is 0, and `length` steps of
// `dim_strides[k]` (in elements, per operand) reach the rest of each slice.
struct ScanLoop {
  ElementwiseLoop slices;
  int64_t length = 0;
  int64_t dim_strides[2] = {};
};

// out[j] = in[0] + ... + in[j] (cumsum), in[0] * ... * in[j] (cumprod) along each slice.
extern Op<void(const ScanLoop&)> cumsum_op, cumprod_op;

// The step of each scan, shared by every backend so that all compute the same
// function: integers wrap (core/arithmetic.h), floats round as the reference does.
struct ScanSum {
  template <class A>
  static constexpr A identity() { return A(0); }
  template <class A>
  static constexpr A step(A accumulated, A value) { return arith::add(accumulated, value); }
};
struct ScanProduct {
  template <class A>
  static constexpr A identity() { return A(1); }
  template <class A>
  static constexpr A step(A accumulated, A value) { return arith::mul(accumulated, value); }
};

// Gradient slots (autograd/functions/scan.cpp); params: the wrapped dim (int64_t).
extern GradSlot cumsum_grad, cumprod_grad;

}  // namespace ember
