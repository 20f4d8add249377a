// Entry points of sorting (core/ops/sorting.h): move the dim last, make the
// rows contiguous, sort each row through the kernels of
// core/ops/sorting_kernels.h, and move the dim back. Tests: tests/core/test_sorting.cpp.
#include "core/ops/sorting.h"

#include "core/ops/creation.h"
#include "core/ops/sorting_kernels.h"
#include "core/ops/views.h"

namespace ember {

Op<void(const SortProblem&)> sort_op("sort"), topk_op("topk");
GradSlot sort_grad("sort"), topk_grad("topk");

namespace {

// The first `count` of each slice of t along dim d in sorted order, and their
// positions: values and indices of t's shape with dim d of size `count`.
ValuesIndices sort_slices(const Op<void(const SortProblem&)>& op, const Tensor& t, int d, int64_t count,
                          bool descending) {
  // [..., length] rows; detached: the sort's own node links t to the values.
  Tensor rows = contiguous(t.detach().transpose(d, -1));
  Shape shape = rows.shape();
  const int64_t length = shape[shape.ndim() - 1];
  shape[shape.ndim() - 1] = count;
  Tensor values = make_tensor(shape, t.dtype(), t.device()), indices = make_tensor(shape, DType::i64, t.device());
  if (values.numel() > 0) {
    SortProblem p;
    p.input = rows.data_ptr(), p.values = values.data_ptr(), p.indices = indices.data_ptr<int64_t>();
    p.rows = values.numel() / count, p.length = length, p.count = count, p.descending = descending;
    op(t.device().type, t.dtype(), p);
  }
  return {contiguous(values.transpose(d, -1)), contiguous(indices.transpose(d, -1))};
}

}  // namespace

ValuesIndices sort(const Tensor& t, int64_t dim, bool descending) {
  EMBER_CHECK(t.defined(), "sort: undefined tensor");
  if (t.dim() == 0) {  // its own sort, as in PyTorch
    wrap_dim(dim, 0, "sort");
    ValuesIndices one = sort(t.reshape({1}), 0, descending);
    return {one.values.reshape({}), one.indices.reshape({})};
  }
  const int d = int(wrap_dim(dim, t.dim(), "sort"));
  ValuesIndices result = sort_slices(sort_op, t, d, t.size(d), descending);
  const int64_t wrapped = d;
  record_grad(sort_grad, {&t}, {&result.values, &result.indices}, &wrapped);
  return result;
}

Tensor argsort(const Tensor& t, int64_t dim, bool descending) {
  NoGradGuard no_grad;  // indices have no gradient
  return sort(t, dim, descending).indices;
}

ValuesIndices topk(const Tensor& t, int64_t k, int64_t dim, bool largest, bool) {
  EMBER_CHECK(t.defined(), "topk: undefined tensor");
  if (t.dim() == 0) {
    wrap_dim(dim, 0, "topk");
    EMBER_CHECK(k == 0 || k == 1, "topk: k={} is out of range for a 0-d tensor (k must be 0 or 1)", k);
    ValuesIndices one = topk(t.reshape({1}), k, 0, largest);
    return k == 1 ? ValuesIndices{one.values.reshape({}), one.indices.reshape({})} : one;
  }
  const int d = int(wrap_dim(dim, t.dim(), "topk"));
  EMBER_CHECK(k >= 0 && k <= t.size(d), "topk: k={} is out of range for dimension {} of size {} (shape {})", k, d,
              t.size(d), t.shape());
  ValuesIndices result = sort_slices(topk_op, t, d, k, largest);
  const int64_t wrapped = d;
  record_grad(topk_grad, {&t}, {&result.values, &result.indices}, &wrapped);
  return result;
}

}  // namespace ember
