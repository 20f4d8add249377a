// Entry points of attention (core/ops/attention.h): validate, then either
// flatten the leading dims into heads, describe every operand and the mask in
// place (Note [Attention on strided heads]; broadcast dims at stride 0) and
// dispatch to the fused kernel, or, where no fused kernel serves, compose
// differentiable core ops.
// Tests: tests/core/test_attention.cpp, tests/cuda/test_cuda_attention.cpp.
#include "core/ops/attention.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/ops/attention_kernels.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/linalg.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"

namespace ember {

Op<void(const AttentionProblem&)> attention_op("attention");
Op<void(const AttentionBackwardProblem&)> attention_backward_op("attention_backward");
GradSlot attention_grad("attention");

namespace {

Shape leading_shape(const Tensor& t) {
  Shape shape = t.shape();
  shape.resize(int(t.dim()) - 2);
  return shape;
}

void check_operands(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionOptions& options) {
  EMBER_CHECK(query.dim() >= 2 && key.dim() == query.dim() && value.dim() == query.dim() &&
                  leading_shape(key) == leading_shape(query) && leading_shape(value) == leading_shape(query) &&
                  key.size(-1) == query.size(-1) && value.size(-2) == key.size(-2),
              "attention: query {}, key {} and value {} must be [..., L, E], [..., S, E] and [..., S, Ev] with the "
              "same leading dims",
              query.shape(), key.shape(), value.shape());
  EMBER_CHECK(query.dtype() == key.dtype() && query.dtype() == value.dtype(),
              "attention: query, key and value have dtypes {}, {}, {}", query.dtype(), key.dtype(), value.dtype());
  EMBER_CHECK(query.device() == key.device() && query.device() == value.device(),
              "attention: query, key and value are on {}, {}, {}", query.device(), key.device(), value.device());
  EMBER_CHECK(is_floating(query.dtype()), "attention: expected floating query, key and value, got {}", query.dtype());
  if (options.mask.defined())
    EMBER_CHECK(options.mask.device() == query.device() &&
                    (options.mask.dtype() == DType::boolean || is_floating(options.mask.dtype())),
                "attention: the mask must be bool or floating on the query's device {}, got {} on {}",
                query.device(), options.mask.dtype(), options.mask.device());
}

// The scores' shape [..., L, S].
Shape scores_shape(const Tensor& query, const Tensor& key) {
  Shape shape = leading_shape(query);
  shape.push_back(query.size(-2));
  shape.push_back(key.size(-2));
  return shape;
}

// Whether `mask` broadcasts to `target` without widening it.
bool broadcasts_to(const Shape& mask, const Shape& target) {
  if (mask.size() > target.size()) return false;
  for (size_t d = 1; d <= mask.size(); ++d)
    if (mask[mask.size() - d] != 1 && mask[mask.size() - d] != target[target.size() - d]) return false;
  return true;
}

// softmax(q k^T scale + mask) v from matmul, masked_fill and softmax, whose
// nodes carry the gradient (and any higher one). It materialises the
// [..., L, S] scores, which the fused kernel avoids.
Tensor composed_attention(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionOptions& options) {
  constexpr double minus_infinity = -std::numeric_limits<double>::infinity();
  Tensor scores = matmul(query * options.scale, key.transpose(-2, -1));  // [..., L, E] x [..., E, S] -> [..., L, S]
  if (options.causal) {
    Tensor future = triu(ones({query.size(-2), key.size(-2)}, {.dtype = DType::boolean, .device = query.device()}), 1);
    scores = masked_fill(scores, future, minus_infinity);
  }
  if (options.mask.defined()) {
    scores = options.mask.dtype() == DType::boolean ? masked_fill(scores, logical_not(options.mask), minus_infinity)
                                                    : scores + options.mask;
  }
  return matmul(softmax(scores, -1), value);  // [..., L, S] x [..., S, Ev] -> [..., L, Ev]
}

// Note [Attention on strided heads]: a transformer splits its projections
// into heads by a view, [B, T, H * D] -> [B, T, H, D] -> transpose(1, 2), and
// merges them back by transposing and reshaping the output. On the CPU the
// fused kernel reads each operand where it lies (AttentionLayout: each head's
// rows at its own offset and row stride, a row's elements adjacent; a task
// gathers the rows its tile products need into its scratch, Note [Gathering
// strided heads] in kernels/cpu/attention.cpp) instead of a contiguous copy
// of the whole tensor, and writes the output and the gradients in the order
// of the query's, key's and value's dims (empty_in_order_of): for a head-split
// query the output is [B, T, H, Ev] in memory, whose merge is a view, and the
// gradients of a head-split q, k and v come back the same way, so the views'
// backward copies nothing either. PyTorch's CPU SDPA does the same. In the GPT
// bench this removed 44 copies of [B, T, C] a step (bench/RESULTS.md).

// t as the fused kernel reads it: t itself on the CPU when a row's elements
// are adjacent, else a contiguous copy; always contiguous on a GPU, whose
// kernels take no layouts.
Tensor kernel_operand(const Tensor& t) {
  if (t.device().is_cpu() && (t.stride(-1) == 1 || t.size(-1) == 1)) return t;
  return contiguous(t);
}

// An uninitialised tensor of `shape` whose dims lie in memory in the order of
// `like`'s (like's leading dims sorted by decreasing stride, the last dim
// last, contiguous in that order); contiguous on a GPU.
Tensor empty_in_order_of(const Shape& shape, const Tensor& like) {
  const int ndim = int(shape.ndim());
  if (!like.device().is_cpu()) return make_tensor(shape, like.dtype(), like.device());
  std::vector<int> order(static_cast<size_t>(ndim));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end() - 1,
                   [&](int a, int b) { return like.stride(a) > like.stride(b); });
  Shape stored, inverse = shape;
  for (int i = 0; i < ndim; ++i) {
    stored.push_back(shape[order[size_t(i)]]);
    inverse[order[size_t(i)]] = i;
  }
  return make_tensor(stored, like.dtype(), like.device()).permute(inverse);
}

// The element offset of each head (the leading dims flattened, row-major) in
// `t`, whose leading dims are `leading`.
Tensor head_offsets(const Tensor& t, const Shape& leading) {
  const int64_t heads = leading.numel();
  Tensor offsets = make_tensor({heads}, DType::i64, kCPU);
  int64_t* data = offsets.data_ptr<int64_t>();
  for (int64_t head = 0; head < heads; ++head) {
    int64_t offset = 0, rest = head;
    for (int d = leading.ndim() - 1; d >= 0; --d) {
      offset += (rest % leading[d]) * t.stride(d);
      rest /= leading[d];
    }
    data[head] = offset;
  }
  return offsets;
}

// The layout of a kernel operand; `keep` holds the offsets it points into.
AttentionLayout layout_of(const Tensor& t, Tensor& keep) {
  keep = head_offsets(t, leading_shape(t));
  return {.head_offsets = keep.data_ptr<int64_t>(), .row_stride = t.stride(-2)};
}

// The problem's dims, options and mask; `keep` holds the tensors the mask
// fields point into, and the operands' head offsets.
struct ProblemStorage {
  Tensor values, head_offsets;
  Tensor operand_offsets[8];  // q, k, v, out; in the backward also grad_out, grad_q, grad_k, grad_v
};
AttentionProblem describe(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionOptions& options,
                          ProblemStorage& keep) {
  AttentionProblem p;
  p.query_length = query.size(-2), p.key_length = key.size(-2);
  p.head_dim = query.size(-1), p.value_dim = value.size(-1);
  p.heads = leading_shape(query).numel();
  p.scale = options.scale, p.causal = options.causal;
  if (!options.mask.defined()) return p;
  const bool boolean = options.mask.dtype() == DType::boolean;
  p.mask_kind = boolean ? AttentionMaskKind::boolean : AttentionMaskKind::additive;
  Tensor mask = boolean ? options.mask : to(options.mask, accumulation_dtype(query.dtype()));
  keep.values = expand(mask, scores_shape(query, key));  // a view: broadcast dims get stride 0
  keep.head_offsets = head_offsets(keep.values, leading_shape(query));
  const int64_t* offsets = keep.head_offsets.data_ptr<int64_t>();
  p.mask = keep.values.data_ptr(), p.mask_head_offsets = offsets;
  p.mask_row_stride = keep.values.stride(-2), p.mask_col_stride = keep.values.stride(-1);
  return p;
}

}  // namespace

