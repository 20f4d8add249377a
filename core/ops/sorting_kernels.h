// The kernel interface of sorting (entry points: core/ops/sorting.cpp; kernels:
// kernels/{reference,cpu}/sorting.cpp, kernels/cuda/sorting.cu). The order
// every backend produces is element_before below, a strict total order, so
// sort and topk give the same values and indices on every backend and thread
// count. Tests: tests/core/test_sorting.cpp, tests/cuda/test_cuda_sorting.cpp.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/dispatch.h"
#include "core/grad_hook.h"
#include "core/host_device.h"

namespace ember {

// input: contiguous [rows, length]; values and indices: contiguous
// [rows, count], the first `count` elements of each row in sorted order and
// their positions in the row (count = length for sort, k for topk). Keyed by
// the input's dtype; values have that dtype.
struct SortProblem {
  const void* input = nullptr;
  void* values = nullptr;
  int64_t* indices = nullptr;
  int64_t rows = 0, length = 0, count = 0;
  bool descending = false;
};

extern Op<void(const SortProblem&)> sort_op, topk_op;

// Gradient slots (autograd/functions/sorting.cpp); params: the sorted dim (int64_t, wrapped).
extern GradSlot sort_grad, topk_grad;

namespace sorting_detail {

// PyTorch's order of values: nan above every number (last when ascending,
// first when descending); V is a compute type (float for f16/bf16).
template <class V>
EMBER_HOST_DEVICE inline bool value_before(V a, V b, bool descending) {
  bool a_nan = false, b_nan = false;
  if constexpr (std::is_floating_point_v<V>) a_nan = a != a, b_nan = b != b;
  if (descending) return !b_nan && (a_nan || a > b);
  return !a_nan && (b_nan || a < b);
}

// Values in that order, equal values (nans among them) in index order: the
// stable sort's order, total, so a partial sort or a rank count gives it too.
template <class V>
EMBER_HOST_DEVICE inline bool element_before(V a, int64_t a_index, V b, int64_t b_index, bool descending) {
  if (value_before(a, b, descending)) return true;
  if (value_before(b, a, descending)) return false;
  return a_index < b_index;
}

}  // namespace sorting_detail
}  // namespace ember
