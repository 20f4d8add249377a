// Entry points of causal attention (core/ops/attention.h): validate, then
// either flatten the leading dims into heads, make operands contiguous and
// dispatch to the fused kernel, or, where no fused kernel serves, compose
// differentiable core ops. Tests: tests/core/test_attention.cpp,
// tests/cuda/test_cuda_attention.cpp.
#include "core/ops/attention.h"

#include <limits>

#include "core/ops/attention_kernels.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/linalg.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"

namespace ember {

Op<void(const CausalAttentionProblem&)> causal_attention_op("causal_attention");
Op<void(const CausalAttentionBackwardProblem&)> causal_attention_backward_op("causal_attention_backward");
GradSlot causal_attention_grad("causal_attention");

namespace {

void check_operands(const Tensor& query, const Tensor& key, const Tensor& value) {
  EMBER_CHECK(query.dim() >= 2 && query.shape() == key.shape() && query.shape() == value.shape(),
              "causal_attention: query {}, key {} and value {} must share one [..., length, head_dim] shape",
              query.shape(), key.shape(), value.shape());
  EMBER_CHECK(query.dtype() == key.dtype() && query.dtype() == value.dtype(),
              "causal_attention: query, key and value have dtypes {}, {}, {}", query.dtype(), key.dtype(),
              value.dtype());
  EMBER_CHECK(query.device() == key.device() && query.device() == value.device(),
              "causal_attention: query, key and value are on {}, {}, {}", query.device(), key.device(),
              value.device());
  EMBER_CHECK(is_floating(query.dtype()), "causal_attention: expected floating query, key and value, got {}",
              query.dtype());
}

// softmax(q k^T scale, keys after the query masked) v from matmul, masked_fill
// and softmax, whose nodes carry the gradient (and any higher one). It
// materialises the [..., length, length] scores, which the fused kernel avoids.
Tensor composed_causal_attention(const Tensor& query, const Tensor& key, const Tensor& value, double scale) {
  const int64_t length = query.size(-2);
  Tensor scores = matmul(query * scale, key.transpose(-2, -1));  // [..., L, D] x [..., D, L] -> [..., L, L]
  Tensor future = triu(ones({length, length}, {.dtype = DType::boolean, .device = query.device()}), 1);
  Tensor weights = softmax(masked_fill(scores, future, -std::numeric_limits<double>::infinity()), -1);
  return matmul(weights, value);  // [..., L, L] x [..., L, D] -> [..., L, D]
}

// [..., length, head_dim] as contiguous [heads, length, head_dim].
Tensor as_heads(const Tensor& t) {
  return contiguous(t).reshape({-1, t.size(-2), t.size(-1)});
}

}  // namespace

bool fused_causal_attention_supported(const Tensor& query, const Tensor& key, const Tensor& value) {
  const DType dtype = query.dtype();
  return query.device().is_cuda() && (dtype == DType::f16 || dtype == DType::bf16) && query.dim() >= 2 &&
         query.shape() == key.shape() && query.shape() == value.shape() && key.dtype() == dtype &&
         value.dtype() == dtype && key.device() == query.device() && value.device() == query.device() &&
         (query.size(-1) == 64 || query.size(-1) == 128) &&
         causal_attention_op.kind(query.device().type, dtype) != KernelKind::none;
}

Tensor causal_attention(const Tensor& query, const Tensor& key, const Tensor& value, double scale) {
  check_operands(query, key, value);
  if (!fused_causal_attention_supported(query, key, value)) return composed_causal_attention(query, key, value, scale);
  Tensor q = as_heads(query), k = as_heads(key), v = as_heads(value);
  Tensor out = make_tensor(q.shape(), q.dtype(), q.device());
  Tensor logsumexp = make_tensor({q.size(0), q.size(1)}, DType::f32, q.device());
  if (q.numel() > 0) {
    CausalAttentionProblem p;
    p.heads = q.size(0), p.length = q.size(1), p.head_dim = q.size(2), p.scale = scale;
    p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr(), p.out = out.data_ptr();
    p.logsumexp = logsumexp.data_ptr();
    causal_attention_op(q.device().type, q.dtype(), p);
  }
  Tensor result = out.reshape(query.shape());
  if (should_record({&query, &key, &value})) [[unlikely]] {
    // The backward reads the output: saved detached, so the node does not own itself.
    Tensor saved_out = result.detach();
    CausalAttentionParams params{scale, saved_out, logsumexp};
    record_grad(causal_attention_grad, {&query, &key, &value}, {&result}, &params);
  }
  return result;
}

CausalAttentionGrads causal_attention_backward(const Tensor& grad_out, const Tensor& query, const Tensor& key,
                                               const Tensor& value, const Tensor& out, const Tensor& logsumexp,
                                               double scale) {
  check_operands(query, key, value);
  Tensor q = as_heads(query), k = as_heads(key), v = as_heads(value), o = as_heads(out);
  Tensor g = as_heads(to(grad_out, query.dtype()));
  Tensor grad_q = make_tensor(q.shape(), q.dtype(), q.device());
  Tensor grad_k = make_tensor(q.shape(), q.dtype(), q.device());
  Tensor grad_v = make_tensor(q.shape(), q.dtype(), q.device());
  Tensor delta = make_tensor({q.size(0), q.size(1)}, DType::f32, q.device());
  if (q.numel() > 0) {
    CausalAttentionBackwardProblem p;
    p.forward.heads = q.size(0), p.forward.length = q.size(1), p.forward.head_dim = q.size(2);
    p.forward.scale = scale;
    p.forward.q = q.data_ptr(), p.forward.k = k.data_ptr(), p.forward.v = v.data_ptr();
    p.forward.out = o.data_ptr(), p.forward.logsumexp = logsumexp.data_ptr();
    p.grad_out = g.data_ptr(), p.grad_q = grad_q.data_ptr(), p.grad_k = grad_k.data_ptr();
    p.grad_v = grad_v.data_ptr(), p.delta = delta.data_ptr();
    causal_attention_backward_op(q.device().type, q.dtype(), p);
  }
  return {grad_q.reshape(query.shape()), grad_k.reshape(query.shape()), grad_v.reshape(query.shape())};
}

}  // namespace ember
