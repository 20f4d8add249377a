// Entry points of flip, roll and repeat_interleave, composites of views and
// copies:
// - flip copies from a view of the input whose strides are negated along the
//   flipped dims (Note [Flip as a reversed-stride copy] in core/README.md):
//   one pass through copy_'s kernels, on every device and dtype;
// - roll copies the 2^k blocks that k rolled dims cut the input into, each
//   from a narrowed view into its shifted place: one pass in total;
// - repeat_interleave copies a broadcast view (an int repeats) or calls
//   index_select with an index built from the repeats (a tensor), whose
//   gradients are those ops' own.
// flip and roll record their own nodes: their gradients are the same op with
// the dims or the negated shifts. Tests: tests/core/test_reorder.cpp.
#include "core/ops/reorder.h"

#include <fmt/ranges.h>

#include <algorithm>

#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/ops/indexing.h"
#include "core/ops/views.h"

namespace ember {

GradSlot flip_grad("flip"), roll_grad("roll");

Tensor flip(const Tensor& t, const Dims& dims) {
  EMBER_CHECK(t.defined(), "flip: input is undefined");
  Dims wrapped;
  bool seen[kMaxDims] = {};
  for (int64_t dim : dims) {
    int64_t d = wrap_dim(dim, t.dim(), "flip");
    EMBER_CHECK(!seen[d], "flip: dim {} appears more than once in dims {}", d, dims);
    seen[d] = true;
    wrapped.push_back(d);
  }
  Tensor out = make_tensor(t.shape(), t.dtype(), t.device());
  if (out.numel() > 0) {
    Strides strides = t.strides();
    int64_t offset = t.offset();
    for (int64_t d : wrapped) {
      if (t.dim() == 0) break;  // a 0-d tensor has one element: nothing moves
      offset += (t.shape()[int(d)] - 1) * strides[int(d)];
      strides[int(d)] = -strides[int(d)];
    }
    Tensor reversed = Tensor::make(t.storage(), t.dtype(), t.shape(), strides, offset);
    NoGradGuard no_grad;
    copy_(out, reversed);
  }
  return with_grad(flip_grad, out, {&t}, &wrapped);
}

namespace {

// target = source with each dim d rotated by shift[d] in [0, size): the last
// shift[d] elements of source land first. Recurses over dims, so k rotated
// dims make 2^k block copies.
void copy_rolled(const Tensor& target, const Tensor& source, const int64_t* shift, int d) {
  if (d == source.dim()) {
    copy_(target, source);
    return;
  }
  int64_t n = source.shape()[d], s = shift[d];
  if (s == 0) {
    copy_rolled(target, source, shift, d + 1);
    return;
  }
  copy_rolled(target.narrow(d, s, n - s), source.narrow(d, 0, n - s), shift, d + 1);
  copy_rolled(target.narrow(d, 0, s), source.narrow(d, n - s, s), shift, d + 1);
}

int64_t wrap_shift(int64_t shift, int64_t size) { return (shift % size + size) % size; }

}  // namespace

Tensor roll(const Tensor& t, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims) {
  EMBER_CHECK(t.defined(), "roll: input is undefined");
  if (dims.empty())
    EMBER_CHECK(shifts.size() == 1, "roll: without dims the input is flattened and takes one shift, got {} shifts {}",
                shifts.size(), shifts);
  else
    EMBER_CHECK(shifts.size() == dims.size(),
                "roll: shifts and dims must have the same length, got {} shifts {} and {} dims {}", shifts.size(),
                shifts, dims.size(), dims);
  // Each dim's total shift in [0, size) (reduced as it adds up, so no sum of
  // shifts overflows), and the node's parameters: those shifts and dims, or
  // the flattened form's one shift and no dims.
  std::pair<std::vector<int64_t>, std::vector<int64_t>> rolled;
  int64_t shift[kMaxDims] = {};
  bool seen[kMaxDims] = {};
  for (size_t i = 0; i < dims.size(); ++i) {
    int d = int(wrap_dim(dims[i], t.dim(), "roll"));
    int64_t size = t.dim() == 0 ? 1 : t.shape()[d];
    if (size > 0) shift[d] = wrap_shift(shift[d] + wrap_shift(shifts[i], size), size);
    seen[d] = true;
  }
  if (dims.empty()) rolled.first.push_back(t.numel() > 0 ? wrap_shift(shifts[0], t.numel()) : 0);
  for (int d = 0; d < kMaxDims; ++d) {
    if (!seen[d]) continue;
    rolled.first.push_back(shift[d]);
    rolled.second.push_back(d);
  }
  Tensor out = make_tensor(t.shape(), t.dtype(), t.device());
  if (out.numel() > 0) {
    NoGradGuard no_grad;
    if (dims.empty()) {
      copy_rolled(out.view({-1}), t.reshape({-1}), rolled.first.data(), 0);
    } else if (t.dim() > 0) {
      copy_rolled(out, t, shift, 0);
    } else {
      copy_(out, t);  // a 0-d tensor has one element: nothing moves
    }
  }
  return with_grad(roll_grad, out, {&t}, &rolled);
}

Tensor roll(const Tensor& t, int64_t shift, std::optional<int64_t> dim) {
  return dim ? roll(t, std::vector<int64_t>{shift}, std::vector<int64_t>{*dim}) : roll(t, std::vector<int64_t>{shift});
}

namespace {

// The input as repeat_interleave sees it (flattened without a dim; 0-d as
// one element) and the wrapped dim.
std::pair<Tensor, int> interleave_input(const Tensor& t, std::optional<int64_t> dim) {
  EMBER_CHECK(t.defined(), "repeat_interleave: input is undefined");
  if (!dim) return {t.reshape({-1}), 0};
  int d = int(wrap_dim(*dim, t.dim(), "repeat_interleave"));
  return {t.dim() == 0 ? t.reshape({1}) : t, d};
}

}  // namespace

Tensor repeat_interleave(const Tensor& t, int64_t repeats, std::optional<int64_t> dim) {
  auto [input, d] = interleave_input(t, dim);
  EMBER_CHECK(repeats >= 0, "repeat_interleave: repeats must be non-negative, got {}", repeats);
  // [..., n, ...] -> [..., n, repeats, ...] (a broadcast view) -> a fresh copy -> [..., n * repeats, ...]
  Shape expanded = input.shape(), merged = input.shape();
  expanded.insert(d + 1, repeats);
  EMBER_CHECK(!__builtin_mul_overflow(merged[d], repeats, &merged[d]),
              "repeat_interleave: {} repeats of dim {} of size {} overflow 64 bits", repeats, d, input.shape()[d]);
  return clone(input.unsqueeze(d + 1).expand(expanded)).view(merged);
}

Tensor repeat_interleave(const Tensor& repeats) {
  EMBER_CHECK(repeats.defined(), "repeat_interleave: repeats is undefined");
  EMBER_CHECK(repeats.dtype() == DType::i32 || repeats.dtype() == DType::i64,
              "repeat_interleave: repeats must have dtype int32 or int64, got {}", repeats.dtype());
  EMBER_CHECK(repeats.dim() == 1, "repeat_interleave: repeats must be 1-d, got shape {}", repeats.shape());
  std::vector<int64_t> counts = repeats.to_vector<int64_t>();
  int64_t total = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    EMBER_CHECK(counts[i] >= 0, "repeat_interleave: repeats must be non-negative, got {} at position {}", counts[i], i);
    EMBER_CHECK(!__builtin_add_overflow(total, counts[i], &total), "repeat_interleave: repeats {} sum past 64 bits",
                repeats.shape());
  }
  // Written into a tensor (its allocation checked and named), not a
  // std::vector, whose bad_alloc or length_error escaped as no ember::Error.
  Tensor index = make_tensor({total}, DType::i64, kCPU, "repeat_interleave");
  int64_t* out = index.data_ptr<int64_t>();
  for (size_t i = 0; i < counts.size(); ++i) out = std::fill_n(out, counts[i], int64_t(i));
  return index.to(repeats.device());
}

Tensor repeat_interleave(const Tensor& t, const Tensor& repeats, std::optional<int64_t> dim) {
  auto [input, d] = interleave_input(t, dim);
  EMBER_CHECK(repeats.defined(), "repeat_interleave: repeats is undefined");
  EMBER_CHECK(repeats.device() == t.device(), "repeat_interleave: repeats is on {} but the input is on {}",
              repeats.device(), t.device());
  EMBER_CHECK(repeats.dim() <= 1, "repeat_interleave: repeats must be 0-d or 1-d, got shape {}", repeats.shape());
  EMBER_CHECK(repeats.dtype() == DType::i32 || repeats.dtype() == DType::i64,
              "repeat_interleave: repeats must have dtype int32 or int64, got {}", repeats.dtype());
  if (repeats.numel() == 1) return repeat_interleave(t, repeats.item<int64_t>(), dim);
  EMBER_CHECK(repeats.numel() == input.shape()[d],
              "repeat_interleave: repeats must have one value per slice along dim {} ({} for input of shape {}), got "
              "shape {}",
              d, input.shape()[d], input.shape(), repeats.shape());
  return index_select(input, d, repeat_interleave(repeats.reshape({-1})));
}

}  // namespace ember
