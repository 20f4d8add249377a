// Views: new shape/strides/offset over the same storage; nothing is copied.
#include "core/ops/views.h"

#include "core/grad_hook.h"
#include "core/ops/view_geometry.h"

#include <algorithm>
#include <numeric>
#include <optional>

namespace ember {

// Gradient slots of the views (autograd/functions/shape.cpp): reshape-like
// views (same elements, new shape), permutations (params: the Dims order),
// expand, and views of a subset of elements (slice, select, diagonal: params
// the detail::ViewOf that makes them again; as_strided: no params).
GradSlot reshape_view_grad("reshape_view"), permute_grad("permute"), expand_grad("expand"),
    strided_view_grad("strided_view");

Tensor detail::view_without_grad(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset) {
  Tensor view = Tensor::make(t.storage(), t.dtype(), shape, strides, offset);
  if (grad_mode_enabled() || !t.requires_grad())
    view.impl()->view_base = t.impl()->view_base ? t.impl()->view_base : t.impl_ptr();
  else
    view.impl()->no_grad_view = true;
  if (t.impl()->no_grad_view) view.impl()->no_grad_view = true;
  view.impl()->view_of_grad_leaf =
      t.impl()->view_of_grad_leaf || (grad_mode_enabled() && t.requires_grad() && t.is_leaf());
  return view;
}

namespace {

// The view, with the slot's node recorded for it.
Tensor make_view(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset, const GradSlot& slot,
                 const void* params = nullptr) {
  return with_grad(slot, detail::view_without_grad(t, shape, strides, offset), {&t}, params);
}

// A view of some of t's elements, made by `at` over t's own strides.
Tensor element_view(const Tensor& t, detail::ViewOf at) {
  detail::ViewGeometry own = at(t.strides(), t.offset());
  return make_view(t, own.shape, own.strides, own.offset, strided_view_grad, &at);
}

void check_defined(const Tensor& t, std::string_view op) { EMBER_CHECK(t.defined(), "{}: undefined tensor", op); }

// Resolves one -1 in `shape` against `numel`; errors name `op`. The product
// of the known sizes may pass int64 (7 x INT64_MAX, found by the op fuzzer):
// then no input matches, unless a size is 0.
Shape infer_shape(const Shape& shape, int64_t numel, std::string_view op) {
  Shape out = shape;
  int infer = -1;
  int64_t known = 1;
  bool zero = false, overflow = false;
  for (int d = 0; d < out.ndim(); ++d) {
    if (out[d] == -1) {
      EMBER_CHECK(infer < 0, "{}: only one dimension can be inferred in shape {}", op, shape);
      infer = d;
    } else {
      EMBER_CHECK(out[d] >= 0, "{}: invalid size {} in shape {}", op, out[d], shape);
      zero |= out[d] == 0;
      overflow |= __builtin_mul_overflow(known, out[d], &known);
    }
  }
  if (zero) known = 0;
  EMBER_CHECK(!overflow || zero, "{}: shape {} is invalid for input of size {}", op, shape, numel);
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && numel % known == 0, "{}: shape {} is invalid for input of size {}", op, shape, numel);
    out[infer] = numel / known;
    known = numel;
  }
  EMBER_CHECK(known == numel, "{}: shape {} is invalid for input of size {}", op, shape, numel);
  return out;
}

