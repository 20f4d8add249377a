// Entry points of the indexing family: validate, compute the output shape and
// dtype as PyTorch does, then either compose views and copy_ (cat, stack,
// repeat, pad, split, chunk) or dispatch to the kernels declared in
// core/ops/indexing_kernels.h. Tests: tests/core/test_indexing.cpp.
#include "core/ops/indexing.h"

#include <algorithm>
#include <limits>

#include "core/ops/creation.h"
#include "core/ops/indexing_kernels.h"
#include "core/ops/views.h"
#include "core/scalar_fits.h"

namespace ember {

Op<void(const AlongDim&)> gather_op("gather"), scatter_add_op("scatter_add");
Op<void(const RowSelect&)> index_select_op("index_select"), embedding_op("embedding");
Op<void(const ElementwiseLoop&, const Scalar&)> masked_fill_op("masked_fill");
Op<void(const Tensor&, const Tensor&, int64_t)> tril_op("tril"), triu_op("triu");
Op<void(const Tensor&, const Tensor&)> one_hot_op("one_hot");
GradSlot cat_grad("cat"), index_select_grad("index_select"), embedding_grad("embedding"), gather_grad("gather"),
    scatter_add_grad("scatter_add"), masked_fill_grad("masked_fill"), tril_grad("tril"), triu_grad("triu"),
    repeat_grad("repeat"), pad_grad("pad"), split_grad("split");

void throw_index_out_of_range(std::string_view op, int64_t index, int64_t dim_size) {
  detail::throw_error(fmt::format("{}: index {} is out of bounds for dimension with size {}", op, index, dim_size));
}

namespace {

void check_defined(const Tensor& t, std::string_view op, std::string_view what) {
  EMBER_CHECK(t.defined(), "{}: {} is undefined", op, what);
}

void check_index(const Tensor& index, const Tensor& t, std::string_view op) {
  check_defined(index, op, "index");
  EMBER_CHECK(index.dtype() == DType::i32 || index.dtype() == DType::i64,
              "{}: index must have dtype int32 or int64, got {}", op, index.dtype());
  EMBER_CHECK(index.device() == t.device(), "{}: index is on {} but the input is on {}", op, index.device(),
              t.device());
}

int64_t product(const Shape& shape, int begin, int end) {
  int64_t n = 1;
  for (int d = begin; d < end; ++d) n *= shape[d];
  return n;
}

// `t` without its dim `d`, keeping its strides: the slice at coordinate 0.
Tensor slice_at_zero(const Tensor& t, const Shape& shape, int d) {
  Shape slice_shape = shape, slice_strides = t.strides();
  slice_shape.erase(d);
  slice_strides.erase(d);
  return Tensor::make(t.storage(), t.dtype(), slice_shape, slice_strides, t.offset());
}

// The AlongDim of (out, index, other), each walked with the index's shape.
AlongDim along_dim(const Tensor& out, const Tensor& index, const Tensor& other, int d, int64_t dim_size) {
  const Shape& shape = index.shape();
  Tensor out_slice = slice_at_zero(out, shape, d), index_slice = slice_at_zero(index, shape, d),
         other_slice = slice_at_zero(other, shape, d);
  AlongDim along;
  along.slices = ElementwiseLoop::make({&out_slice, &index_slice, &other_slice});
  along.length = shape[d];
  along.dim_strides[0] = out.strides()[d];
  along.dim_strides[1] = index.strides()[d];
  along.dim_strides[2] = other.strides()[d];
  along.dim_size = dim_size;
  return along;
}

// A 0-d tensor as 1-d of one element (gather and scatter_add treat them alike).
Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

// ceil(n / d) for n >= 0 and d > 0, without the n + d - 1 that overflows for d near the int64 limit.
int64_t ceil_div(int64_t n, int64_t d) { return n / d + (n % d != 0); }

}  // namespace

static Tensor compute_cat(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  DType dtype = DType::boolean;
  const Tensor* first = nullptr;  // the first tensor that takes part in the shape checks
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    EMBER_CHECK(t.defined(), "cat: tensor at position {} is undefined", i);
    EMBER_CHECK(t.dim() > 0, "cat: zero-dimensional tensor (at position {}) cannot be concatenated", i);
    EMBER_CHECK(t.device() == tensors[0].device(),
                "cat: tensor at position {} is on {} but tensor at position 0 is on {}", i, t.device(),
                tensors[0].device());
    dtype = i == 0 ? t.dtype() : promote_types(dtype, t.dtype());
    // PyTorch's legacy rule: 1-d empty tensors are skipped whatever the others' shapes.
    bool legacy_empty = t.dim() == 1 && t.numel() == 0;
    if (!first && !legacy_empty) first = &t;
  }
  if (!first) return make_tensor({0}, dtype, tensors[0].device());
  int d = int(wrap_dim(dim, first->dim(), "cat"));
  Shape shape = first->shape();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.dim() == 1 && t.numel() == 0) continue;
    EMBER_CHECK(t.dim() == first->dim(),
                "cat: tensors must have the same number of dims, got shape {} and shape {} at position {}",
                first->shape(), t.shape(), i);
    for (int k = 0; k < t.dim(); ++k)
      EMBER_CHECK(k == d || t.shape()[k] == first->shape()[k],
                  "cat: sizes of tensors must match except in dimension {}: expected size {} but got size {} for "
                  "tensor at position {} (shapes {} and {})",
                  d, first->shape()[k], t.shape()[k], i, first->shape(), t.shape());
    EMBER_CHECK(!__builtin_add_overflow(shape[d], t.shape()[d], &shape[d]),
                "cat: the sizes along dim {} sum past 64 bits at the tensor at position {} (shape {})", d, i,
                t.shape());
  }
  Tensor out = make_tensor(shape, dtype, tensors[0].device(), "cat");
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (t.dim() == 1 && t.numel() == 0) continue;
    copy_(out.narrow(d, offset, t.shape()[d]), t);
    offset += t.shape()[d];
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  check_defined(tensors[0], "stack", "tensor at position 0");
  int d = int(wrap_dim(dim, tensors[0].dim() + 1, "stack"));
  std::vector<Tensor> unsqueezed;
  unsqueezed.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EMBER_CHECK(tensors[i].defined(), "stack: tensor at position {} is undefined", i);
    EMBER_CHECK(tensors[i].shape() == tensors[0].shape(),
                "stack: expects each tensor to be equal size, but got {} at position 0 and {} at position {}",
                tensors[0].shape(), tensors[i].shape(), i);
    unsqueezed.push_back(tensors[i].unsqueeze(d));
  }
  return cat(unsqueezed, d);
}

