// The kernel interface of fused attention (flash-attention style): entry point
// core/ops/attention.cpp; kernels kernels/cpu/attention.cpp (causal or not,
// masks, any lengths and head dims; f32, bf16, f64) and kernels/cuda/attention.cu
// (causal only, equal lengths, head_dim 64 or 128; f16, bf16), each of which
// never materialises the [query_length, key_length] scores.
// Tests: tests/core/test_attention.cpp, tests/cuda/test_cuda_attention.cpp.
#pragma once

#include <cstdint>

#include "core/dispatch.h"
#include "core/grad_hook.h"

namespace ember {

// A mask on the scores besides causality: none, boolean (false = the key is
// masked out) or additive (added to the scaled scores).
enum class AttentionMaskKind : uint8_t { none, boolean, additive };

// Where one operand's rows lie: row i of head h starts at element
// head_offsets[h] + i * row_stride of its data, and a row's elements are
// adjacent. The CPU kernels read and write every operand through its layout,
// so a head-split view (a [B, T, H, D] tensor seen as [B, H, T, D]) needs no
// copy of the whole tensor (Note [Attention on strided heads], core/ops/attention.cpp). The CUDA
// kernels ignore the layouts: their operands are contiguous.
struct AttentionLayout {
  const int64_t* head_offsets = nullptr;
  int64_t row_stride = 0;
};

// q: [heads, query_length, head_dim], k: [heads, key_length, head_dim],
// v: [heads, key_length, value_dim], out: [heads, query_length, value_dim],
// all of the key dtype (heads is batch x heads), placed as their layouts say
// (contiguous on CUDA). logsumexp:
// [2, heads, query_length] of the accumulation dtype (f64 for f64 operands,
// f32 otherwise), the row statistics the backward recomputes the
// probabilities from, P = exp(score - shift) / exp(log_sum): plane 0 the
// shift (the row's max score; -inf for a row whose keys are all masked out,
// whose output is 0), plane 1 log_sum (the log of the row's sum of
// exp(score - shift)). Two numbers, not their sum: with a finite mask as
// large as Hugging Face's finfo.min on every key of a row, max + log(sum)
// rounds back to the max, and the probabilities came out n times too large.
// (CUDA's causal kernel, which takes no mask, writes its logsumexp as the
// shift and 0 as log_sum.)
// Causal: row i attends to keys 0..i (aligned to the start).
// The mask of head h, row i, key j is mask[mask_head_offsets[h] +
// i * mask_row_stride + j * mask_col_stride]: bool, or of the accumulation
// dtype when additive. Broadcast dims have stride 0, so a broadcast mask is
// read in place, never expanded.
struct AttentionProblem {
  int64_t heads = 0, query_length = 0, key_length = 0, head_dim = 0, value_dim = 0;
  double scale = 1;
  bool causal = false;
  AttentionMaskKind mask_kind = AttentionMaskKind::none;
  const void* mask = nullptr;
  const int64_t* mask_head_offsets = nullptr;
  int64_t mask_row_stride = 0, mask_col_stride = 0;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  void* logsumexp = nullptr;
  AttentionLayout q_layout, k_layout, v_layout, out_layout;
};

// The gradients of q, k and v from grad_out, recomputing the probabilities;
// delta: [heads, query_length] scratch of the accumulation dtype for the rows'
// sum(grad_out * out). A fully masked row has zero gradients. grad_out and
// the gradients have the layouts given here (contiguous on CUDA); delta is
// contiguous.
struct AttentionBackwardProblem {
  AttentionProblem forward;  // with out and logsumexp read
  const void* grad_out = nullptr;
  void* grad_q = nullptr;
  void* grad_k = nullptr;
  void* grad_v = nullptr;
  void* delta = nullptr;
  AttentionLayout grad_out_layout, grad_q_layout, grad_k_layout, grad_v_layout;
};

extern Op<void(const AttentionProblem&)> attention_op;
extern Op<void(const AttentionBackwardProblem&)> attention_backward_op;

// Gradient slot (autograd/functions/attention.cpp); params: AttentionParams.
struct AttentionOptions;
extern GradSlot attention_grad;
struct AttentionParams {
  const AttentionOptions& options;
  const Tensor& out;
  const Tensor& logsumexp;
};

}  // namespace ember
