// The kernel interface of the reduction family. Entry points (core/ops/reduction.cpp)
// validate, pick the output dtype, allocate and describe the input as "kept dims x
// reduced dims" (a ReductionLoop); kernels (kernels/{reference,cpu}/reduction.cpp,
// softmax.cpp) only compute. Tests: tests/core/test_reduction.cpp, test_softmax.cpp.
#pragma once

#include <algorithm>
#include <type_traits>

#include "core/dispatch.h"
#include "core/grad_hook.h"
#include "core/shape.h"

namespace ember {

// The input seen as kept dims (one output element each) times reduced dims (the
// elements folded into it). Size-1 dims are dropped and adjacent dims merged
// where memory allows, so a reduction over the last dim of a contiguous tensor
// is one dense reduced dim, and one over the first dim has a dense kept dim.
// Each group has at least one dim (a size-1 dim of stride 0 stands in for none).
struct ReductionLoop {
  const char* input = nullptr;
  DType input_dtype = DType::f32;
  // Output element o (the kept dims' flat row-major index) is output[o]; either
  // pointer may be null when the op does not produce it (argmax: indices only).
  char* output = nullptr;
  int64_t* indices = nullptr;

  int64_t kept_numel = 1, reduced_numel = 1;
  int kept_ndim = 1, reduced_ndim = 1;
  int64_t kept_shape[kMaxDims] = {1}, kept_strides[kMaxDims] = {};  // input strides, in elements
  int64_t reduced_shape[kMaxDims] = {1}, reduced_strides[kMaxDims] = {};

  // When the reduced dims keep their logical order (always for index ops), the
  // flat reduced index r is the position in the reduced dims' row-major order.

  // The input offset (in elements) of output element o.
  int64_t kept_offset(int64_t o) const {
    if (kept_ndim == 1) return o * kept_strides[0];
    int64_t offset = 0;
    for (int d = kept_ndim - 1; d >= 0; --d) {
      offset += (o % kept_shape[d]) * kept_strides[d];
      o /= kept_shape[d];
    }
    return offset;
  }
  int64_t inner_reduced_size() const { return reduced_shape[reduced_ndim - 1]; }
  int64_t inner_reduced_stride() const { return reduced_strides[reduced_ndim - 1]; }
  int64_t inner_kept_size() const { return kept_shape[kept_ndim - 1]; }
  int64_t inner_kept_stride() const { return kept_strides[kept_ndim - 1]; }
};

// Walks the flat reduced index r upward, keeping the input offset of r.
class ReducedCursor {
 public:
  ReducedCursor(const ReductionLoop& loop, int64_t r) : loop_(loop) {
    for (int d = loop.reduced_ndim - 1; d >= 0; --d) {
      index_[d] = r % loop.reduced_shape[d];
      r /= loop.reduced_shape[d];
      offset_ += index_[d] * loop.reduced_strides[d];
    }
  }
  int64_t offset() const { return offset_; }
  // Index along the innermost reduced dim.
  int64_t inner_index() const { return index_[loop_.reduced_ndim - 1]; }
  // Moves forward by n elements, which must stay within the current innermost run.
  void advance_inner(int64_t n) {
    int last = loop_.reduced_ndim - 1;
    index_[last] += n;
    offset_ += n * loop_.reduced_strides[last];
    for (int d = last; d > 0 && index_[d] == loop_.reduced_shape[d]; --d) {
      offset_ -= index_[d] * loop_.reduced_strides[d];
      index_[d] = 0;
      ++index_[d - 1];
      offset_ += loop_.reduced_strides[d - 1];
    }
  }
  void next() { advance_inner(1); }

 private:
  const ReductionLoop& loop_;
  int64_t index_[kMaxDims] = {};
  int64_t offset_ = 0;
};

// Calls run(offset, stride, n, r) for each run of the innermost reduced dim
// within the flat reduced range [begin, end): n elements from input offset
// `offset`, `stride` apart, the first at flat reduced index r.
template <class Run>
void for_each_reduced_run(const ReductionLoop& loop, int64_t begin, int64_t end, Run&& run) {
  ReducedCursor cursor(loop, begin);
  const int64_t inner = loop.inner_reduced_size(), stride = loop.inner_reduced_stride();
  for (int64_t r = begin; r < end;) {
    int64_t n = std::min(inner - cursor.inner_index(), end - r);
    run(cursor.offset(), stride, n, r);
    cursor.advance_inner(n);
    r += n;
  }
}

// Softmax along one dim of a contiguous input, seen as [outer, size, inner];
// the output is contiguous with the same shape.
struct SoftmaxLoop {
  const char* input = nullptr;
  char* output = nullptr;
  int64_t outer = 1, size = 1, inner = 1;
};

// The types the fast kernels of every backend compute sum and prod in.
namespace reduction_types {
template <class T>
inline constexpr bool kFloating = std::is_floating_point_v<ComputeType<T>>;
// The type sums and products of T run in.
template <class T>
using Accumulator = std::conditional_t<kFloating<T>, ComputeType<T>, int64_t>;
// sum and prod of bool and integers return int64.
template <class T>
using WidenedOut = std::conditional_t<kFloating<T>, T, int64_t>;
}  // namespace reduction_types

using ReductionKernel = void(const ReductionLoop&);

// Keyed by the input dtype. Output dtypes: sum/prod give i64 for bool and
// integer inputs and the input dtype otherwise; every other op writes the input
// dtype (floating only for mean, var, std, logsumexp, norm).
extern Op<ReductionKernel> sum_op, mean_op, prod_op, amax_op, amin_op, logsumexp_op;
// Values (input dtype) and first indices (i64) of the extreme along the reduced
// dims; nan counts as the extreme, as in PyTorch.
extern Op<ReductionKernel> max_indices_op, min_indices_op;
// Variance over the reduced elements; `unbiased` divides by n - 1 instead of n.
extern Op<void(const ReductionLoop&, bool unbiased)> var_op, std_op;
// The p-norm: p = 0 counts nonzeros, +-inf give max/min of |x|.
extern Op<void(const ReductionLoop&, double p)> norm_op;

using SoftmaxKernel = void(const SoftmaxLoop&);
extern Op<SoftmaxKernel> softmax_op, log_softmax_op;

// Gradient slots (autograd/functions/reduction.cpp). Params: ReduceParams for
// the reductions over dims (the dims as the user gave them; max_min_all
// serves max/min over all elements), MomentParams for var/std, NormParams for
// norm, DimParams for max/min along a dim, the dim (int64_t) for softmax.
extern GradSlot sum_grad, mean_grad, prod_grad, extreme_grad, extreme_all_grad, indexed_extreme_grad, var_grad,
    std_grad, logsumexp_grad, norm_grad, softmax_grad, log_softmax_grad;
struct ReduceParams {
  const Dims& dims;
  bool keepdim;
};
struct MomentParams {
  const Dims& dims;
  bool keepdim;
  bool unbiased;
};
struct NormParams {
  const Dims& dims;
  bool keepdim;
  double p;
};
struct DimParams {
  int64_t dim;
  bool keepdim;
};

}  // namespace ember