namespace {

// The pieces of `t` along dim d, of the given sizes (which sum to its size
// there): views, with one SplitBackward recorded for all of them
// (autograd/functions/indexing.cpp). One node instead of a strided view's
// each: its backward writes each piece's gradient into one buffer, where
// theirs built a zero-filled gradient of t's shape per piece and added them.
std::vector<Tensor> split_into(const Tensor& t, int d, const std::vector<int64_t>& sizes) {
  std::vector<Tensor> pieces;
  pieces.reserve(sizes.size());
  Shape shape = t.shape();
  int64_t offset = t.offset();
  for (int64_t size : sizes) {
    shape[d] = size;
    pieces.push_back(detail::view_without_grad(t, shape, t.strides(), offset));
    offset += size * t.strides()[d];
  }
  if (should_record({&t})) [[unlikely]] {
    const Tensor* inputs[] = {&t};
    std::vector<Tensor*> outputs;
    for (Tensor& piece : pieces) outputs.push_back(&piece);
    const int64_t dim = d;
    split_grad.record({inputs, outputs, &dim});
  }
  return pieces;
}

}  // namespace

std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim) {
  check_defined(t, "split", "input");
  EMBER_CHECK(t.dim() > 0, "split: expects at least a 1-dimensional tensor");
  int d = int(wrap_dim(dim, t.dim(), "split"));
  int64_t size = t.shape()[d];
  EMBER_CHECK(split_size > 0 || (split_size == 0 && size == 0),
              "split: split_size must be positive (or 0 for an empty dim), got {} for dim {} of size {}", split_size, d,
              size);
  int64_t count = split_size == 0 ? 1 : std::max<int64_t>(ceil_div(size, split_size), 1);
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < count; ++i) sizes.push_back(std::min(split_size, size - i * split_size));
  return split_into(t, d, sizes);
}

std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int64_t dim) {
  check_defined(t, "split", "input");
  EMBER_CHECK(t.dim() > 0, "split: expects at least a 1-dimensional tensor");
  int d = int(wrap_dim(dim, t.dim(), "split"));
  int64_t total = 0;
  for (int64_t s : sizes) {
    EMBER_CHECK(s >= 0, "split: split sizes must be non-negative, got {}", s);
    // Checked before adding: a sum past int64 wrapped back to the size and made views outside the storage.
    EMBER_CHECK(s <= t.shape()[d] - total, "split: split sizes [{}] sum to more than dim {}'s size {} (shape {})",
                fmt::join(sizes, ", "), d, t.shape()[d], t.shape());
    total += s;
  }
  EMBER_CHECK(total == t.shape()[d], "split: split sizes sum to {} but dim {} has size {} (shape {})", total, d,
              t.shape()[d], t.shape());
  return split_into(t, d, sizes);
}

