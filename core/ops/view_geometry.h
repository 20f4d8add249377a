// The views of some of a tensor's elements (slice, select, diagonal) hand
// their gradient a way to make the same view again over other strides:
// core/ops/views.cpp makes them, autograd/functions/shape.cpp's
// StridedViewBackward replays them over a contiguous gradient of the base's
// shape. Replaying the op, not the memory layout, keeps the gradient right
// when the base's elements share memory (an expanded tensor: narrowing one
// row of x.expand({3, 4}) gives x the gradient of one row, not of three).
// Tests: tests/autograd/test_views_grad.cpp.
#pragma once

#include <cstdint>

#include "core/parallel.h"
#include "core/shape.h"

namespace ember::detail {

struct ViewGeometry {
  Shape shape;
  Strides strides;
  int64_t offset = 0;
};

// The geometry of the view when made of a tensor of the base's shape with
// these strides and storage offset.
using ViewOf = FunctionRef<ViewGeometry(const Strides& strides, int64_t offset)>;

}  // namespace ember::detail