bool fused_attention_supported(const Tensor& query, const Tensor& key, const Tensor& value,
                               const AttentionOptions& options) {
  const DType dtype = query.dtype();
  const Device device = query.device();
  if (query.dim() < 2 || key.dim() != query.dim() || value.dim() != query.dim() ||
      leading_shape(key) != leading_shape(query) || leading_shape(value) != leading_shape(query) ||
      key.size(-1) != query.size(-1) || value.size(-2) != key.size(-2) || query.size(-1) == 0 ||
      value.size(-1) == 0 || key.dtype() != dtype || value.dtype() != dtype || key.device() != device ||
      value.device() != device || !is_floating(dtype) || attention_op.kind(device.type, dtype) == KernelKind::none)
    return false;
  if (device.is_cuda()) {
    return options.causal && !options.mask.defined() && query.size(-2) == key.size(-2) &&
           value.size(-1) == query.size(-1) && (query.size(-1) == 64 || query.size(-1) == 128);
  }
  // The reference backend has no fused kernel: its runs compose.
  if (reference_mode()) return false;
  if (!options.mask.defined()) return true;
  const Tensor& mask = options.mask;
  return mask.device() == device && (mask.dtype() == DType::boolean || is_floating(mask.dtype())) &&
         !mask.requires_grad() && broadcasts_to(mask.shape(), scores_shape(query, key));
}

