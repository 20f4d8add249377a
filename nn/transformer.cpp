// nanoGPT's block (see transformer.h). Children are called as modules ((*ln_1)(x),
// nanoGPT's self.ln_1(x)), never through forward(), so hooks, wrappers and activation
// checkpointing set on any of them run.
#include "nn/transformer.h"

#include <cmath>

#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/views.h"
#include "nn/functional/attention.h"
#include "nn/init.h"

namespace ember::nn {

namespace {

// nanoGPT's _init_weights: N(0, 0.02) weights (std for c_proj scaled by
// 1 / sqrt(2 * num_layers)), zero biases.
std::shared_ptr<Linear> gpt_linear(int64_t in, int64_t out, double std, const TransformerBlockOptions& options) {
  auto linear = std::make_shared<Linear>(
      in, out, LinearOptions{.bias = options.bias, .dtype = options.dtype, .generator = options.generator});
  init::normal_(linear->weight, 0.0, std, options.generator);
  if (linear->bias.defined()) init::zeros_(linear->bias);
  return linear;
}

double residual_std(const TransformerBlockOptions& options) {
  // 0 layers made the std infinite: c_proj's weights inf, every output NaN.
  EMBER_CHECK(options.num_layers >= 1,
              "TransformerBlockOptions: num_layers (which scales the residual projections' init) must be at least 1, "
              "got {}",
              options.num_layers);
  return 0.02 / std::sqrt(2.0 * double(options.num_layers));
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const TransformerBlockOptions& options)
    : embed_dim(options.embed_dim),
      num_heads(options.num_heads),
      dropout(options.dropout),
      generator(options.generator) {
  EMBER_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0,
              "CausalSelfAttention: embed_dim {} must be divisible by num_heads {}", embed_dim, num_heads);
  c_attn = register_module("c_attn", gpt_linear(embed_dim, 3 * embed_dim, 0.02, options));
  c_proj = register_module("c_proj", gpt_linear(embed_dim, embed_dim, residual_std(options), options));
  attn_dropout = register_module("attn_dropout", std::make_shared<Dropout>(options.dropout, options.generator));
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(options.dropout, options.generator));
}

Tensor CausalSelfAttention::forward(const Tensor& input) {
  EMBER_CHECK(input.dim() == 3 && input.size(2) == embed_dim,
              "CausalSelfAttention: input must be [B, T, {}], got {}", embed_dim, input.shape().str());
  int64_t batch = input.size(0), length = input.size(1), head_dim = embed_dim / num_heads;
  std::vector<Tensor> qkv = split((*c_attn)(input), embed_dim, 2);  // 3 x [B, T, C], views
  // [B, T, C] -> [B, T, H, hd] -> [B, H, T, hd], views of the c_attn output.
  auto heads = [&](const Tensor& t) { return t.view({batch, length, num_heads, head_dim}).transpose(1, 2); };
  // attn_dropout is registered for nanoGPT's names; its rate applies inside the attention, as there.
  Tensor y = functional::scaled_dot_product_attention(
      heads(qkv[0]), heads(qkv[1]), heads(qkv[2]),
      {.dropout_p = is_training() ? dropout : 0.0, .is_causal = true, .generator = generator});
  y = y.transpose(1, 2).reshape({batch, length, embed_dim});  // re-assemble the heads: one copy
  return (*resid_dropout)((*c_proj)(y));
}

MLP::MLP(const TransformerBlockOptions& options) {
  EMBER_CHECK(options.mlp_ratio >= 1, "TransformerBlockOptions: mlp_ratio must be at least 1, got {}", options.mlp_ratio);
  int64_t hidden = options.mlp_ratio * options.embed_dim;
  c_fc = register_module("c_fc", gpt_linear(options.embed_dim, hidden, 0.02, options));
  gelu = register_module("gelu", std::make_shared<GELU>());
  c_proj = register_module("c_proj", gpt_linear(hidden, options.embed_dim, residual_std(options), options));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout, options.generator));
}

Tensor MLP::forward(const Tensor& input) {
  return (*dropout)((*c_proj)((*gelu)((*c_fc)(input))));
}

TransformerBlock::TransformerBlock(const TransformerBlockOptions& options) {
  LayerNormOptions norm{.bias = options.bias, .dtype = options.dtype};
  ln_1 = register_module("ln_1", std::make_shared<LayerNorm>(options.embed_dim, norm));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(options));
  ln_2 = register_module("ln_2", std::make_shared<LayerNorm>(options.embed_dim, norm));
  mlp = register_module("mlp", std::make_shared<MLP>(options));
}

Tensor TransformerBlock::forward(const Tensor& input) {
  Tensor x = input + (*attn)((*ln_1)(input));
  return x + (*mlp)((*ln_2)(x));
}

}  // namespace ember::nn
