// ElementwiseLoop: the operands of an element-wise kernel (output first) with
// one common shape after broadcasting, their dims merged wherever memory
// allows, so that kernels see as few and as long rows as possible. A broadcast
// input has stride 0 along the broadcast dims; kernels read that as "repeat".
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/dtype.h"
#include "core/parallel.h"
#include "core/shape.h"

namespace ember {

class Tensor;

struct ElementwiseLoop {
  static constexpr int kMaxOperands = 4;

  // The arrays are filled only up to ndim and num_operands: left
  // uninitialised, they cost nothing on the per-op path.
  int num_operands = 0;
  int ndim = 0;                         // after merging; at least 1
  int64_t numel = 0;
  int64_t shape[kMaxDims];              // innermost dim last
  int64_t strides[kMaxOperands][kMaxDims];  // in elements, per operand
  char* data[kMaxOperands];
  DType dtypes[kMaxOperands];

  // Built from an output of the broadcast shape and inputs broadcastable to it.
  static ElementwiseLoop make(std::initializer_list<const Tensor*> operands);

  // Whether every operand is dense along the single merged dim.
  bool contiguous() const {
    for (int i = 0; i < num_operands; ++i)
      if (strides[i][ndim - 1] != 1) return false;
    return ndim == 1;
  }
  int64_t inner_size() const { return shape[ndim - 1]; }
};

// Calls row(pointers, inner_strides, n) for every run of the innermost dim that
// falls in the flat element range [begin, end); pointers are to each operand's
// first element of the run, strides are per operand in elements.
template <class Row>
void for_each_row(const ElementwiseLoop& loop, int64_t begin, int64_t end, Row&& row) {
  if (loop.ndim == 1) {  // one merged dim (every dense op): a single run, no index arithmetic
    char* ptrs[ElementwiseLoop::kMaxOperands];
    int64_t inner_strides[ElementwiseLoop::kMaxOperands];
    for (int i = 0; i < loop.num_operands; ++i) {
      inner_strides[i] = loop.strides[i][0];
      ptrs[i] = loop.data[i] + begin * inner_strides[i] * element_size(loop.dtypes[i]);
    }
    row(ptrs, inner_strides, end - begin);
    return;
  }
  const int last = loop.ndim - 1;
  const int64_t inner = loop.shape[last];
  int64_t index[kMaxDims] = {};
  int64_t rest = begin;
  for (int d = last; d >= 0; --d) {
    index[d] = rest % loop.shape[d];
    rest /= loop.shape[d];
  }
  char* ptrs[ElementwiseLoop::kMaxOperands];
  int64_t inner_strides[ElementwiseLoop::kMaxOperands];
  int64_t sizes[ElementwiseLoop::kMaxOperands];
  for (int i = 0; i < loop.num_operands; ++i) {
    sizes[i] = element_size(loop.dtypes[i]);
    inner_strides[i] = loop.strides[i][last];
  }
  int64_t position = begin;
  while (position < end) {
    for (int i = 0; i < loop.num_operands; ++i) {
      int64_t offset = 0;
      for (int d = 0; d <= last; ++d) offset += index[d] * loop.strides[i][d];
      ptrs[i] = loop.data[i] + offset * sizes[i];
    }
    int64_t n = std::min(inner - index[last], end - position);
    row(ptrs, inner_strides, n);
    position += n;
    index[last] += n;
    for (int d = last; d > 0 && index[d] == loop.shape[d]; --d) {
      index[d] = 0;
      ++index[d - 1];
    }
  }
}

// Runs `row` over the whole loop, split across threads above kParallelGrain.
template <class Row>
void parallel_rows(const ElementwiseLoop& loop, Row&& row, int64_t grain = kParallelGrain) {
  parallel_for(0, loop.numel, grain, [&](int64_t begin, int64_t end) { for_each_row(loop, begin, end, row); });
}

}  // namespace ember