std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim) {
  check_defined(t, "chunk", "input");
  EMBER_CHECK(t.dim() > 0, "chunk: expects at least a 1-dimensional tensor");
  EMBER_CHECK(chunks > 0, "chunk: expects chunks to be greater than 0, got {}", chunks);
  int d = int(wrap_dim(dim, t.dim(), "chunk"));
  int64_t size = t.shape()[d];
  if (size == 0) {
    // As PyTorch: one empty piece per chunk. Each is a tensor object, so a
    // count no memory could hold is an error, not an allocation failure.
    constexpr int64_t kMaxEmptyChunks = int64_t(1) << 20;
    EMBER_CHECK(chunks <= kMaxEmptyChunks,
                "chunk: {} chunks of dim {} (size 0, shape {}) would make {} empty tensors; at most {} can be asked for",
                chunks, d, t.shape(), chunks, kMaxEmptyChunks);
    return split(t, std::vector<int64_t>(size_t(chunks), 0), d);
  }
  return split(t, ceil_div(size, chunks), d);
}

static Tensor compute_index_select(const Tensor& t, int64_t dim, const Tensor& index) {
  check_defined(t, "index_select", "input");
  check_index(index, t, "index_select");
  EMBER_CHECK(index.dim() <= 1, "index_select: index must be 0-d or 1-d, got shape {}", index.shape());
  int d = int(wrap_dim(dim, t.dim(), "index_select"));
  if (t.dim() == 0)
    EMBER_CHECK(index.numel() == 1, "index_select: index into a 0-d tensor must have one value, got {}",
                index.numel());
  Tensor input = at_least_1d(t).contiguous();
  Shape shape = input.shape();
  shape[d] = index.numel();
  Tensor out = make_tensor(shape, t.dtype(), t.device());
  if (out.numel() > 0) {
    Tensor flat_index = index.contiguous();
    index_select_op(t.device().type, t.dtype(),
                    RowSelect{.out = out.data_ptr(), .input = input.data_ptr(), .index = flat_index.data_ptr(),
                              .index_dtype = index.dtype(), .outer = product(shape, 0, d),
                              .input_rows = input.shape()[d], .num_indices = index.numel(),
                              .row_size = product(shape, d + 1, shape.ndim()), .op = "index_select"});
  }
  return t.dim() == 0 ? out.reshape({}) : out;
}

static Tensor compute_embedding(const Tensor& indices, const Tensor& weight) {
  check_defined(weight, "embedding", "weight");
  check_defined(indices, "embedding", "input");
  EMBER_CHECK(!is_floating(indices.dtype()),
              "embedding(input, weight): input holds the indices and must be int32 or int64, got {} of shape {} "
              "(weight: {} of shape {}); the order is PyTorch's F.embedding(input, weight), indices first",
              indices.dtype(), indices.shape(), weight.dtype(), weight.shape());
  check_index(indices, weight, "embedding");
  EMBER_CHECK(weight.dim() == 2, "embedding: weight must be 2-d [num_embeddings, embedding_dim], got shape {}",
              weight.shape());
  Shape shape = indices.shape();
  shape.push_back(weight.shape()[1]);
  Tensor out = make_tensor(shape, weight.dtype(), weight.device());
  if (out.numel() > 0) {
    Tensor table = weight.contiguous(), flat_indices = indices.contiguous();
    embedding_op(weight.device().type, weight.dtype(),
                 RowSelect{.out = out.data_ptr(), .input = table.data_ptr(), .index = flat_indices.data_ptr(),
                           .index_dtype = indices.dtype(), .outer = 1, .input_rows = weight.shape()[0],
                           .num_indices = indices.numel(), .row_size = weight.shape()[1], .op = "embedding"});
  }
  return out;
}

