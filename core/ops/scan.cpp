// Entry points of the scan family: validate, pick the output dtype as PyTorch
// does (i64 for bool and integer inputs unless a dtype is given), convert the
// input to it (the conversion is differentiable, so gradients reach the
// caller's dtype) and dispatch to the kernels of core/ops/scan_kernels.h.
// Tests: tests/core/test_scan.cpp.
#include "core/ops/scan.h"

#include "core/autocast_ops.h"
#include "core/ops/creation.h"
#include "core/ops/scan_kernels.h"
#include "core/ops/views.h"

namespace ember {

Op<void(const ScanLoop&)> cumsum_op("cumsum"), cumprod_op("cumprod");
GradSlot cumsum_grad("cumsum"), cumprod_grad("cumprod");

namespace {

Tensor scan(const Op<void(const ScanLoop&)>& op, const GradSlot& slot, const Tensor& t, int64_t dim,
            std::optional<DType> dtype) {
  EMBER_CHECK(t.defined(), "{}: input is undefined", op.name());
  int64_t d = wrap_dim(dim, t.dim(), op.name());
  DType out_dtype = dtype.value_or(is_floating(t.dtype()) ? t.dtype() : DType::i64);
  EMBER_CHECK(out_dtype != DType::boolean, "{}: dtype bool is not supported for the result (input dtype {}); ask for int64",
              op.name(), t.dtype());
  Tensor source = to(t, out_dtype);
  Tensor out = make_tensor(t.shape(), out_dtype, t.device());
  if (out.numel() > 0) {
    NoGradGuard no_grad;
    // A 0-d tensor scans as one element.
    Tensor target = t.dim() == 0 ? out.reshape({1}) : out, input = t.dim() == 0 ? source.reshape({1}) : source;
    Tensor out_slices = target.select(d, 0), input_slices = input.select(d, 0);
    ScanLoop loop;
    loop.slices = ElementwiseLoop::make({&out_slices, &input_slices});
    loop.length = target.shape()[int(d)];
    loop.dim_strides[0] = target.strides()[int(d)];
    loop.dim_strides[1] = input.strides()[int(d)];
    op(t.device().type, out_dtype, loop);
  }
  return with_grad(slot, out, {&source}, &d);
}

}  // namespace

// Long sums and products run in f32 under autocast, as the reductions do
// (Note [Autocast]) and as PyTorch's autocast runs cumsum and cumprod.
Tensor cumsum(const Tensor& t, int64_t dim, std::optional<DType> dtype) {
  if (autocast_wants(AutocastKind::f32, {&t})) [[unlikely]]
    return cumsum(autocast_input(t, AutocastKind::f32), dim, dtype);
  return scan(cumsum_op, cumsum_grad, t, dim, dtype);
}

Tensor cumprod(const Tensor& t, int64_t dim, std::optional<DType> dtype) {
  if (autocast_wants(AutocastKind::f32, {&t})) [[unlikely]]
    return cumprod(autocast_input(t, AutocastKind::f32), dim, dtype);
  return scan(cumprod_op, cumprod_grad, t, dim, dtype);
}

}  // namespace ember
