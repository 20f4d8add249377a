// Copies: contiguous, clone, dtype and device conversion, copy_ and fill_.
// Kernels: kernels/{reference,cpu}/copy.cpp (copy_op, fill_op).
#include "core/ops/creation.h"
#include "core/device_runtime.h"
#include "core/grad_hook.h"
#include "core/memory_overlap.h"
#include "core/ops/elementwise_kernels.h"
#include "core/ops/views.h"
#include "core/scalar_fits.h"

namespace ember {

Op<ElementwiseKernel> copy_op("copy");
Op<void(const ElementwiseLoop&, const Scalar&)> fill_op("fill");
GradSlot to_grad("to");

void copy_(const Tensor& out, const Tensor& source) {
  EMBER_CHECK(out.defined() && source.defined(), "copy_: undefined tensor");
  check_in_place_target(out, "copy_");
  check_no_internal_overlap(out, "copy_");
  // Checked before the recorded path too, whose expand would otherwise be
  // the op its error named.
  Shape shape = broadcast_shapes(out.shape(), source.shape(), "copy_");
  EMBER_CHECK(shape == out.shape(), "copy_: source of shape {} cannot be broadcast to destination shape {}",
              source.shape(), out.shape());
  if (should_record({&out, &source})) [[unlikely]] {
    // Params set: the result does not read the target's old value, whose
    // history gets a zero gradient, not none (autograd/functions/in_place.cpp).
    static constexpr bool kOverwrites = true;
    Tensor target = out;
    const Tensor result = expand(to(source, out.dtype()), out.shape());
    const Tensor* inputs[] = {&result};
    Tensor* outputs[] = {&target};
    in_place_grad.record({inputs, outputs, &kOverwrites});
    return;
  }
  if (out.device() != source.device()) {  // convert and broadcast where the source is, then move the result
    copy_(out, to(contiguous(expand(to(source, out.dtype()), out.shape())), out.device()));
    return;
  }
  out.bump_version();
  if (out.numel() == 0) return;
  const Tensor read = source_overlaps_target(out, source) ? clone(source) : source;
  ElementwiseLoop loop = ElementwiseLoop::make({&out, &read});
  copy_op(out.device().type, out.dtype(), loop);
}

Tensor contiguous(const Tensor& t) {
  if (t.is_contiguous()) return t;
  return clone(t);
}

// A copy of `t` in `dtype`; its gradient is the incoming one converted back
// (the engine converts every gradient to its input's dtype).
Tensor converted_copy(const Tensor& t, DType dtype) {
  Tensor out = make_tensor(t.shape(), dtype, t.device());
  {
    NoGradGuard no_grad;
    copy_(out, t);
  }
  return is_floating(dtype) ? with_grad(to_grad, out, {&t}) : out;
}

Tensor clone(const Tensor& t) { return converted_copy(t, t.dtype()); }

Tensor to(const Tensor& t, DType dtype) { return t.dtype() == dtype ? t : converted_copy(t, dtype); }

// A dense copy on `device` through the runtime of the device that is not the
// CPU (the source's when both are GPUs); its gradient moves back (the engine
// moves every gradient to its input's device).
Tensor to(const Tensor& t, Device device, bool non_blocking) {
  if (t.device() == device) return t;
  Tensor source = contiguous(t);
  Tensor out = make_tensor(t.shape(), t.dtype(), device);
  if (t.numel() > 0) {
    DeviceRuntime& runtime = device_runtime(device.is_cpu() ? t.device().type : device.type);
    runtime.copy(out.data_ptr(), device, source.data_ptr(), t.device(), size_t(t.numel() * element_size(t.dtype())),
                 non_blocking);
  }
  return is_floating(t.dtype()) ? with_grad(to_grad, out, {&t}) : out;
}

Tensor Tensor::contiguous() const { return ember::contiguous(*this); }
Tensor Tensor::clone() const { return ember::clone(*this); }
Tensor Tensor::to(DType dtype) const { return ember::to(*this, dtype); }
Tensor Tensor::to(Device device, bool non_blocking) const { return ember::to(*this, device, non_blocking); }

Tensor& Tensor::copy_(const Tensor& source) {
  ember::copy_(*this, source);
  return *this;
}

Tensor& Tensor::fill_(const Scalar& value) {
  check_in_place_target(*this, "fill_");
  check_scalar_fits("fill_", value, dtype());
  if (should_record({this})) [[unlikely]]
    return assign_in_place(*this, full(shape(), value, {.dtype = dtype(), .device = device()}));
  bump_version();
  if (numel() == 0) return *this;
  ElementwiseLoop loop = ElementwiseLoop::make({this});
  fill_op(device().type, dtype(), loop, value);
  return *this;
}

}  // namespace ember
