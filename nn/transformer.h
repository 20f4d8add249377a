// The GPT-2 block of nanoGPT (karpathy/nanoGPT, model.py) with its names, so
// state dicts match: CausalSelfAttention (c_attn, c_proj), MLP (c_fc,
// c_proj) and TransformerBlock (ln_1, attn, ln_2, mlp), pre-norm with
// residual connections. Tests: tests/nn/test_attention.cpp.
#pragma once

#include <memory>

#include "core/random.h"
#include "nn/activation.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/normalization.h"

namespace ember::nn {

struct TransformerBlockOptions {
  int64_t embed_dim = 768;  // nanoGPT's n_embd
  int64_t num_heads = 12;   // n_head
  int64_t mlp_ratio = 4;    // the MLP's hidden width is mlp_ratio * embed_dim
  double dropout = 0.0;
  bool bias = true;  // biases in the Linears and LayerNorms
  // The residual projections (c_proj) start with std 0.02 / sqrt(2 * num_layers), nanoGPT's GPT-2 scaling.
  int64_t num_layers = 1;
  DType dtype = DType::f32;
  Generator* generator = nullptr;  // initialisation and dropout; the default generator when null
};

// Multi-head self-attention where token t attends to tokens <= t.
class CausalSelfAttention : public Module {
 public:
  explicit CausalSelfAttention(const TransformerBlockOptions& options);
  // [B, T, C] -> [B, T, C]
  Tensor forward(const Tensor& input) override;

  int64_t embed_dim;
  int64_t num_heads;
  double dropout;
  Generator* generator;
  std::shared_ptr<Linear> c_attn;  // [C] -> [3 C]: query, key, value
  std::shared_ptr<Linear> c_proj;
  std::shared_ptr<Dropout> attn_dropout;
  std::shared_ptr<Dropout> resid_dropout;
};

class MLP : public Module {
 public:
  explicit MLP(const TransformerBlockOptions& options);
  Tensor forward(const Tensor& input) override;

  std::shared_ptr<Linear> c_fc;
  std::shared_ptr<GELU> gelu;
  std::shared_ptr<Linear> c_proj;
  std::shared_ptr<Dropout> dropout;
};

// x + attn(ln_1(x)), then + mlp(ln_2(.)).
class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const TransformerBlockOptions& options);
  Tensor forward(const Tensor& input) override;

  std::shared_ptr<LayerNorm> ln_1;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<LayerNorm> ln_2;
  std::shared_ptr<MLP> mlp;
};

}  // namespace ember::nn
