// Views share storage with their base and copy nothing; writes through a view
// are seen by the base. Also contiguous/clone/to, which copy when they must.
// Entry points: core/ops/views.cpp; the copy kernel: kernels/*/copy.cpp.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace ember {

Tensor view(const Tensor& t, const Shape& shape);     // -1 infers one dim; errors if strides forbid
Tensor reshape(const Tensor& t, const Shape& shape);  // a view when possible, else a copy
Tensor transpose(const Tensor& t, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& t, const Dims& dims);
Tensor t(const Tensor& t);  // 2-d transpose (0-d and 1-d unchanged)
Tensor squeeze(const Tensor& t);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor expand(const Tensor& t, const Shape& shape);  // -1 keeps a dim
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
// Python's t[start:end:step] along dim (negative start/end count from the end; clamped).
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& t, int64_t dim, int64_t index);
Tensor flatten(const Tensor& t, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor unflatten(const Tensor& t, int64_t dim, const Shape& sizes);
Tensor diagonal(const Tensor& t, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);
Tensor as_strided(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset);
namespace detail {
// The view of `t` with that geometry, recording no gradient: for entry points
// that record one node for several views (split and chunk: SplitBackward),
// not for users, since a view of a tensor that requires grad has no history
// until its caller records one. It remembers the first tensor of its chain
// of views, so that an in-place write through it can give that base its
// history (Note [In-place ops and autograd] in autograd/README.md); one made
// under NoGradGuard of a tensor that requires grad is a plain alias instead,
// which, as in PyTorch, does not require grad.
Tensor view_without_grad(const Tensor& t, const Shape& shape, const Strides& strides, int64_t offset);
}  // namespace detail

Tensor contiguous(const Tensor& t);
Tensor clone(const Tensor& t);
Tensor to(const Tensor& t, DType dtype);    // the same tensor when already of that dtype
// The same tensor when already there. non_blocking: the copy is queued on the
// device's current stream and the host goes on (a copy to the host is then
// valid only after synchronize).
Tensor to(const Tensor& t, Device device, bool non_blocking = false);
// out = source, broadcasting source and converting dtype; out's version bumps.
void copy_(const Tensor& out, const Tensor& source);

}  // namespace ember
