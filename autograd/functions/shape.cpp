// Gradients of the views (forward: core/ops/views.cpp). An in-place write
// into a view rebases its base's history (autograd/functions/in_place.cpp,
// Note [In-place ops and autograd]). Tests: tests/autograd/.
#include <algorithm>

#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/creation.h"
#include "core/ops/indexing.h"
#include "core/ops/view_geometry.h"
#include "core/ops/views.h"

namespace ember {
extern GradSlot reshape_view_grad, permute_grad, expand_grad, strided_view_grad;
}

namespace ember::autograd {
namespace {

using Grads = std::vector<Tensor>;
using Saved = std::vector<Tensor>;

// Calls visit(location) for every storage element of a geometry.
template <class Visit>
void for_each_location(const Shape& shape, const Strides& strides, int64_t offset, int dim, const Visit& visit) {
  if (dim == shape.ndim()) return visit(offset);
  for (int64_t i = 0; i < shape[dim]; ++i)
    for_each_location(shape, strides, offset + i * strides[dim], dim + 1, visit);
}

// Whether every location `out` reaches is one of `in`'s elements. A dense
// input covers its whole extent; a strided one is marked element by element
// (this path is as_strided of a strided view under autograd only).
bool within_elements(const Tensor& in, const Tensor& out) {
  if (out.numel() == 0) return true;
  const int64_t begin = in.offset(), size = extent(in.shape(), in.strides());
  if (out.offset() < begin || out.offset() + extent(out.shape(), out.strides()) > begin + size) return false;
  if (size == in.numel()) return true;
  std::vector<bool> element(size_t(size), false);
  for_each_location(in.shape(), in.strides(), 0, 0, [&](int64_t at) { element[size_t(at)] = true; });
  bool within = true;
  for_each_location(out.shape(), out.strides(), out.offset() - begin, 0,
                    [&](int64_t at) { within = within && element[size_t(at)]; });
  return within;
}

}  // namespace

void register_shape_functions() {
  // view, reshape, flatten, unflatten, squeeze, unsqueeze: same elements, new shape
  //   ->  da = g reshaped to a's shape
  reshape_view_grad.set_recorder([](const GradRecord& r) {
    Shape shape = input(r, 0).shape();
    record_formula(r, "ViewBackward", {}, [shape](const Saved&, const Tensor& g) { return Grads{g.reshape(shape)}; });
  });
  // permute, transpose, t: out dim d is a's dim order[d]  ->  da = g permuted back
  permute_grad.set_recorder([](const GradRecord& r) {
    const Dims& order = params<Dims>(r);
    Dims inverse = order;
    for (int d = 0; d < order.ndim(); ++d) inverse[int(order[d])] = d;
    record_formula(r, "PermuteBackward", {}, [inverse](const Saved&, const Tensor& g) { return Grads{g.permute(inverse)}; });
  });
  // expand: out repeats a along broadcast dims  ->  da = g summed over them (done by the engine)
  expand_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "ExpandBackward", {}, [](const Saved&, const Tensor& g) { return Grads{g}; });
  });
  // slice, narrow, select, diagonal: out picks some of a's elements
  //   ->  da = zeros of a's shape, with g written where the same view of it lies
  // as_strided: out picks memory locations  ->  da = zeros laid out like a's
  //   memory, with g written at out's locations
  strided_view_grad.set_recorder([](const GradRecord& r) {
    const Tensor &in = input(r, 0), &out = output(r, 0);
    Shape in_shape = in.shape();
    if (r.params) {
      detail::ViewGeometry at = params<detail::ViewOf>(r)(contiguous_strides(in_shape, "view gradient"), 0);
      record_formula(r, "StridedViewBackward", {}, [=](const Saved&, const Tensor& g) {
        Tensor grad = zeros(in_shape, {.dtype = g.dtype(), .device = g.device()});
        as_strided(grad, at.shape, at.strides, at.offset).copy_(g);
        return Grads{grad};
      });
      return;
    }
    // Where two of a's elements share a location, the memory's gradient
    // cannot be split between them: refused, not given to each whole.
    Shape in_strides = in.strides(), out_shape = out.shape(), out_strides = out.strides();
    int shared = -1;
    EMBER_CHECK(!elements_may_share_memory(in_shape, in_strides, &shared),
                "as_strided: its input (shape {}, strides {}) has elements that share memory (dim {}), so the "
                "gradient of as_strided cannot tell them apart; call contiguous() on the input before as_strided",
                in_shape, in_strides, shared);
    // Where two of out's elements share a location, their gradients add up there.
    const bool accumulate = elements_may_share_memory(out_shape, out_strides);
    // The buffer spans both geometries: as_strided's offset is the storage's,
    // so it may reach memory outside its input, whose gradient no element of
    // the input receives (as PyTorch's as_strided_backward drops it).
    const int64_t first = std::min(in.offset(), out.offset());
    const int64_t size = std::max(in.offset() + extent(in_shape, in_strides),
                                  out.offset() + extent(out_shape, out_strides)) - first;
    const int64_t in_shift = in.offset() - first, out_shift = out.offset() - first;
    record_formula(r, "AsStridedBackward", {}, [=](const Saved&, const Tensor& g) {
      Tensor memory = zeros({size}, {.dtype = g.dtype(), .device = g.device()});
      if (accumulate) {
        Tensor locations = as_strided(arange(0, size, 1, {.dtype = DType::i64, .device = g.device()}), out_shape,
                                      out_strides, out_shift);
        memory = scatter_add(memory, 0, locations.reshape({-1}), g.reshape({-1}));
      } else {
        as_strided(memory, out_shape, out_strides, out_shift).copy_(g);
      }
      return Grads{as_strided(memory, in_shape, in_strides, in_shift)};
    });
    // An in-place write through this output would take the old value of
    // memory outside the input's elements through the input, which cannot
    // hold its gradient (PyTorch differentiates through the base instead;
    // the gradient came out 0 where it is 2): refused, clone() first.
    if (!within_elements(in, out)) r.outputs[0]->impl()->autograd->grad_fn->refuses_in_place = true;
  });
}

}  // namespace ember::autograd
