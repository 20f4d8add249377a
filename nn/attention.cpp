// nn::MultiheadAttention (see attention.h). The projections run on the
// inputs' own layout (one GEMM for self-attention), heads are split by views,
// and only the heads' merge before out_proj copies.
#include "nn/attention.h"

#include <limits>

#include "core/ops/creation.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/linalg.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"
#include "nn/functional/attention.h"
#include "nn/functional/linear.h"
#include "nn/init.h"

namespace ember::nn {

namespace {
int64_t checked_head_dim(int64_t embed_dim, int64_t num_heads) {
  EMBER_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0,
              "MultiheadAttention: embed_dim {} must be divisible by num_heads {}", embed_dim, num_heads);
  return embed_dim / num_heads;
}
}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, const MultiheadAttentionOptions& options)
    : embed_dim(embed_dim),
      num_heads(num_heads),
      head_dim(checked_head_dim(embed_dim, num_heads)),
      dropout(options.dropout),
      batch_first(options.batch_first),
      generator(options.generator),
      // Registration order as PyTorch's, so named_parameters and state_dict
      // list in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias.
      in_proj_weight(register_parameter("in_proj_weight", empty({3 * embed_dim, embed_dim}, {.dtype = options.dtype}))),
      in_proj_bias(register_parameter(
          "in_proj_bias", options.bias ? empty({3 * embed_dim}, {.dtype = options.dtype}) : Tensor())) {
  out_proj = register_module(
      "out_proj", std::make_shared<NonDynamicallyQuantizableLinear>(
                      embed_dim, embed_dim,
                      LinearOptions{.bias = options.bias, .dtype = options.dtype, .generator = options.generator}));
  reset_parameters(options.generator);
}

void MultiheadAttention::reset_parameters(Generator* init_generator) {
  init::xavier_uniform_(in_proj_weight, 1.0, init_generator);
  if (in_proj_bias.defined()) {
    init::zeros_(in_proj_bias);
    init::zeros_(out_proj->bias);
  }
}

namespace {

// A mask as an additive float tensor: bool true -> -inf (not allowed), false
// -> 0; a float mask is added as it is. An integer one (a Hugging Face
// attention_mask of 1 = keep) would be added as 0/1 and mask nothing, so it
// is refused, as PyTorch refuses it.
Tensor additive_mask(const Tensor& mask, DType dtype, const char* name) {
  EMBER_CHECK(mask.dtype() == DType::boolean || is_floating(mask.dtype()),
              "MultiheadAttention: {} must be bool (true = masked out) or floating (added to the scores), got {}; "
              "for a mask of 1 = keep, pass eq(mask, 0)",
              name, mask.dtype());
  if (mask.dtype() != DType::boolean) return mask.to(dtype);  // added in the scores' dtype on every path
  return masked_fill(zeros(mask.shape(), {.dtype = dtype, .device = mask.device()}), mask, -std::numeric_limits<double>::infinity());
}

}  // namespace

