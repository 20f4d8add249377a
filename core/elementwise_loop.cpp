// Building an ElementwiseLoop: broadcast strides, then merge dims.
#include "core/elementwise_loop.h"

#include "core/tensor.h"

namespace ember {

ElementwiseLoop ElementwiseLoop::make(std::initializer_list<const Tensor*> operands) {
  ElementwiseLoop loop;
  EMBER_ASSERT(operands.size() <= size_t(kMaxOperands), "too many operands: {}", operands.size());
  const Shape& shape = (*operands.begin())->shape();
  loop.num_operands = int(operands.size());
  loop.numel = shape.numel();

  // Fast path: every operand dense and of the output's shape is one run.
  bool dense = true;
  for (const Tensor* t : operands) dense = dense && t->shape() == shape && t->is_contiguous();
  if (dense) {
    int op = 0;
    for (const Tensor* t : operands) {
      loop.data[op] = static_cast<char*>(t->data_ptr());
      loop.dtypes[op] = t->dtype();
      loop.strides[op][0] = 1;
      ++op;
    }
    loop.ndim = 1;
    loop.shape[0] = loop.numel;
    return loop;
  }

  // Broadcast: align each operand to the output's dims from the right; a size-1
  // or missing dim gets stride 0.
  int full = shape.ndim();
  int64_t strides[kMaxOperands][kMaxDims];
  int op = 0;
  for (const Tensor* t : operands) {
    loop.data[op] = static_cast<char*>(t->data_ptr());
    loop.dtypes[op] = t->dtype();
    int lead = full - t->dim();
    for (int d = 0; d < full; ++d) {
      int td = d - lead;
      strides[op][d] = (td < 0 || t->shape()[td] == 1) ? 0 : t->strides()[td];
    }
    ++op;
  }

  // Merge adjacent dims (outer a, inner b) when every operand steps through
  // them as one: stride[a] == stride[b] * size[b]. Size-1 dims vanish.
  int out = -1;
  for (int d = 0; d < full; ++d) {
    if (shape[d] == 1) continue;
    bool mergeable = out >= 0;
    for (int i = 0; i < loop.num_operands && mergeable; ++i)
      mergeable = loop.strides[i][out] == strides[i][d] * shape[d];
    if (mergeable) {
      loop.shape[out] *= shape[d];
      for (int i = 0; i < loop.num_operands; ++i) loop.strides[i][out] = strides[i][d];
    } else {
      ++out;
      loop.shape[out] = shape[d];
      for (int i = 0; i < loop.num_operands; ++i) loop.strides[i][out] = strides[i][d];
    }
  }
  if (out < 0) {  // a single element (or a 0-d tensor)
    out = 0;
    loop.shape[0] = shape.numel() == 0 ? 0 : 1;
    for (int i = 0; i < loop.num_operands; ++i) loop.strides[i][0] = 1;
  }
  loop.ndim = out + 1;
  return loop;
}

}  // namespace ember
