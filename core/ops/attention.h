// Fused causal self-attention: softmax(q k^T scale, causal) v in one kernel
// that never materialises the [length, length] scores, and its backward.
// scaled_dot_product_attention (nn/functional/attention.h) calls it when
// fused_causal_attention_supported says it applies; otherwise it composes
// matmul, masked_fill and softmax. Kernels: core/ops/attention_kernels.h.
#pragma once

#include "core/tensor.h"

namespace ember {

// Whether causal_attention can take these [..., length, head_dim] operands:
// on a GPU, f16 or bf16, equal query and key lengths, head_dim 64 or 128.
bool fused_causal_attention_supported(const Tensor& query, const Tensor& key, const Tensor& value);

// query, key, value: [..., length, head_dim], one dtype and device.
Tensor causal_attention(const Tensor& query, const Tensor& key, const Tensor& value, double scale);

// The backward, for the autograd layer: grads of (query, key, value).
struct CausalAttentionGrads {
  Tensor query, key, value;
};
CausalAttentionGrads causal_attention_backward(const Tensor& grad_out, const Tensor& query, const Tensor& key,
                                               const Tensor& value, const Tensor& out, const Tensor& logsumexp,
                                               double scale);

}  // namespace ember
