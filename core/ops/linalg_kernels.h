// The kernel interface of the matrix products: the entry points in
// core/ops/linalg.cpp reduce every matmul/mm/bmm/addmm to one MatmulProblem
// (batch dims collapsed, broadcast batch dims with stride 0); kernels in
// kernels/{reference,cpu}/matmul.cpp only compute. Tests: tests/core/test_matmul.cpp.
#pragma once

#include "core/dispatch.h"
#include "core/grad_hook.h"
#include "core/shape.h"

namespace ember {

inline constexpr int kMaxBatchDims = kMaxDims - 2;

// A strided [batch..., rows, cols] operand inside a tensor's storage. A batch
// stride of 0 means the operand is broadcast along that batch dim. Strides are
// in elements; a size-1 matrix dim has a stride that keeps the layout plain.
struct MatrixOperand {
  void* data = nullptr;
  int64_t row_stride = 0, col_stride = 0;
  int64_t batch_strides[kMaxBatchDims] = {};
};

// out[b] = a[b] @ b[b] (+ bias) for every batch index b; every operand has the
// key dtype, out is contiguous [batch..., m, n], k >= 1 and no dim is 0.
struct MatmulProblem {
  int batch_ndim = 0;
  int64_t batch_shape[kMaxBatchDims] = {};
  int64_t m = 0, n = 0, k = 0;
  MatrixOperand out, a, b;
  // An [m, n] addend (strides 0 where it broadcasts), the same for every batch;
  // absent when data is null. addmm's fused path.
  MatrixOperand bias;

  int64_t batch_count() const {
    int64_t count = 1;
    for (int d = 0; d < batch_ndim; ++d) count *= batch_shape[d];
    return count;
  }
  // Element offset of batch `index` (row-major over batch_shape) in `operand`.
  int64_t batch_offset(const MatrixOperand& operand, int64_t index) const {
    int64_t offset = 0;
    for (int d = batch_ndim - 1; d >= 0; --d) {
      offset += (index % batch_shape[d]) * operand.batch_strides[d];
      index /= batch_shape[d];
    }
    return offset;
  }
};

extern Op<void(const MatmulProblem&)> matmul_op;

// Gradient slots (autograd/functions/linalg.cpp): matmul serves matmul, mm and
// bmm; addmm the fused input + a @ b.
extern GradSlot matmul_grad, addmm_grad;

}  // namespace ember