Tensor attention(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionOptions& options) {
  check_operands(query, key, value, options);
  if (!fused_attention_supported(query, key, value, options)) return composed_attention(query, key, value, options);
  Tensor q = kernel_operand(query), k = kernel_operand(key), v = kernel_operand(value);
  Shape out_shape = leading_shape(query);
  out_shape.push_back(query.size(-2));
  out_shape.push_back(value.size(-1));
  Tensor result = empty_in_order_of(out_shape, q);  // Note [Attention on strided heads]
  // Each row's logsumexp as two planes, shift and log_sum (attention_kernels.h).
  Tensor logsumexp = make_tensor({2, leading_shape(query).numel(), query.size(-2)}, accumulation_dtype(q.dtype()),
                                 q.device());
  if (result.numel() > 0) {
    ProblemStorage keep;
    AttentionProblem p = describe(query, key, value, options, keep);
    p.q = q.data_ptr(), p.k = k.data_ptr(), p.v = v.data_ptr(), p.out = result.data_ptr();
    p.logsumexp = logsumexp.data_ptr();
    p.q_layout = layout_of(q, keep.operand_offsets[0]), p.k_layout = layout_of(k, keep.operand_offsets[1]);
    p.v_layout = layout_of(v, keep.operand_offsets[2]), p.out_layout = layout_of(result, keep.operand_offsets[3]);
    attention_op(q.device().type, q.dtype(), p);
  }
  if (should_record({&query, &key, &value})) [[unlikely]] {
    // The backward reads the output: saved detached, so the node does not own itself.
    Tensor saved_out = result.detach();
    AttentionParams params{options, saved_out, logsumexp};
    record_grad(attention_grad, {&query, &key, &value}, {&result}, &params);
  }
  return result;
}

AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& query, const Tensor& key, const Tensor& value,
                                  const Tensor& out, const Tensor& logsumexp, const AttentionOptions& options) {
  check_operands(query, key, value, options);
  Tensor q = kernel_operand(query), k = kernel_operand(key), v = kernel_operand(value), o = kernel_operand(out);
  Tensor g = kernel_operand(to(grad_out, query.dtype()));
  // The gradients in their inputs' order: Note [Attention on strided heads].
  Tensor grad_q = empty_in_order_of(q.shape(), q), grad_k = empty_in_order_of(k.shape(), k);
  Tensor grad_v = empty_in_order_of(v.shape(), v);
  Tensor delta = make_tensor({logsumexp.size(1), logsumexp.size(2)}, logsumexp.dtype(), q.device());
  if (o.numel() > 0 || k.numel() > 0) {
    ProblemStorage keep;
    AttentionBackwardProblem p;
    p.forward = describe(query, key, value, options, keep);
    p.forward.q = q.data_ptr(), p.forward.k = k.data_ptr(), p.forward.v = v.data_ptr();
    p.forward.out = o.data_ptr(), p.forward.logsumexp = logsumexp.data_ptr();
    p.forward.q_layout = layout_of(q, keep.operand_offsets[0]), p.forward.k_layout = layout_of(k, keep.operand_offsets[1]);
    p.forward.v_layout = layout_of(v, keep.operand_offsets[2]);
    p.forward.out_layout = layout_of(o, keep.operand_offsets[3]);
    p.grad_out = g.data_ptr(), p.grad_q = grad_q.data_ptr(), p.grad_k = grad_k.data_ptr();
    p.grad_v = grad_v.data_ptr(), p.delta = delta.data_ptr();
    p.grad_out_layout = layout_of(g, keep.operand_offsets[4]), p.grad_q_layout = layout_of(grad_q, keep.operand_offsets[5]);
    p.grad_k_layout = layout_of(grad_k, keep.operand_offsets[6]);
    p.grad_v_layout = layout_of(grad_v, keep.operand_offsets[7]);
    attention_backward_op(q.device().type, q.dtype(), p);
  }
  return {grad_q, grad_k, grad_v};
}

}  // namespace ember
