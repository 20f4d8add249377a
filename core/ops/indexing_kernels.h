// The kernel interface of the indexing family (entry points: core/ops/indexing.cpp;
// kernels: kernels/{reference,cpu}/indexing.cpp). Ops are keyed by the value
// dtype; index tensors are i32 or i64 and kernels read them through
// visit_index_dtype. Kernels check every index they read and throw through
// throw_index_out_of_range, so a bad index is an ember::Error, never a wild write.
#pragma once

#include <string_view>

#include "core/dispatch.h"
#include "core/grad_hook.h"
#include "core/elementwise_loop.h"
#include "core/scalar.h"
#include "core/tensor.h"

namespace ember {

// Whole-row selection (index_select, embedding): input is contiguous
// [outer, input_rows, row_size], out is contiguous [outer, num_indices, row_size],
// out[o, j, :] = input[o, index[j], :].
struct RowSelect {
  void* out = nullptr;
  const void* input = nullptr;
  const void* index = nullptr;  // num_indices contiguous values of index_dtype
  DType index_dtype = DType::i64;
  int64_t outer = 0, input_rows = 0, num_indices = 0, row_size = 0;
  std::string_view op;  // names the caller in errors
};

// Element-wise indexing along one dim (gather, scatter_add). Operands are
// (out, index, other), each viewed with the index's shape; `slices` walks the
// positions where the index's coordinate along dim is 0, and `length` steps of
// `dim_strides[k]` reach the rest of each slice. Indices select along dim within
// [0, dim_size) of the indexed operand (input for gather, out for scatter_add).
struct AlongDim {
  ElementwiseLoop slices;
  int64_t length = 0;
  int64_t dim_strides[3] = {};
  int64_t dim_size = 0;
};

// out[pos] = input[pos with pos[dim] = index[pos]]; operands (out, index, input).
extern Op<void(const AlongDim&)> gather_op;
// out[pos with pos[dim] = index[pos]] += src[pos]; operands (out, index, src).
// Each output element accumulates in increasing index position along dim, on
// every backend and thread count, so results are deterministic.
extern Op<void(const AlongDim&)> scatter_add_op;
extern Op<void(const RowSelect&)> index_select_op, embedding_op;
// (out, input, mask: bool): out = mask ? value : input.
extern Op<void(const ElementwiseLoop&, const Scalar& value)> masked_fill_op;
// out, input contiguous [..., rows, cols]: keep the elements on and below
// (tril) or on and above (triu) the given diagonal, zero the rest.
extern Op<void(const Tensor& out, const Tensor& input, int64_t diagonal)> tril_op, triu_op;
// out: contiguous i64 [indices.numel(), num_classes]; indices contiguous; keyed by the index dtype.
extern Op<void(const Tensor& out, const Tensor& indices)> one_hot_op;

[[noreturn]] void throw_index_out_of_range(std::string_view op, int64_t index, int64_t dim_size);

// Calls f.template operator()<I>() with I the C++ type of an index dtype (i32 or i64).
template <class F>
decltype(auto) visit_index_dtype(DType dtype, F&& f) {
  EMBER_ASSERT(dtype == DType::i32 || dtype == DType::i64, "index dtype {}", dtype);
  if (dtype == DType::i32) return f.template operator()<int32_t>();
  return f.template operator()<int64_t>();
}

// Reads an index and checks it lies in [0, size).
template <class I>
inline int64_t checked_index(I value, int64_t size, std::string_view op) {
  int64_t index = int64_t(value);
  if (index < 0 || index >= size) [[unlikely]]
    throw_index_out_of_range(op, index, size);
  return index;
}

// Gradient slots (autograd/functions/indexing.cpp). Params: the dim (int64_t)
// for cat, index_select, gather, scatter_add and split (whose outputs are all
// its pieces); the diagonal (int64_t) for tril/triu; the repeats (Shape) for
// repeat; the pad list for pad.
extern GradSlot cat_grad, index_select_grad, embedding_grad, gather_grad, scatter_add_grad, masked_fill_grad, tril_grad,
    triu_grad, repeat_grad, pad_grad, split_grad;

}  // namespace ember