static Tensor compute_gather(const Tensor& t, int64_t dim, const Tensor& index) {
  check_defined(t, "gather", "input");
  check_index(index, t, "gather");
  EMBER_CHECK(std::max(index.dim(), 1) == std::max(t.dim(), 1),
              "gather: index of shape {} must have as many dims as the input of shape {}", index.shape(), t.shape());
  int d = int(wrap_dim(dim, t.dim(), "gather"));
  Tensor input = at_least_1d(t), positions = at_least_1d(index);
  for (int k = 0; k < input.dim(); ++k)
    EMBER_CHECK(k == d || positions.shape()[k] <= input.shape()[k],
                "gather: index of shape {} exceeds the input of shape {} at dim {} ({} > {})", index.shape(),
                t.shape(), k, positions.shape()[k], input.shape()[k]);
  Tensor out = make_tensor(positions.shape(), t.dtype(), t.device());
  if (out.numel() > 0) gather_op(t.device().type, t.dtype(), along_dim(out, positions, input, d, input.shape()[d]));
  return out.reshape(index.shape());
}

static Tensor compute_scatter_add(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src) {
  check_defined(t, "scatter_add", "input");
  check_defined(src, "scatter_add", "src");
  check_index(index, t, "scatter_add");
  EMBER_CHECK(src.dtype() == t.dtype(), "scatter_add: expected self and src to have the same dtype, got {} and {}",
              t.dtype(), src.dtype());
  EMBER_CHECK(src.device() == t.device(), "scatter_add: src is on {} but the input is on {}", src.device(),
              t.device());
  int ndim = std::max(t.dim(), 1);
  EMBER_CHECK(std::max(index.dim(), 1) == ndim && std::max(src.dim(), 1) == ndim,
              "scatter_add: input {}, index {} and src {} must have the same number of dims", t.shape(),
              index.shape(), src.shape());
  int d = int(wrap_dim(dim, t.dim(), "scatter_add"));
  // 16-bit floats add in f32 and round once, as PyTorch's: added one at a time
  // in bf16, 600 repeats of one index stopped growing at 512, where the spacing
  // is 4 (and gather's, index_select's and embedding's gradients are this op).
  const bool narrow = t.dtype() == DType::bf16 || t.dtype() == DType::f16;
  Tensor out = narrow ? t.to(DType::f32) : t.clone();
  Tensor target = at_least_1d(out), positions = at_least_1d(index);
  Tensor values = at_least_1d(narrow ? src.to(DType::f32) : src);
  for (int k = 0; k < ndim; ++k) {
    EMBER_CHECK(positions.shape()[k] <= values.shape()[k],
                "scatter_add: index of shape {} exceeds src of shape {} at dim {}", index.shape(), src.shape(), k);
    EMBER_CHECK(k == d || positions.shape()[k] <= target.shape()[k],
                "scatter_add: index of shape {} exceeds the input of shape {} at dim {}", index.shape(), t.shape(), k);
  }
  if (index.numel() > 0)
    scatter_add_op(t.device().type, out.dtype(), along_dim(target, positions, values, d, target.shape()[d]));
  return narrow ? out.to(t.dtype()) : out;
}

static Tensor compute_masked_fill(const Tensor& t, const Tensor& mask, const Scalar& value) {
  check_defined(t, "masked_fill", "input");
  check_defined(mask, "masked_fill", "mask");
  EMBER_CHECK(mask.dtype() == DType::boolean, "masked_fill: mask must have dtype bool, got {}", mask.dtype());
  EMBER_CHECK(mask.device() == t.device(), "masked_fill: mask is on {} but the input is on {}", mask.device(),
              t.device());
  check_scalar_fits("masked_fill", value, t.dtype());
  Tensor out = make_tensor(broadcast_shapes(t.shape(), mask.shape(), "masked_fill"), t.dtype(), t.device());
  if (out.numel() == 0) return out;
  ElementwiseLoop loop = ElementwiseLoop::make({&out, &t, &mask});
  masked_fill_op(t.device().type, t.dtype(), loop, value);
  return out;
}

namespace {
Tensor triangle(const Op<void(const Tensor&, const Tensor&, int64_t)>& op, const Tensor& t, int64_t diagonal) {
  check_defined(t, op.name(), "input");
  EMBER_CHECK(t.dim() >= 2, "{}: input must have at least 2 dims, got shape {}", op.name(), t.shape());
  Tensor out = make_tensor(t.shape(), t.dtype(), t.device());
  // Diagonals past the matrix change nothing: clamped, row + diagonal cannot overflow in a kernel.
  diagonal = std::clamp<int64_t>(diagonal, -t.size(-2), t.size(-1));
  if (out.numel() > 0) op(t.device().type, t.dtype(), out, t.contiguous(), diagonal);
  return out;
}
}  // namespace

