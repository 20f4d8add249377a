// nn::MultiheadAttention, exactly PyTorch's: parameters in_proj_weight
// [3E, E], in_proj_bias [3E] and out_proj (a Linear), inputs [L, N, E]
// ([N, L, E] with batch_first, or unbatched [L, E]), boolean or additive
// masks, and the head-averaged attention weights. Tests: tests/nn/test_attention.cpp
// (golden values from tests/data/make_golden_attention.py).
#pragma once

#include <memory>

#include "core/random.h"
#include "nn/linear.h"

namespace ember::nn {

// PyTorch's out_proj type; only its name differs from Linear (it shows in the printed tree).
class NonDynamicallyQuantizableLinear : public Linear {
 public:
  using Linear::Linear;
};

struct MultiheadAttentionOptions {
  double dropout = 0.0;  // on the attention weights, while training
  bool bias = true;      // in_proj_bias and out_proj.bias
  bool batch_first = false;
  DType dtype = DType::f32;
  Generator* generator = nullptr;  // initialisation and dropout; the default generator when null
};

struct MultiheadAttentionForwardOptions {
  Tensor key_padding_mask{};  // [N, S] (or [S] unbatched): bool, true = ignore that key; or float, added
  bool need_weights = true;
  Tensor attn_mask{};  // [L, S] or [N * num_heads, L, S]: bool, true = not allowed; or float, added
  bool average_attn_weights = true;  // weights [N, L, S] averaged over heads, else [N, num_heads, L, S]

  // The masks, for the module hooks (nn/forward_call.h).
  template <class Visit>
  void for_each_tensor(Visit& visit) {
    visit(key_padding_mask);
    visit(attn_mask);
  }
};

struct MultiheadAttentionOutput {
  Tensor output;   // the query's layout: [L, N, E], [N, L, E] or [L, E]
  Tensor weights;  // undefined unless need_weights

  template <class Visit>
  void for_each_tensor(Visit& visit) {
    visit(output);
    visit(weights);
  }
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, const MultiheadAttentionOptions& options = {});
  using Module::forward;  // the single-tensor form is not attention's; it throws
  MultiheadAttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const MultiheadAttentionForwardOptions& options = {});
  // forward between the module's hooks (Note [Module calls]).
  MultiheadAttentionOutput operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                                      const MultiheadAttentionForwardOptions& options = {}) {
    return call(*this, query, key, value, options);
  }
  // PyTorch's _reset_parameters: xavier_uniform_ in_proj_weight, zero biases.
  void reset_parameters(Generator* generator = nullptr);

  int64_t embed_dim;
  int64_t num_heads;
  int64_t head_dim;
  double dropout;
  bool batch_first;
  Generator* generator;
  // Registered slots (Note [Parameter slots]).
  Tensor& in_proj_weight;  // [3 E, E]: the query, key and value projections stacked
  Tensor& in_proj_bias;    // [3 E] or undefined
  std::shared_ptr<NonDynamicallyQuantizableLinear> out_proj;
};

}  // namespace ember::nn
