// nn::functional::scaled_dot_product_attention, torch.nn.functional's
// semantics, as a composite of differentiable core ops (two batched GEMMs and
// a softmax). Called by nn::CausalSelfAttention and nn::MultiheadAttention.
// Without dropout, what fused_attention_supported (core/ops/attention.h)
// takes runs the fused kernel, which never materialises the [L, S] scores: on
// the CPU f32, bf16 and f64 with any mask; on a GPU causal f16/bf16. A row
// whose keys are all masked out gives 0 on both paths (Note [Fully masked
// rows] in attention.cpp), with zero gradients.
// Tests: tests/nn/test_attention.cpp, tests/cuda/test_cuda_attention.cpp.
#pragma once

#include <optional>

#include "core/random.h"
#include "core/tensor.h"

namespace ember::nn::functional {

struct ScaledDotProductAttentionOptions {
  // [L, S] or broadcastable to [..., L, S]: bool (true = take part in
  // attention, PyTorch's SDPA convention) or a float added to the scores.
  Tensor attn_mask{};
  double dropout_p = 0.0;  // applied to the attention weights
  bool is_causal = false;  // query i attends to keys j <= i (keys aligned to the start)
  std::optional<double> scale{};  // 1 / sqrt(head_dim) when unset
  Generator* generator = nullptr;
};

// query [..., L, E], key [..., S, E], value [..., S, Ev] -> [..., L, Ev]
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const ScaledDotProductAttentionOptions& options = {});

// The attention weights alone (softmax of the masked, scaled scores, before
// dropout; zero on a fully masked row): [..., L, S]. scaled_dot_product_attention is dropout(these) @ value.
Tensor attention_weights(const Tensor& query, const Tensor& key, const ScaledDotProductAttentionOptions& options = {});

}  // namespace ember::nn::functional
