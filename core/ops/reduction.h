// Reductions over any set of dims (empty dims = all dims), with keepdim, and
// softmax / log_softmax. Entry points: core/ops/reduction.cpp; kernels:
// kernels/{reference,cpu}/reduction.cpp and softmax.cpp.
#pragma once

#include <optional>

#include "core/tensor.h"

namespace ember {

// sum/prod of bool and integers give i64; mean needs a floating input, as in PyTorch.
Tensor sum(const Tensor& t, const Dims& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& t, const Dims& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& t, const Dims& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& t, const Dims& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& t, const Dims& dims = {}, bool keepdim = false);
// Over all elements (0-d results).
Tensor max(const Tensor& t);
Tensor min(const Tensor& t);
// Along one dim: the values and their (first) indices, as PyTorch's max(dim).
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};
ValuesIndices max(const Tensor& t, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& t, int64_t dim, bool keepdim = false);
// Index of the first maximum; over the flattened tensor when dim is empty.
Tensor argmax(const Tensor& t, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& t, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor var(const Tensor& t, const Dims& dims = {}, bool unbiased = true, bool keepdim = false);
Tensor std(const Tensor& t, const Dims& dims = {}, bool unbiased = true, bool keepdim = false);
Tensor logsumexp(const Tensor& t, const Dims& dims, bool keepdim = false);
// Whether any / every element along dims is nonzero (NaN counts as nonzero),
// as bool. any of nothing is false, all of nothing true.
Tensor any(const Tensor& t, const Dims& dims = {}, bool keepdim = false);
Tensor all(const Tensor& t, const Dims& dims = {}, bool keepdim = false);
// torch.equal: the same shape and equal elements (after type promotion; NaN
// is unequal to itself).
bool equal(const Tensor& a, const Tensor& b);
// The p-norm (p = 2 by default; inf and -inf allowed).
Tensor norm(const Tensor& t, double p = 2.0, const Dims& dims = {}, bool keepdim = false);

// Numerically stable (max subtracted); a row that is all -inf gives nan for
// softmax, as PyTorch does, and -inf entries give exactly 0.
Tensor softmax(const Tensor& t, int64_t dim);
Tensor log_softmax(const Tensor& t, int64_t dim);

}  // namespace ember
