// Sorting and selection along a dim, with PyTorch's semantics: sort, argsort,
// topk. Entry points: core/ops/sorting.cpp; kernels: core/ops/sorting_kernels.h.
// Tests: tests/core/test_sorting.cpp.
#pragma once

#include "core/ops/reduction.h"  // ValuesIndices

namespace ember {

// The values along dim in ascending (or descending) order and their i64
// positions in the input. Stable: equal values keep their order. nan counts
// as larger than every number, so it comes last ascending and first
// descending, as torch.sort. A 0-d tensor is its own sort.
ValuesIndices sort(const Tensor& t, int64_t dim = -1, bool descending = false);
// sort(t, dim, descending).indices.
Tensor argsort(const Tensor& t, int64_t dim = -1, bool descending = false);
// The k largest (smallest when largest is false) values along dim and their
// positions, in sorted order with ties in index order, whatever `sorted`
// says (PyTorch leaves the order unspecified when it is false).
ValuesIndices topk(const Tensor& t, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);

}  // namespace ember