// Strides for viewing (shape, strides) as `target` without copying, if possible
// (PyTorch's computeStride): each run of old dims that merges in memory must map
// to a run of new dims with the same number of elements.
std::optional<Strides> view_strides(const Shape& shape, const Strides& strides, const Shape& target) {
  // An empty or 0-d tensor can take any layout of its (0 or 1) elements.
  if (shape.numel() == 0 || shape.ndim() == 0) return contiguous_strides(target, "view");
  Strides out = Shape::filled(target.ndim(), 0);
  int view_d = target.ndim() - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int d = shape.ndim() - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || target[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= target[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

}  // namespace

Tensor view(const Tensor& t, const Shape& shape) {
  check_defined(t, "view");
  Shape target = infer_shape(shape, t.numel(), "view");
  auto strides = view_strides(t.shape(), t.strides(), target);
  EMBER_CHECK(strides.has_value(),
              "view: a tensor of shape {} with strides {} cannot be viewed as {} without a copy; use reshape",
              t.shape(), t.strides(), target);
  return make_view(t, target, *strides, t.offset(), reshape_view_grad);
}

Tensor reshape(const Tensor& t, const Shape& shape) {
  check_defined(t, "reshape");
  Shape target = infer_shape(shape, t.numel(), "reshape");
  if (auto strides = view_strides(t.shape(), t.strides(), target)) return make_view(t, target, *strides, t.offset(), reshape_view_grad);
  return view(clone(t), target);
}

Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1) {
  check_defined(t, "transpose");
  int a = int(wrap_dim(dim0, t.dim(), "transpose")), b = int(wrap_dim(dim1, t.dim(), "transpose"));
  if (t.dim() == 0) return make_view(t, t.shape(), t.strides(), t.offset(), reshape_view_grad);
  Shape shape = t.shape();
  Strides strides = t.strides();
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  Dims order;
  for (int d = 0; d < t.dim(); ++d) order.push_back(d == a ? b : d == b ? a : d);
  return make_view(t, shape, strides, t.offset(), permute_grad, &order);
}

Tensor permute(const Tensor& t, const Dims& dims) {
  check_defined(t, "permute");
  EMBER_CHECK(dims.ndim() == t.dim(), "permute: {} dims given for a tensor with {} dims (shape {})", dims.ndim(),
              t.dim(), t.shape());
  Shape shape = t.shape(), strides = t.strides();
  Dims order = dims;
  bool seen[kMaxDims] = {};
  for (int d = 0; d < dims.ndim(); ++d) {
    int source = int(wrap_dim(dims[d], t.dim(), "permute"));
    EMBER_CHECK(!seen[source], "permute: dim {} repeated in {}", dims[d], dims);
    seen[source] = true;
    order[d] = source;
    shape[d] = t.shape()[source];
    strides[d] = t.strides()[source];
  }
  return make_view(t, shape, strides, t.offset(), permute_grad, &order);
}

Tensor t(const Tensor& x) {
  check_defined(x, "t");
  EMBER_CHECK(x.dim() <= 2, "t: expects a tensor with <= 2 dims, got shape {}", x.shape());
  return x.dim() < 2 ? make_view(x, x.shape(), x.strides(), x.offset(), reshape_view_grad) : transpose(x, 0, 1);
}

Tensor squeeze(const Tensor& t) {
  check_defined(t, "squeeze");
  Shape shape, strides;
  for (int d = 0; d < t.dim(); ++d) {
    if (t.shape()[d] == 1) continue;
    shape.push_back(t.shape()[d]);
    strides.push_back(t.strides()[d]);
  }
  return make_view(t, shape, strides, t.offset(), reshape_view_grad);
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  check_defined(t, "squeeze");
  int d = int(wrap_dim(dim, t.dim(), "squeeze"));
  if (t.dim() == 0 || t.shape()[d] != 1) return make_view(t, t.shape(), t.strides(), t.offset(), reshape_view_grad);
  Shape shape = t.shape(), strides = t.strides();
  shape.erase(d);
  strides.erase(d);
  return make_view(t, shape, strides, t.offset(), reshape_view_grad);
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  check_defined(t, "unsqueeze");
  // The new dim goes anywhere in the result, which has one dim more.
  EMBER_CHECK(dim >= -(t.dim() + 1) && dim <= t.dim(),
              "unsqueeze: dim {} out of range for inserting a dim into a tensor with {} dims (expected [{}, {}])", dim,
              t.dim(), -(t.dim() + 1), t.dim());
  int d = int(dim < 0 ? dim + t.dim() + 1 : dim);
  Shape shape = t.shape(), strides = t.strides();
  int64_t stride = d < t.dim() ? t.strides()[d] * t.shape()[d] : 1;
  shape.insert(d, 1);
  strides.insert(d, stride);
  return make_view(t, shape, strides, t.offset(), reshape_view_grad);
}

Tensor expand(const Tensor& t, const Shape& shape) {
  check_defined(t, "expand");
  EMBER_CHECK(shape.ndim() >= t.dim(), "expand: the number of sizes provided ({}) must be >= the number of dims ({})",
              shape.ndim(), t.dim());
  Shape out_shape = shape;
  Strides out_strides = Shape::filled(shape.ndim(), 0);
  int lead = shape.ndim() - t.dim();
  for (int d = 0; d < shape.ndim(); ++d) {
    int source = d - lead;
    if (source < 0) {
      EMBER_CHECK(shape[d] >= 0, "expand: size {} is not allowed in a new leading dim ({})", shape[d], shape);
      continue;
    }
    int64_t have = t.shape()[source];
    if (shape[d] == -1) out_shape[d] = have;
    EMBER_CHECK(out_shape[d] >= 0, "expand: invalid size {} at dim {} (shape {} to {})", out_shape[d], d, t.shape(),
                shape);
    EMBER_CHECK(out_shape[d] == have || have == 1,
                "expand: the expanded size {} must match the existing size {} at dim {} (shape {} to {})", out_shape[d],
                have, d, t.shape(), shape);
    out_strides[d] = have == out_shape[d] ? t.strides()[source] : 0;
  }
  check_numel_fits(out_shape, "expand");
  return make_view(t, out_shape, out_strides, t.offset(), expand_grad);
}

Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step) {
  check_defined(t, "slice");
  EMBER_CHECK(t.dim() > 0, "slice: cannot slice a 0-d tensor");
  EMBER_CHECK(step > 0, "slice: step must be positive, got {}", step);
  int d = int(wrap_dim(dim, t.dim(), "slice"));
  int64_t size = t.shape()[d];
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  // Written so that no step overflows (step may be up to INT64_MAX): the
  // stride is multiplied only when two or more elements remain, and then
  // step < size, so stride * step stays inside the tensor's extent. An empty
  // tensor has no extent and its strides may be anything (unflatten of
  // [7, 0] into [7, 2^63 - 1, 0] gives dim 0 a stride of 2^63 - 1): its views
  // keep its offset and strides (Note [Views of empty tensors], core/README.md).
  const int64_t count = end == start ? 0 : (end - start - 1) / step + 1;
  const bool empty = t.numel() == 0;
  return element_view(t, [&](const Strides& base, int64_t offset) {
    detail::ViewGeometry view{t.shape(), base, empty ? offset : offset + start * base[d]};
    view.shape[d] = count;
    if (count > 1 && !empty) view.strides[d] = base[d] * step;
    return view;
  });
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  check_defined(t, "narrow");
  EMBER_CHECK(t.dim() > 0, "narrow: cannot narrow a 0-d tensor");
  int d = int(wrap_dim(dim, t.dim(), "narrow"));
  int64_t size = t.shape()[d];
  if (start < 0 && start >= -size) start += size;
  // length <= size - start, not start + length <= size: that sum can overflow.
  EMBER_CHECK(start >= 0 && length >= 0 && start <= size && length <= size - start,
              "narrow: start {} + length {} exceeds dimension size {} (dim {} of shape {})", start, length, size, d,
              t.shape());
  return slice(t, d, start, start + length);
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  check_defined(t, "select");
  EMBER_CHECK(t.dim() > 0, "select: cannot select on a 0-d tensor");
  int d = int(wrap_dim(dim, t.dim(), "select"));
  int64_t size = t.shape()[d];
  EMBER_CHECK(index >= -size && index < size, "select: index {} out of range for dim {} of size {} (shape {})", index,
              d, size, t.shape());
  if (index < 0) index += size;
  const bool empty = t.numel() == 0;  // Note [Views of empty tensors]
  return element_view(t, [&](const Strides& base, int64_t offset) {
    detail::ViewGeometry view{t.shape(), base, empty ? offset : offset + index * base[d]};
    view.shape.erase(d);
    view.strides.erase(d);
    return view;
  });
}

Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim) {
  check_defined(t, "flatten");
  // A 0-d tensor takes dims 0 and -1 only, as PyTorch's (flatten(3) was accepted).
  if (t.dim() == 0) {
    wrap_dim(start_dim, 0, "flatten");
    wrap_dim(end_dim, 0, "flatten");
    return reshape(t, {1});
  }
  int start = int(wrap_dim(start_dim, t.dim(), "flatten")), end = int(wrap_dim(end_dim, t.dim(), "flatten"));
  EMBER_CHECK(start <= end, "flatten: start_dim {} comes after end_dim {}", start_dim, end_dim);
  Shape shape;
  for (int d = 0; d < start; ++d) shape.push_back(t.shape()[d]);
  int64_t merged = 1;
  for (int d = start; d <= end; ++d) merged *= t.shape()[d];
  shape.push_back(merged);
  for (int d = end + 1; d < t.dim(); ++d) shape.push_back(t.shape()[d]);
  return reshape(t, shape);
}

