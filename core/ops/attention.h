// Causal self-attention, softmax(q k^T scale, causal) v: where
// fused_causal_attention_supported says so, in one kernel that never
// materialises the [length, length] scores (with its backward); elsewhere
// (the CPU, f32 and f64, other head dims) composed of matmul, masked_fill and
// softmax. scaled_dot_product_attention (nn/functional/attention.h) calls it
// when the fused kernel applies. Kernels: core/ops/attention_kernels.h.
#pragma once

#include "core/tensor.h"

namespace ember {

// Whether causal_attention can take these [..., length, head_dim] operands:
// on a GPU, f16 or bf16, equal query and key lengths, head_dim 64 or 128.
bool fused_causal_attention_supported(const Tensor& query, const Tensor& key, const Tensor& value);

// query, key, value: [..., length, head_dim], one floating dtype and device.
Tensor causal_attention(const Tensor& query, const Tensor& key, const Tensor& value, double scale);

// The backward, for the autograd layer: grads of (query, key, value).
struct CausalAttentionGrads {
  Tensor query, key, value;
};
CausalAttentionGrads causal_attention_backward(const Tensor& grad_out, const Tensor& query, const Tensor& key,
                                               const Tensor& value, const Tensor& out, const Tensor& logsumexp,
                                               double scale);

}  // namespace ember
