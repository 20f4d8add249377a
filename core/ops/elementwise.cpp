// Entry points of the element-wise family: validate, promote, broadcast,
// allocate, dispatch. Kernels: kernels/{reference,cpu}/elementwise*.cpp.
#include "core/ops/elementwise.h"

#include "core/ops/creation.h"
#include "core/ops/elementwise_kernels.h"
#include "core/ops/views.h"

namespace ember {

Op<ElementwiseKernel> add_op("add"), sub_op("sub"), mul_op("mul"), div_op("div"), maximum_op("maximum"),
    minimum_op("minimum"), pow_op("pow");
Op<ElementwiseKernel> eq_op("eq"), ne_op("ne"), lt_op("lt"), le_op("le"), gt_op("gt"), ge_op("ge"),
    logical_and_op("logical_and"), logical_or_op("logical_or");
Op<ElementwiseKernel> logical_not_op("logical_not"), isnan_op("isnan"), isinf_op("isinf");
Op<ElementwiseKernel> neg_op("neg"), abs_op("abs"), exp_op("exp"), log_op("log"), log1p_op("log1p"),
    sqrt_op("sqrt"), rsqrt_op("rsqrt"), sin_op("sin"), cos_op("cos"), tanh_op("tanh"), sigmoid_op("sigmoid"),
    relu_op("relu"), gelu_op("gelu"), gelu_tanh_op("gelu_tanh"), silu_op("silu");
Op<void(const ElementwiseLoop&, const Scalar&)> pow_scalar_op("pow_scalar");
Op<void(const ElementwiseLoop&, const Scalar*, const Scalar*)> clamp_op("clamp");
Op<ElementwiseKernel> where_op("where");

namespace {

void check_pair(const Tensor& a, const Tensor& b, std::string_view op) {
  EMBER_CHECK(a.defined() && b.defined(), "{}: undefined tensor argument", op);
  EMBER_CHECK(a.device() == b.device(), "{}: expected both tensors on the same device, got {} and {}", op,
              a.device(), b.device());
}

// The shared path of the binary ops: out = op(a, b) computed in `dtype`.
Tensor binary(const Op<ElementwiseKernel>& op, const Tensor& a, const Tensor& b, DType dtype) {
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op.name());
  Tensor out = make_tensor(shape, dtype, a.device());
  if (out.numel() == 0) return out;
  Tensor a_cast = to(a, dtype), b_cast = to(b, dtype);
  ElementwiseLoop loop = ElementwiseLoop::make({&out, &a_cast, &b_cast});
  op(a.device().type, dtype, loop);
  return out;
}

// Arithmetic: promote, and for `div` make integer inputs true-divide in f32.
Tensor arithmetic(const Op<ElementwiseKernel>& op, const Tensor& a, const Tensor& b) {
  check_pair(a, b, op.name());
  DType dtype = promote_types(a.dtype(), b.dtype());
  if (&op == &div_op && !is_floating(dtype)) dtype = DType::f32;
  EMBER_CHECK(!(dtype == DType::boolean && &op == &sub_op),
              "sub: subtracting bool tensors is not supported; use logical_xor or convert to an integer dtype");
  return binary(op, a, b, dtype);
}

Tensor arithmetic(const Op<ElementwiseKernel>& op, const Tensor& a, const Scalar& b) {
  EMBER_CHECK(a.defined(), "{}: undefined tensor argument", op.name());
  DType dtype = promote_with_scalar(a.dtype(), b);
  return arithmetic(op, a, scalar_tensor(b, {.dtype = dtype, .device = a.device()}));
}

// In place: compute in the promoted dtype, write back into `a`'s dtype and memory.
Tensor& arithmetic_(const Op<ElementwiseKernel>& op, Tensor& a, const Tensor& b) {
  check_pair(a, b, op.name());
  DType dtype = promote_types(a.dtype(), b.dtype());
  if (&op == &div_op && !is_floating(dtype)) dtype = DType::f32;
  EMBER_CHECK(dtype == a.dtype() || (is_floating(a.dtype()) && is_floating(dtype)),
              "{}_: result type {} cannot be cast to the in-place output's dtype {}", op.name(), dtype, a.dtype());
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op.name());
  EMBER_CHECK(shape == a.shape(), "{}_: output of shape {} does not match the broadcast shape {}", op.name(),
              a.shape(), shape);
  a.bump_version();
  if (a.numel() == 0) return a;
  if (dtype != a.dtype()) {
    copy_(a, binary(op, a, b, dtype));
    return a;
  }
  Tensor b_cast = to(b, dtype);
  ElementwiseLoop loop = ElementwiseLoop::make({&a, &a, &b_cast});
  op(a.device().type, dtype, loop);
  return a;
}