Tensor unflatten(const Tensor& t, int64_t dim, const Shape& sizes) {
  check_defined(t, "unflatten");
  int d = int(wrap_dim(dim, t.dim(), "unflatten"));
  // No sizes would drop a dim of size 1 without a word.
  EMBER_CHECK(sizes.ndim() > 0, "unflatten: sizes must be non-empty (dim {} of shape {})", dim, t.shape());
  Shape inner = infer_shape(sizes, t.shape()[d], "unflatten");
  Shape shape;
  for (int i = 0; i < d; ++i) shape.push_back(t.shape()[i]);
  for (int64_t s : inner) shape.push_back(s);
  for (int i = d + 1; i < t.dim(); ++i) shape.push_back(t.shape()[i]);
  return view(t, shape);
}

Tensor diagonal(const Tensor& t, int64_t offset, int64_t dim1, int64_t dim2) {
  check_defined(t, "diagonal");
  EMBER_CHECK(t.dim() >= 2, "diagonal: expects at least 2 dims, got shape {}", t.shape());
  int a = int(wrap_dim(dim1, t.dim(), "diagonal")), b = int(wrap_dim(dim2, t.dim(), "diagonal"));
  EMBER_CHECK(a != b, "diagonal: dim1 and dim2 are both {}", a);
  const int64_t length = offset >= 0 ? std::max<int64_t>(std::min(t.shape()[a], t.shape()[b] - offset), 0)
                                     : std::max<int64_t>(std::min(t.shape()[a] + offset, t.shape()[b]), 0);
  const bool empty = t.numel() == 0;  // Note [Views of empty tensors]
  return element_view(t, [&](const Strides& base, int64_t start) {
    detail::ViewGeometry view{{}, {}, start};
    if (length > 0 && !empty) view.offset += offset >= 0 ? offset * base[b] : -offset * base[a];
    for (int d = 0; d < t.dim(); ++d) {
      if (d == a || d == b) continue;
      view.shape.push_back(t.shape()[d]);
      view.strides.push_back(base[d]);
    }
    view.shape.push_back(length);
    view.strides.push_back(empty ? base[a] : base[a] + base[b]);
    return view;
  });
}

