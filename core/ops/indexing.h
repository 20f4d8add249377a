// Indexing and shaping ops that copy. Entry points: core/ops/indexing.cpp;
// kernels: kernels/{reference,cpu}/indexing.cpp.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace ember {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Pieces of `split_size` along dim (the last may be smaller); views, with one
// SplitBackward for all of them under autograd.
std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim = 0);

// index is 1-d i32/i64; negative indices are errors, as in PyTorch.
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& t, int64_t dim, const Tensor& index);
// A copy of `t` with src added at `index` along dim.
Tensor scatter_add(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src);
Tensor masked_fill(const Tensor& t, const Tensor& mask, const Scalar& value);
// The rows of `weight` [num_embeddings, dim] at `input` (int32/int64
// indices of any shape) -> [..., dim]. PyTorch's argument order
// (F.embedding(input, weight)); floating indices are an error that says so.
Tensor embedding(const Tensor& input, const Tensor& weight);
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);  // i64 result
Tensor tril(const Tensor& t, int64_t diagonal = 0);
Tensor triu(const Tensor& t, int64_t diagonal = 0);
Tensor repeat(const Tensor& t, const Shape& repeats);
// Constant padding; `pad` lists (before, after) pairs starting from the last dim, as torch.nn.functional.pad.
Tensor pad(const Tensor& t, const std::vector<int64_t>& pad, const Scalar& value = 0);

}  // namespace ember
