// Attention, softmax(q k^T scale + mask) v: where fused_attention_supported
// says so, in one kernel that never materialises the [query_length,
// key_length] scores (with its backward); elsewhere (f16 on the CPU, other
// dims on a GPU, a mask that needs a gradient) composed of matmul, masked_fill
// and softmax. scaled_dot_product_attention (nn/functional/attention.h) calls
// it when no dropout is asked for. Kernels: core/ops/attention_kernels.h.
#pragma once

#include "core/tensor.h"

namespace ember {

struct AttentionOptions {
  double scale = 1;
  bool causal = false;  // query i attends to keys j <= i (keys aligned to the start)
  // Broadcastable to [..., query_length, key_length]: bool (true = attend,
  // PyTorch's SDPA convention) or floating, added to the scaled scores.
  Tensor mask{};
};

// Whether attention runs these operands on the fused kernel. On the CPU: f32,
// bf16 or f64, any lengths and dims, causal or not, a mask that broadcasts to
// the scores without widening them and needs no gradient. On a GPU: f16 or
// bf16, causal without a mask, equal query and key lengths, head_dim = value
// dim = 64 or 128.
bool fused_attention_supported(const Tensor& query, const Tensor& key, const Tensor& value,
                               const AttentionOptions& options);

// query [..., L, E], key [..., S, E], value [..., S, Ev] -> [..., L, Ev]; one
// floating dtype and device, the same leading dims. A row whose keys are all
// masked out gives 0 on the fused path (PyTorch 2.5's convention) and NaN on
// the composite one (softmax of -inf everywhere).
Tensor attention(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionOptions& options);

// The fused backward, for the autograd layer: grads of (query, key, value).
struct AttentionGrads {
  Tensor query, key, value;
};
AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value,
                                  const Tensor& out, const Tensor& logsumexp, const AttentionOptions& options);

}  // namespace ember
