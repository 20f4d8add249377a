// The kernel interface of fused causal attention (flash-attention style):
// entry point core/ops/attention.cpp, kernels kernels/cuda/attention.cu (a CUDA
// op only: on the CPU, scaled_dot_product_attention composes matmul and
// softmax). Tests: tests/cuda/test_cuda_attention.cpp.
#pragma once

#include <cstdint>

#include "core/dispatch.h"
#include "core/grad_hook.h"

namespace ember {

// q, k, v, out: contiguous [heads, length, head_dim] of the key dtype (heads
// is batch x heads); logsumexp: f32 [heads, length], the row statistics the
// backward recomputes the probabilities from. Row i attends to keys 0..i.
struct CausalAttentionProblem {
  int64_t heads = 0, length = 0, head_dim = 0;
  double scale = 1;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  void* logsumexp = nullptr;
};

// The gradients of q, k and v from grad_out, recomputing the probabilities;
// delta: f32 [heads, length] scratch for the rows' sum(grad_out * out).
struct CausalAttentionBackwardProblem {
  CausalAttentionProblem forward;  // with out and logsumexp read
  const void* grad_out = nullptr;
  void* grad_q = nullptr;
  void* grad_k = nullptr;
  void* grad_v = nullptr;
  void* delta = nullptr;
};

extern Op<void(const CausalAttentionProblem&)> causal_attention_op;
extern Op<void(const CausalAttentionBackwardProblem&)> causal_attention_backward_op;

// Gradient slot (autograd/functions/attention.cpp); params: CausalAttentionParams.
extern GradSlot causal_attention_grad;
struct CausalAttentionParams {
  double scale;
  const Tensor& out;
  const Tensor& logsumexp;
};

}  // namespace ember