Tensor as_strided(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset) {
  check_defined(t, "as_strided");
  EMBER_CHECK(shape.ndim() == strides.ndim(), "as_strided: shape {} and strides {} differ in length", shape, strides);
  bool empty = false;
  for (int d = 0; d < shape.ndim(); ++d) {
    EMBER_CHECK(shape[d] >= 0 && strides[d] >= 0, "as_strided: negative size or stride (shape {}, strides {})", shape,
                strides);
    empty |= shape[d] == 0;
  }
  check_numel_fits(shape, "as_strided");
  // The last element the view reaches (none when it is empty), in checked
  // arithmetic: sizes and strides may be anything int64 holds.
  int64_t last = empty ? -1 : offset;
  for (int d = 0; d < shape.ndim() && !empty; ++d) {
    int64_t extent = 0;
    EMBER_CHECK(!__builtin_mul_overflow(shape[d] - 1, strides[d], &extent) &&
                    !__builtin_add_overflow(last, extent, &last),
                "as_strided: shape {} strides {} offset {} reach past element 2^63 - 1", shape, strides, offset);
  }
  int64_t capacity = int64_t(t.storage()->nbytes()) / t.element_size();
  EMBER_CHECK(offset >= 0 && last < capacity,
              "as_strided: shape {} strides {} offset {} reach element {} of a storage of {} elements", shape,
              strides, offset, last, capacity);
  return make_view(t, shape, strides, offset, strided_view_grad);
}

Tensor Tensor::view(const Shape& shape) const { return ember::view(*this, shape); }
Tensor Tensor::reshape(const Shape& shape) const { return ember::reshape(*this, shape); }
Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const { return ember::transpose(*this, dim0, dim1); }
Tensor Tensor::permute(const Dims& dims) const { return ember::permute(*this, dims); }
Tensor Tensor::t() const { return ember::t(*this); }
Tensor Tensor::squeeze() const { return ember::squeeze(*this); }
Tensor Tensor::squeeze(int64_t dim) const { return ember::squeeze(*this, dim); }
Tensor Tensor::unsqueeze(int64_t dim) const { return ember::unsqueeze(*this, dim); }
Tensor Tensor::expand(const Shape& shape) const { return ember::expand(*this, shape); }
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return ember::narrow(*this, dim, start, length);
}
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return ember::slice(*this, dim, start, end, step);
}
Tensor Tensor::select(int64_t dim, int64_t index) const { return ember::select(*this, dim, index); }
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const { return ember::flatten(*this, start_dim, end_dim); }
Tensor Tensor::unflatten(int64_t dim, const Shape& sizes) const { return ember::unflatten(*this, dim, sizes); }
Tensor Tensor::diagonal(int64_t offset, int64_t dim1, int64_t dim2) const {
  return ember::diagonal(*this, offset, dim1, dim2);
}

}  // namespace ember