Tensor& arithmetic_(const Op<ElementwiseKernel>& op, Tensor& a, const Scalar& b) {
  EMBER_CHECK(a.defined(), "{}_: undefined tensor argument", op.name());
  DType dtype = promote_with_scalar(a.dtype(), b);
  return arithmetic_(op, a, scalar_tensor(b, {.dtype = dtype, .device = a.device()}));
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return arithmetic(add_op, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return arithmetic(sub_op, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return arithmetic(mul_op, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return arithmetic(div_op, a, b); }
Tensor add(const Tensor& a, const Scalar& b) { return arithmetic(add_op, a, b); }
Tensor sub(const Tensor& a, const Scalar& b) { return arithmetic(sub_op, a, b); }
Tensor mul(const Tensor& a, const Scalar& b) { return arithmetic(mul_op, a, b); }
Tensor div(const Tensor& a, const Scalar& b) { return arithmetic(div_op, a, b); }
Tensor rsub(const Tensor& a, const Scalar& b) {
  EMBER_CHECK(a.defined(), "rsub: undefined tensor argument");
  return arithmetic(sub_op, scalar_tensor(b, {.dtype = promote_with_scalar(a.dtype(), b), .device = a.device()}), a);
}
Tensor rdiv(const Tensor& a, const Scalar& b) {
  EMBER_CHECK(a.defined(), "rdiv: undefined tensor argument");
  return arithmetic(div_op, scalar_tensor(b, {.dtype = promote_with_scalar(a.dtype(), b), .device = a.device()}), a);
}

Tensor& add_(Tensor& a, const Tensor& b) { return arithmetic_(add_op, a, b); }
Tensor& sub_(Tensor& a, const Tensor& b) { return arithmetic_(sub_op, a, b); }
Tensor& mul_(Tensor& a, const Tensor& b) { return arithmetic_(mul_op, a, b); }
Tensor& div_(Tensor& a, const Tensor& b) { return arithmetic_(div_op, a, b); }
Tensor& add_(Tensor& a, const Scalar& b) { return arithmetic_(add_op, a, b); }
Tensor& sub_(Tensor& a, const Scalar& b) { return arithmetic_(sub_op, a, b); }
Tensor& mul_(Tensor& a, const Scalar& b) { return arithmetic_(mul_op, a, b); }
Tensor& div_(Tensor& a, const Scalar& b) { return arithmetic_(div_op, a, b); }

Tensor& Tensor::operator+=(const Tensor& other) { return add_(*this, other); }
Tensor& Tensor::operator-=(const Tensor& other) { return sub_(*this, other); }
Tensor& Tensor::operator*=(const Tensor& other) { return mul_(*this, other); }
Tensor& Tensor::operator/=(const Tensor& other) { return div_(*this, other); }
Tensor& Tensor::operator+=(const Scalar& other) { return add_(*this, other); }
Tensor& Tensor::operator-=(const Scalar& other) { return sub_(*this, other); }
Tensor& Tensor::operator*=(const Scalar& other) { return mul_(*this, other); }
Tensor& Tensor::operator/=(const Scalar& other) { return div_(*this, other); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, b); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Scalar& a, const Tensor& b) { return rsub(b, a); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Scalar& a, const Tensor& b) { return rdiv(b, a); }

}  // namespace ember