MultiheadAttentionOutput MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                     const MultiheadAttentionForwardOptions& options) {
  EMBER_CHECK((query.dim() == 3 || query.dim() == 2) && key.dim() == query.dim() && value.dim() == query.dim(),
              "MultiheadAttention: query, key and value must all be 3-d (batched) or 2-d (unbatched), got {}, {}, {}",
              query.shape().str(), key.shape().str(), value.shape().str());
  EMBER_CHECK(query.size(-1) == embed_dim && key.size(-1) == embed_dim && value.size(-1) == embed_dim,
              "MultiheadAttention: inputs must end in embed_dim {}, got {}, {}, {}", embed_dim, query.shape().str(),
              key.shape().str(), value.shape().str());
  bool batched = query.dim() == 3;
  // Unbatched inputs get a batch dim of 1 in the batch position of the layout.
  int64_t batch_dim = batch_first ? 0 : 1;
  auto with_batch = [&](const Tensor& t) { return batched ? t : t.unsqueeze(batch_dim); };
  Tensor q_input = with_batch(query), k_input = with_batch(key), v_input = with_batch(value);
  int64_t batch = q_input.size(batch_dim);
  int64_t target_length = q_input.size(1 - batch_dim);
  int64_t source_length = k_input.size(1 - batch_dim);
  EMBER_CHECK(k_input.size(batch_dim) == batch && v_input.size(batch_dim) == batch &&
                  v_input.size(1 - batch_dim) == source_length,
              "MultiheadAttention: key {} and value {} must match each other and the query's batch {}",
              key.shape().str(), value.shape().str(), batch);

  // Projections in the input layout ([L, N, E] or [N, L, E]); rows of in_proj are views.
  auto rows = [&](const Tensor& t, int64_t start, int64_t count) {
    return t.defined() ? t.narrow(0, start * embed_dim, count * embed_dim) : Tensor();
  };
  Tensor q, k, v;
  if (query.is_same(key) && key.is_same(value)) {
    std::vector<Tensor> qkv = chunk(functional::linear(q_input, in_proj_weight, in_proj_bias), 3, -1);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else if (key.is_same(value)) {
    q = functional::linear(q_input, rows(in_proj_weight, 0, 1), rows(in_proj_bias, 0, 1));
    std::vector<Tensor> kv = chunk(functional::linear(k_input, rows(in_proj_weight, 1, 2), rows(in_proj_bias, 1, 2)), 2, -1);
    k = kv[0], v = kv[1];
  } else {
    q = functional::linear(q_input, rows(in_proj_weight, 0, 1), rows(in_proj_bias, 0, 1));
    k = functional::linear(k_input, rows(in_proj_weight, 1, 1), rows(in_proj_bias, 1, 1));
    v = functional::linear(v_input, rows(in_proj_weight, 2, 1), rows(in_proj_bias, 2, 1));
  }
  // [A, B, E] -> [A, B, H, hd] -> [N, H, length, hd], A/B being (length, N) or (N, length).
  Dims to_heads = batch_first ? Dims{0, 2, 1, 3} : Dims{1, 2, 0, 3};
  auto split_heads = [&](const Tensor& t) {
    return t.reshape({t.size(0), t.size(1), num_heads, head_dim}).permute(to_heads);
  };
  q = split_heads(q), k = split_heads(k), v = split_heads(v);

  // Both masks as one additive float mask broadcastable to [N, H, L, S].
  Tensor mask;
  if (options.attn_mask.defined()) {
    const Tensor& attn_mask = options.attn_mask;
    bool shared = attn_mask.dim() == 2 && attn_mask.size(0) == target_length && attn_mask.size(1) == source_length;
    bool per_head = attn_mask.dim() == 3 && attn_mask.size(0) == batch * num_heads &&
                    attn_mask.size(1) == target_length && attn_mask.size(2) == source_length;
    EMBER_CHECK(shared || per_head, "MultiheadAttention: attn_mask of shape {} must be [{}, {}] or [{}, {}, {}]",
                attn_mask.shape().str(), target_length, source_length, batch * num_heads, target_length,
                source_length);
    mask = additive_mask(attn_mask, q.dtype(), "attn_mask");
    if (per_head) mask = mask.view({batch, num_heads, target_length, source_length});
  }
  if (options.key_padding_mask.defined()) {
    Tensor padding = batched ? options.key_padding_mask : options.key_padding_mask.unsqueeze(0);
    EMBER_CHECK(padding.dim() == 2 && padding.size(0) == batch && padding.size(1) == source_length,
                "MultiheadAttention: key_padding_mask of shape {} must be [{}, {}]",
                options.key_padding_mask.shape().str(), batch, source_length);
    Tensor padding_mask = additive_mask(padding, q.dtype(), "key_padding_mask").view({batch, 1, 1, source_length});
    mask = mask.defined() ? mask + padding_mask : padding_mask;
  }

  Tensor weights = functional::attention_weights(q, k, {.attn_mask = mask});  // [N, H, L, S]
  if (is_training() && dropout > 0) weights = ember::dropout(weights, dropout, true, generator);
  Tensor heads = matmul(weights, v);  // [N, H, L, S] x [N, H, S, hd] -> [N, H, L, hd]
  // Back to the input layout, heads merged: the one copy of the forward pass.
  Tensor merged = batch_first ? heads.permute({0, 2, 1, 3}).reshape({batch, target_length, embed_dim})
                              : heads.permute({2, 0, 1, 3}).reshape({target_length, batch, embed_dim});
  MultiheadAttentionOutput result{.output = out_proj->forward(merged), .weights = {}};
  if (options.need_weights) result.weights = options.average_attn_weights ? mean(weights, {1}) : weights;
  if (!batched) {
    result.output = result.output.squeeze(batch_dim);
    if (result.weights.defined()) result.weights = result.weights.squeeze(0);
  }
  return result;
}

}  // namespace ember::nn