Tensor tril(const Tensor& t, int64_t diagonal) {
  return with_grad(tril_grad, triangle(tril_op, t, diagonal), {&t}, &diagonal);
}
Tensor triu(const Tensor& t, int64_t diagonal) {
  return with_grad(triu_grad, triangle(triu_op, t, diagonal), {&t}, &diagonal);
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  check_defined(indices, "one_hot", "indices");
  check_index(indices, indices, "one_hot");
  EMBER_CHECK(num_classes >= -1, "one_hot: num_classes must be -1 or non-negative, got {}", num_classes);
  Tensor flat = indices.contiguous();
  if (num_classes == -1) {
    EMBER_CHECK(indices.numel() > 0, "one_hot: cannot infer the number of classes from an empty tensor");
    std::vector<int64_t> values = flat.to_vector<int64_t>();
    const auto [lowest, highest] = std::minmax_element(values.begin(), values.end());
    EMBER_CHECK(*lowest >= 0, "one_hot: class values must be non-negative, got {}", *lowest);
    EMBER_CHECK(*highest < std::numeric_limits<int64_t>::max(),
                "one_hot: class value {} leaves no room for a class count; pass num_classes", *highest);
    num_classes = *highest + 1;
  }
  Shape shape = indices.shape();
  shape.push_back(num_classes);
  Tensor out = make_tensor(shape, DType::i64, indices.device(), "one_hot");
  if (indices.numel() > 0)
    one_hot_op(indices.device().type, indices.dtype(), out.view({indices.numel(), num_classes}), flat);
  return out;
}

static Tensor compute_repeat(const Tensor& t, const Shape& repeats) {
  check_defined(t, "repeat", "input");
  EMBER_CHECK(repeats.ndim() >= t.dim(),
              "repeat: number of repeat dims ({}) can not be smaller than the number of tensor dims ({})",
              repeats.ndim(), t.dim());
  Shape padded = Shape::filled(repeats.ndim() - t.dim(), 1);
  for (int64_t s : t.shape()) padded.push_back(s);
  Tensor input = t.reshape(padded);
  Shape shape = padded;
  int split_dims = repeats.ndim();
  for (int d = 0; d < repeats.ndim(); ++d) {
    EMBER_CHECK(repeats[d] >= 0, "repeat: repeats must be non-negative, got {}", repeats);
    // 4 * 2^62 wrapped to 0: an empty result without a word.
    EMBER_CHECK(!__builtin_mul_overflow(shape[d], repeats[d], &shape[d]),
                "repeat: {} repeats of dim {} of size {} overflow 64 bits", repeats[d], d, padded[d]);
    if (repeats[d] != 1) ++split_dims;
  }
  Tensor out = make_tensor(shape, t.dtype(), t.device());
  if (out.numel() == 0) return out;
  if (split_dims > kMaxDims) {
    // Too many dims to view as [r0, s0, r1, s1, ...]: repeat one dim at a time.
    Tensor current = input;
    for (int d = 0; d < repeats.ndim(); ++d)
      if (repeats[d] != 1) current = cat(std::vector<Tensor>(size_t(repeats[d]), current), d);
    copy_(out, current);
    return out;
  }
  // out viewed as [r0, s0, r1, s1, ...] (a dim with r == 1 stays whole) is the
  // input expanded along each r: a single broadcasting copy.
  Shape split_shape, source_shape, source_strides;
  for (int d = 0; d < repeats.ndim(); ++d) {
    if (repeats[d] != 1) {
      split_shape.push_back(repeats[d]);
      source_shape.push_back(repeats[d]);
      source_strides.push_back(0);
    }
    split_shape.push_back(padded[d]);
    source_shape.push_back(padded[d]);
    source_strides.push_back(input.strides()[d]);
  }
  Tensor source = Tensor::make(input.storage(), input.dtype(), source_shape, source_strides, input.offset());
  copy_(out.view(split_shape), source);
  return out;
}

