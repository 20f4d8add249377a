// nn::functional::scaled_dot_product_attention (see attention.h).
#include "nn/functional/attention.h"

#include <cmath>
#include <limits>

#include "core/autocast_ops.h"
#include "core/error.h"
#include "core/ops/attention.h"
#include "core/ops/creation.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/linalg.h"
#include "core/ops/reduction.h"

namespace ember::nn::functional {

Tensor attention_weights(const Tensor& query, const Tensor& key, const ScaledDotProductAttentionOptions& options) {
  EMBER_CHECK(query.dim() >= 2 && key.dim() >= 2 && query.size(-1) == key.size(-1),
              "scaled_dot_product_attention: query {} and key {} must be [..., L, E] and [..., S, E]",
              query.shape().str(), key.shape().str());
  EMBER_CHECK(!(options.is_causal && options.attn_mask.defined()),
              "scaled_dot_product_attention: pass either attn_mask or is_causal, not both");
  // An integer mask would be added to the scores as 0/1 and mask nothing.
  EMBER_CHECK(!options.attn_mask.defined() || options.attn_mask.dtype() == DType::boolean ||
                  is_floating(options.attn_mask.dtype()),
              "scaled_dot_product_attention: attn_mask must be bool (true = takes part) or floating (added to the "
              "scores), got {}; for a mask of 1 = keep, pass ne(mask, 0)",
              options.attn_mask.dtype());
  int64_t target_length = query.size(-2);
  int64_t source_length = key.size(-2);
  double scale = options.scale.value_or(1.0 / std::sqrt(double(query.size(-1))));
  // Scaling the query ([L, E]) is cheaper than scaling the scores ([L, S]) when E < S.
  Tensor scores = matmul(query * scale, key.transpose(-2, -1));  // [..., L, E] x [..., E, S] -> [..., L, S]
  constexpr double minus_infinity = -std::numeric_limits<double>::infinity();
  if (options.is_causal) {
    Tensor future = triu(ones({target_length, source_length}, {.dtype = DType::boolean, .device = scores.device()}), 1);
    scores = masked_fill(scores, future, minus_infinity);
  } else if (options.attn_mask.defined()) {
    if (options.attn_mask.dtype() == DType::boolean) {
      scores = masked_fill(scores, logical_not(options.attn_mask), minus_infinity);
    } else {
      // In the scores' dtype, as the fused kernel adds it: promoting the
      // scores to an f32 mask's dtype made the bf16 product below fail only
      // on this path (dropout on, a widening mask).
      scores = scores + options.attn_mask.to(scores.dtype());
    }
    // Note [Fully masked rows]: a row whose keys are all masked out (-inf)
    // gets zero weights, as in the fused kernel and PyTorch 2.5's SDPA
    // (_safe_softmax). softmax alone gives NaN there, and its gradient would
    // carry the NaN into every query and key. The row is softmaxed as zeros
    // (finite, so the backward stays finite) and then zeroed.
    if (source_length > 0) {
      Tensor empty = eq(amax(scores, {-1}, /*keepdim=*/true), minus_infinity);  // [..., L, 1]
      return masked_fill(softmax(masked_fill(scores, empty, 0.0), -1), empty, 0.0);
    }
  }
  return softmax(scores, -1);
}

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const ScaledDotProductAttentionOptions& options) {
  EMBER_CHECK(value.dim() >= 2 && value.size(-2) == key.size(-2),
              "scaled_dot_product_attention: value {} must be [..., S, Ev] with S = {} as the key's",
              value.shape().str(), key.size(-2));
  // A lower-precision op under autocast, as in PyTorch's CPU and CUDA lists,
  // a floating mask included: on every path. Before, only the composite's
  // matmuls were, so the result was bf16 with dropout and f32 without.
  constexpr AutocastKind kLower = AutocastKind::lower_precision;
  if (autocast_wants(kLower, {&query, &key, &value, &options.attn_mask})) [[unlikely]] {
    ScaledDotProductAttentionOptions cast = options;
    if (cast.attn_mask.defined()) cast.attn_mask = autocast_input(cast.attn_mask, kLower);
    return scaled_dot_product_attention(autocast_input(query, kLower), autocast_input(key, kLower),
                                        autocast_input(value, kLower), cast);
  }
  // After autocast, which makes them one dtype; else the composite's matmul
  // refused them, naming matmul.
  EMBER_CHECK(query.dtype() == key.dtype() && key.dtype() == value.dtype(),
              "scaled_dot_product_attention: expected query, key and value of one dtype, got {}, {} and {}",
              query.dtype(), key.dtype(), value.dtype());
  EMBER_CHECK(is_floating(query.dtype()), "scaled_dot_product_attention: expected floating point query, key and "
              "value, got {}", query.dtype());
  // Written so that NaN fails too: a negative or NaN p ran without dropout.
  EMBER_CHECK(options.dropout_p >= 0 && options.dropout_p <= 1,
              "scaled_dot_product_attention: dropout_p must be in [0, 1], got {}", options.dropout_p);
  // Their batch and head dims must broadcast (no grouped-query attention:
  // repeat the key and value heads first); checked here, else the
  // composite's matmul named itself.
  bool broadcasts = true;
  for (int64_t q = query.dim() - 3, k = key.dim() - 3; q >= 0 && k >= 0; --q, --k) {
    const int64_t a = query.size(q), b = key.size(k);
    broadcasts = broadcasts && (a == b || a == 1 || b == 1);
  }
  EMBER_CHECK(broadcasts,
              "scaled_dot_product_attention: the leading (batch, head) dims of query {} and key {} do not broadcast; "
              "for grouped-query attention repeat the key and value heads to the query's (repeat_interleave on dim "
              "-3) first",
              query.shape(), key.shape());
  if (options.dropout_p == 0) {
    EMBER_CHECK(!(options.is_causal && options.attn_mask.defined()),
                "scaled_dot_product_attention: pass either attn_mask or is_causal, not both");
    const AttentionOptions fused{.scale = options.scale.value_or(1.0 / std::sqrt(double(query.size(-1)))),
                                 .causal = options.is_causal,
                                 .mask = options.attn_mask};
    if (fused_attention_supported(query, key, value, fused)) return attention(query, key, value, fused);
  }
  Tensor weights = attention_weights(query, key, options);
  if (options.dropout_p > 0) weights = dropout(weights, options.dropout_p, true, options.generator);
  return matmul(weights, value);  // [..., L, S] x [..., S, Ev] -> [..., L, Ev]
}

}  // namespace ember::nn::functional
