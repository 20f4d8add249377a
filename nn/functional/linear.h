// nn::functional::linear and embedding, with torch.nn.functional's argument
// order. Called by nn::Linear and nn::Embedding. Tests: tests/nn/test_layers.cpp.
#pragma once

#include <optional>

#include "core/tensor.h"

namespace ember::nn::functional {

// input [..., in] x weight [out, in]^T + bias [out] -> [..., out]: one addmm
// (a GEMM with the bias fused) over the flattened leading dims.
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = {});

// indices of any shape (i32/i64) into weight [num_embeddings, dim] -> [..., dim].
// Positions holding padding_idx contribute no gradient to the weight (its row
// stays fixed in training), as torch.nn.functional.embedding's padding_idx.
Tensor embedding(const Tensor& input, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt);

}  // namespace ember::nn::functional
