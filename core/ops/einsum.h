// Einstein summation, as torch.einsum. Entry point: core/ops/einsum.cpp;
// tests: tests/core/test_einsum.cpp, tests/autograd/test_scan_grads.cpp.
#pragma once

#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace ember {

// The sum of products that `equation` names over `operands`:
//   einsum("ij,jk->ik", {a, b})         matrix product
//   einsum("bhqd,bhkd->bhqk", {q, k})   attention scores
//   einsum("ii->i", {a})                the diagonal (a view)
//   einsum("...ij,...jk->...ik", {a, b}) batch dims broadcast through "..."
// Subscripts are letters (a-z, A-Z); spaces are ignored. Without "->" the
// output is the ellipsis dims, then the subscripts that appear once, in
// alphabetical order (upper case first). Subscripts of one letter must have
// equal sizes or size 1 (broadcast); subscripts missing from the output are
// summed, and so are ellipsis dims when an explicit output leaves them out.
// Operands share one dtype and device. Reduced to permute, reshape, diagonal,
// sum and bmm, so the gradient is theirs.
Tensor einsum(std::string_view equation, const std::vector<Tensor>& operands);

}  // namespace ember