static Tensor compute_pad(const Tensor& t, const std::vector<int64_t>& pad, const Scalar& value) {
  check_defined(t, "pad", "input");
  check_scalar_fits("pad", value, t.dtype());
  EMBER_CHECK(pad.size() % 2 == 0, "pad: padding length must be divisible by 2, got {}", pad.size());
  EMBER_CHECK(int64_t(pad.size() / 2) <= t.dim(), "pad: padding length {} is too large for a tensor with {} dims",
              pad.size(), t.dim());
  Shape shape = t.shape();
  for (size_t pair = 0; pair < pad.size() / 2; ++pair) {
    int d = t.dim() - 1 - int(pair);
    // In 128 bits: the pads may be anything int64 holds (their sum too).
    const __int128 size = __int128(t.shape()[d]) + pad[2 * pair] + pad[2 * pair + 1];
    EMBER_CHECK(size >= 0, "pad: dim {} of size {} padded by ({}, {}) would have negative size {}", d, t.shape()[d],
                pad[2 * pair], pad[2 * pair + 1], size);
    // A crop past the input's edge with a pad on the other side ((-6, 2) on 5
    // elements) gave a tensor of the pad value alone; PyTorch refuses it.
    const __int128 crop = std::max<__int128>(-__int128(pad[2 * pair]), 0) + std::max<__int128>(-__int128(pad[2 * pair + 1]), 0);
    EMBER_CHECK(crop <= t.shape()[d], "pad: dim {} of size {} padded by ({}, {}) would crop {} elements, more than it has",
                d, t.shape()[d], pad[2 * pair], pad[2 * pair + 1], crop);
    EMBER_CHECK(size <= std::numeric_limits<int64_t>::max(),
                "pad: dim {} of size {} padded by ({}, {}) would have size {}, past int64", d, t.shape()[d],
                pad[2 * pair], pad[2 * pair + 1], size);
    shape[d] = int64_t(size);
  }
  Tensor out = full(shape, value, {.dtype = t.dtype(), .device = t.device()});
  // The part of the input that survives cropping lands at max(before, 0).
  // A negative pad crops min(-pad, size) elements (-INT64_MIN is not an int64).
  Tensor source = t, target = out;
  for (size_t pair = 0; pair < pad.size() / 2; ++pair) {
    int d = t.dim() - 1 - int(pair);
    const int64_t size = t.shape()[d], before = pad[2 * pair], after = pad[2 * pair + 1];
    const auto cropped = [size](int64_t p) { return p >= 0 ? 0 : p <= -size ? size : -p; };
    int64_t length = size - cropped(before) - cropped(after);
    if (length <= 0) return out;
    source = source.narrow(d, cropped(before), length);
    target = target.narrow(d, std::max<int64_t>(before, 0), length);
  }
  copy_(target, source);
  return out;
}

// The differentiable entry points: each computes without recording (its
// internal copies into slices of a fresh output must not trip the in-place
// checks), then records its own node.
namespace {
template <class F>
Tensor untracked(F&& compute) {
  NoGradGuard no_grad;
  return compute();
}
}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  Tensor out = untracked([&] { return compute_cat(tensors, dim); });
  std::vector<const Tensor*> inputs;
  for (const Tensor& t : tensors) inputs.push_back(&t);
  if (grad_mode_enabled() && std::any_of(inputs.begin(), inputs.end(), [](const Tensor* t) { return t->defined() && t->requires_grad(); })) {
    Tensor* outputs[] = {&out};
    cat_grad.record({inputs, outputs, &dim});
  }
  return out;
}

Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index) {
  return with_grad(index_select_grad, untracked([&] { return compute_index_select(t, dim, index); }), {&t, &index}, &dim);
}

// The recorded inputs stay (weight, indices): autograd/functions/indexing.cpp reads them in that order.
Tensor embedding(const Tensor& input, const Tensor& weight) {
  return with_grad(embedding_grad, untracked([&] { return compute_embedding(input, weight); }), {&weight, &input});
}

Tensor gather(const Tensor& t, int64_t dim, const Tensor& index) {
  return with_grad(gather_grad, untracked([&] { return compute_gather(t, dim, index); }), {&t, &index}, &dim);
}

Tensor scatter_add(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src) {
  return with_grad(scatter_add_grad, untracked([&] { return compute_scatter_add(t, dim, index, src); }),
                   {&t, &index, &src}, &dim);
}

Tensor masked_fill(const Tensor& t, const Tensor& mask, const Scalar& value) {
  return with_grad(masked_fill_grad, untracked([&] { return compute_masked_fill(t, mask, value); }), {&t, &mask});
}

Tensor repeat(const Tensor& t, const Shape& repeats) {
  return with_grad(repeat_grad, untracked([&] { return compute_repeat(t, repeats); }), {&t}, &repeats);
}

Tensor pad(const Tensor& t, const std::vector<int64_t>& pad, const Scalar& value) {
  return with_grad(pad_grad, untracked([&] { return compute_pad(t, pad, value); }), {&t}, &pad);
}

}  // namespace ember
