// Entry points of the element-wise family: validate, promote, broadcast,
// allocate, dispatch. Kernels: kernels/{reference,cpu}/elementwise*.cpp.
#include "core/ops/elementwise.h"

#include <cmath>
#include <limits>
#include <optional>

#include "core/half.h"
#include "core/memory_overlap.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise_kernels.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"
#include "core/scalar_fits.h"

namespace ember {

Op<ElementwiseKernel> add_op("add"), sub_op("sub"), mul_op("mul"), div_op("div"), maximum_op("maximum"),
    minimum_op("minimum"), pow_op("pow");
Op<ElementwiseKernel> fmod_op("fmod"), remainder_op("remainder"), floor_divide_op("floor_divide");
Op<ElementwiseKernel> eq_op("eq"), ne_op("ne"), lt_op("lt"), le_op("le"), gt_op("gt"), ge_op("ge"),
    logical_and_op("logical_and"), logical_or_op("logical_or");
Op<ElementwiseKernel> logical_not_op("logical_not"), isnan_op("isnan"), isinf_op("isinf");
Op<ElementwiseKernel> neg_op("neg"), abs_op("abs"), exp_op("exp"), log_op("log"), log1p_op("log1p"),
    sqrt_op("sqrt"), rsqrt_op("rsqrt"), sin_op("sin"), cos_op("cos"), tanh_op("tanh"), erf_op("erf"), sigmoid_op("sigmoid"),
    relu_op("relu"), gelu_op("gelu"), gelu_tanh_op("gelu_tanh"), silu_op("silu");
Op<ElementwiseKernel> floor_op("floor"), ceil_op("ceil"), round_op("round"), trunc_op("trunc"), sign_op("sign");
Op<ElementwiseKernel> threshold_backward_op("threshold_backward"), gelu_backward_op("gelu_backward"),
    gelu_tanh_backward_op("gelu_tanh_backward"), silu_backward_op("silu_backward");
Op<void(const ElementwiseLoop&, const Scalar&)> pow_scalar_op("pow_scalar");
Op<void(const ElementwiseLoop&, const Scalar*, const Scalar*)> clamp_op("clamp");
Op<ElementwiseKernel> where_op("where");
Op<void(const ElementwiseLoop&, const Scalar&)> addcmul_op("addcmul");

GradSlot add_grad("add"), sub_grad("sub"), mul_grad("mul"), div_grad("div"), neg_grad("neg"), abs_grad("abs"),
    exp_grad("exp"), log_grad("log"), log1p_grad("log1p"), sqrt_grad("sqrt"), rsqrt_grad("rsqrt"), sin_grad("sin"),
    cos_grad("cos"), tanh_grad("tanh"), erf_grad("erf"), sigmoid_grad("sigmoid"), relu_grad("relu"), gelu_grad("gelu"),
    gelu_tanh_grad("gelu_tanh"), silu_grad("silu"), pow_scalar_grad("pow_scalar"), pow_grad("pow"),
    maximum_grad("maximum"), minimum_grad("minimum"), clamp_grad("clamp"), where_grad("where"), addcmul_grad("addcmul"),
    floor_grad("floor"), ceil_grad("ceil"), round_grad("round"), trunc_grad("trunc"), sign_grad("sign"),
    fmod_grad("fmod"), remainder_grad("remainder"), floor_divide_grad("floor_divide");

DType result_type(std::initializer_list<const Tensor*> tensors) {
  std::optional<DType> with_dims, zero_dim;
  for (const Tensor* t : tensors) {
    std::optional<DType>& result = t->dim() == 0 ? zero_dim : with_dims;
    result = result ? promote_types(*result, t->dtype()) : t->dtype();
  }
  if (!with_dims || !zero_dim) return with_dims ? *with_dims : *zero_dim;
  auto category = [](DType d) { return d == DType::boolean ? 0 : is_floating(d) ? 2 : 1; };
  return category(*zero_dim) > category(*with_dims) ? promote_types(*with_dims, *zero_dim) : *with_dims;
}

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
  // Converted copies only when needed: no reference-count traffic on the common path.
  Tensor a_cast, b_cast;
  const Tensor& a_in = a.dtype() == dtype ? a : (a_cast = to(a, dtype));
  const Tensor& b_in = b.dtype() == dtype ? b : (b_cast = to(b, dtype));
  ElementwiseLoop loop = ElementwiseLoop::make({&out, &a_in, &b_in});
  op(a.device().type, dtype, loop);
  return out;
}

// The gradient slot of each binary arithmetic op.
const GradSlot& slot_of(const Op<ElementwiseKernel>& op) {
  return &op == &add_op ? add_grad : &op == &sub_op ? sub_grad : &op == &mul_op ? mul_grad : div_grad;
}

// PyTorch refuses a bool operand of a subtraction whatever the other one is
// (f32 - bool too), in place or not: it is never what was meant by a mask.
void check_not_bool_subtraction(const Op<ElementwiseKernel>& op, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(!(&op == &sub_op && (a.dtype() == DType::boolean || b.dtype() == DType::boolean)),
              "sub: subtraction with a bool tensor ({} - {}) is not supported; to invert a mask use logical_not, "
              "or convert to an integer dtype",
              a.dtype(), b.dtype());
}

// Note [Half-precision arithmetic with a scalar]: f16 or bf16 arithmetic
// with a number (or a 0-d f32/f64 tensor) uses the number's full value, as
// PyTorch 2 does: rounding it to the tensor's dtype first made f16 x / 1e5
// all zeros (1e5 is inf in f16), x * 1e-7 19% too large (a subnormal), and
// bf16 x * (1/3.) a unit in the last place off for a third of the elements.
// The kernels compute f16 and bf16 in f32 with operands of the tensor's
// dtype, so a number that dtype cannot hold exactly sends the op through f32
// (three passes instead of one); an exact one (0.5, 2, 0.125) keeps the fast
// path, whose result is the same. On a device the value is not read (that
// would wait for the device): there every such number goes through f32.
bool needs_wider_operand(DType dtype, const Tensor& operand) {
  if (operand.dim() != 0 || operand.dtype() == dtype || !is_floating(operand.dtype())) return false;
  if (operand.dtype() == DType::f16 || operand.dtype() == DType::bf16) return false;
  if (operand.device().type != DeviceType::cpu) return true;
  const double value = operand.item<double>();
  const float narrow = dtype == DType::f16 ? float(Half(float(value))) : float(BFloat16(float(value)));
  return !(double(narrow) == value);  // a NaN goes through f32 too
}

// The dtype `op` computes a result of `dtype` in: f32 for a half-precision
// result with a number it cannot hold exactly (Note [Half-precision arithmetic with a scalar]).
DType compute_dtype(DType dtype, const Tensor& a, const Tensor& b) {
  if (dtype != DType::f16 && dtype != DType::bf16) return dtype;
  return needs_wider_operand(dtype, a) || needs_wider_operand(dtype, b) ? DType::f32 : dtype;
}

// Arithmetic: promote, and for `div` make integer inputs true-divide in f32.
Tensor arithmetic(const Op<ElementwiseKernel>& op, const Tensor& a, const Tensor& b) {
  check_pair(a, b, op.name());
  check_not_bool_subtraction(op, a, b);
  DType dtype = result_type({&a, &b});
  if (&op == &div_op && !is_floating(dtype)) dtype = DType::f32;
  const DType compute = compute_dtype(dtype, a, b);
  Tensor out = binary(op, a, b, compute);
  return with_grad(slot_of(op), compute == dtype ? out : to(out, dtype), {&a, &b});
}

// `value` as a 0-d operand of `dtype`, converted as the kernels convert: arithmetic and
// comparisons with a number past the dtype's range wrap (integers) or meet inf, as in
// PyTorch (an int32 tensor + 5000000000); only the ops that store a number refuse one
// that does not fit (check_scalar_fits), so this skips scalar_tensor's check.
Tensor operand_tensor(const Scalar& value, DType dtype, Device device) {
  Tensor t = make_tensor({}, dtype, device);
  ElementwiseLoop loop = ElementwiseLoop::make({&t});
  fill_op(device.type, dtype, loop, value);
  return t;
}

// A number meeting an f16 or bf16 tensor goes in as f64, which holds it, and
// takes no part in promotion (Note [Half-precision arithmetic with a scalar]).
DType operand_dtype(DType like, const Scalar& value) {
  const DType dtype = promote_with_scalar(like, value);
  return (dtype == DType::f16 || dtype == DType::bf16) && !value.is_bool() ? DType::f64 : dtype;
}

Tensor as_tensor(const Scalar& value, const Tensor& like, std::string_view op) {
  EMBER_CHECK(like.defined(), "{}: undefined tensor argument", op);
  return operand_tensor(value, operand_dtype(like.dtype(), value), like.device());
}

// An integer number dividing (or divided by) an integer tensor: the division
// runs in floating point, so the number goes in as int64, which holds it, not
// in the tensor's dtype, where it wrapped (an int32 x / 5000000000 divided by
// 705032704; PyTorch divides by 5e9).
Tensor division_operand(const Scalar& value, const Tensor& like, std::string_view op) {
  EMBER_CHECK(like.defined(), "{}: undefined tensor argument", op);
  const DType dtype = operand_dtype(like.dtype(), value);
  return operand_tensor(value, is_floating(dtype) ? dtype : DType::i64, like.device());
}

Tensor arithmetic(const Op<ElementwiseKernel>& op, const Tensor& a, const Scalar& b) {
  return arithmetic(op, a, as_tensor(b, a, op.name()));
}

// In place under autograd (Note [In-place ops and autograd]): computed out of
// place, in a's dtype, then written into `a`. mul and div save operand values
// for their gradients (a for db, b for da), and `a` is about to be
// overwritten: the saved a is a copy that keeps a's history, and so is b when
// it shares a's memory. Saving `a` itself made backward refuse (its version
// changed) and left a cycle (a's grad_fn saved a). add and sub save nothing.
Tensor& recorded_in_place(const Op<ElementwiseKernel>& op, Tensor& a, const Tensor& b) {
  const bool saves_values = &op == &mul_op || &op == &div_op;
  Tensor a_value = saves_values && b.requires_grad() ? clone(a) : a;
  Tensor b_value = b.is_same(a) ? a_value : (saves_values && b.storage() == a.storage() ? clone(b) : b);
  return assign_in_place(a, to(arithmetic(op, a_value, b_value), a.dtype()));
}

// In place: compute in the promoted dtype, write back into `a`'s dtype and memory.
// The dtype is checked before recording too: a bool or integer `a` given a
// floating result under autograd took a grad_fn it could never use, and the
// node and the tensor then held each other (a leak the op fuzzer found).
Tensor& arithmetic_(const Op<ElementwiseKernel>& op, Tensor& a, const Tensor& b) {
  check_pair(a, b, op.name());
  check_not_bool_subtraction(op, a, b);
  // The in-place name ("add_") is formatted only for a target that may be
  // refused, so that the common path pays no formatting.
  if (a.impl()->no_grad_view) [[unlikely]]
    check_in_place_target(a, fmt::format("{}_", op.name()));
  // Only a non-contiguous target can share memory between its elements; the
  // common contiguous one pays no name formatting on this per-op path.
  if (!a.is_contiguous()) check_no_internal_overlap(a, fmt::format("{}_", op.name()));
  DType dtype = result_type({&a, &b});
  if (&op == &div_op && !is_floating(dtype)) dtype = DType::f32;
  // PyTorch's canCast: within a kind (floating into floating, integer into
  // integer, wrapping as its cast does), never floating into integer or bool.
  EMBER_CHECK(dtype == a.dtype() || (is_floating(a.dtype()) && is_floating(dtype)) ||
                  (is_integral(a.dtype()) && is_integral(dtype)),
              "{}_: result type {} cannot be cast to the in-place output's dtype {}", op.name(), dtype, a.dtype());
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op.name());
  EMBER_CHECK(shape == a.shape(), "{}_: output of shape {} does not match the broadcast shape {}", op.name(),
              a.shape(), shape);
  if (should_record({&a, &b})) [[unlikely]]
    return recorded_in_place(op, a, b);
  a.bump_version();
  if (a.numel() == 0) return a;
  const DType compute = compute_dtype(dtype, a, b);
  if (compute != a.dtype()) {
    copy_(a, binary(op, a, b, compute));
    return a;
  }
  Tensor b_cast = to(b, dtype);
  if (source_overlaps_target(a, b_cast)) b_cast = clone(b_cast);
  ElementwiseLoop loop = ElementwiseLoop::make({&a, &a, &b_cast});
  op(a.device().type, dtype, loop);
  return a;
}

Tensor& arithmetic_(const Op<ElementwiseKernel>& op, Tensor& a, const Scalar& b) {
  return arithmetic_(op, a, as_tensor(b, a, op.name()));
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return arithmetic(add_op, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return arithmetic(sub_op, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return arithmetic(mul_op, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return arithmetic(div_op, a, b); }
Tensor add(const Tensor& a, const Scalar& b) { return arithmetic(add_op, a, b); }
Tensor sub(const Tensor& a, const Scalar& b) { return arithmetic(sub_op, a, b); }
Tensor mul(const Tensor& a, const Scalar& b) { return arithmetic(mul_op, a, b); }
Tensor div(const Tensor& a, const Scalar& b) { return arithmetic(div_op, a, division_operand(b, a, "div")); }
Tensor rsub(const Tensor& a, const Scalar& b) { return arithmetic(sub_op, as_tensor(b, a, "rsub"), a); }
Tensor rdiv(const Tensor& a, const Scalar& b) { return arithmetic(div_op, division_operand(b, a, "rdiv"), a); }

// One pass over four operands instead of two ops and a temporary (a*b+c moves
// 5 arrays, addcmul 4). The value does not take part in promotion, as in PyTorch.
Tensor addcmul(const Tensor& input, const Tensor& tensor1, const Tensor& tensor2, const Scalar& value) {
  check_pair(input, tensor1, "addcmul");
  check_pair(input, tensor2, "addcmul");
  DType dtype = result_type({&input, &tensor1, &tensor2});
  EMBER_CHECK(dtype != DType::boolean, "addcmul: not supported for bool tensors");
  EMBER_CHECK(!value.is_floating() || is_floating(dtype),
              "addcmul: value {} is a floating-point number but the tensors are {}", value.to_double(), dtype);
  Shape shape = broadcast_shapes(broadcast_shapes(input.shape(), tensor1.shape(), "addcmul"), tensor2.shape(),
                                 "addcmul");
  Tensor out = make_tensor(shape, dtype, input.device());
  if (out.numel() > 0) {
    Tensor input_cast = to(input, dtype), tensor1_cast = to(tensor1, dtype), tensor2_cast = to(tensor2, dtype);
    ElementwiseLoop loop = ElementwiseLoop::make({&out, &input_cast, &tensor1_cast, &tensor2_cast});
    addcmul_op(input.device().type, dtype, loop, value);
  }
  return with_grad(addcmul_grad, out, {&input, &tensor1, &tensor2}, &value);
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
Tensor operator-(const Tensor& a) { return neg(a); }

// Unary math. The floating functions compute integer and bool inputs in f32;
// neg, abs and relu keep integer dtypes and refuse bool, as PyTorch does.
namespace {

void check_defined(const Tensor& a, std::string_view op) {
  EMBER_CHECK(a.defined(), "{}: undefined tensor argument", op);
}

// out = op(a) with out and the (converted) input both of `dtype`.
Tensor unary(const Op<ElementwiseKernel>& op, const Tensor& a, DType dtype) {
  Tensor out = make_tensor(a.shape(), dtype, a.device());
  if (out.numel() == 0) return out;
  Tensor in = to(a, dtype);
  ElementwiseLoop loop = ElementwiseLoop::make({&out, &in});
  op(a.device().type, dtype, loop);
  return out;
}

Tensor floating_unary(const Op<ElementwiseKernel>& op, const Tensor& a) {
  check_defined(a, op.name());
  return unary(op, a, is_floating(a.dtype()) ? a.dtype() : DType::f32);
}

Tensor signed_unary(const Op<ElementwiseKernel>& op, const Tensor& a) {
  check_defined(a, op.name());
  EMBER_CHECK(a.dtype() != DType::boolean, "{}: not supported for bool tensors{}", op.name(),
              &op == &neg_op ? "; to invert a mask use logical_not" : "");
  return unary(op, a, a.dtype());
}

// Integers are whole already, so rounding gives them back, as PyTorch's does.
Tensor rounding(const Op<ElementwiseKernel>& op, const Tensor& a) {
  check_defined(a, op.name());
  EMBER_CHECK(a.dtype() != DType::boolean, "{}: not supported for bool tensors", op.name());
  return is_floating(a.dtype()) ? unary(op, a, a.dtype()) : a.clone();
}

// out(bool) = predicate(a), keyed by a's own dtype: no conversion.
Tensor predicate(const Op<ElementwiseKernel>& op, const Tensor& a) {
  check_defined(a, op.name());
  Tensor out = make_tensor(a.shape(), DType::boolean, a.device());
  if (out.numel() == 0) return out;
  ElementwiseLoop loop = ElementwiseLoop::make({&out, &a});
  op(a.device().type, a.dtype(), loop);
  return out;
}

// out(bool) = op(a, b) after converting both to their common dtype.
Tensor compare(const Op<ElementwiseKernel>& op, const Tensor& a, const Tensor& b, DType dtype) {
  Shape shape = broadcast_shapes(a.shape(), b.shape(), op.name());
  Tensor out = make_tensor(shape, DType::boolean, a.device());
  if (out.numel() == 0) return out;
  Tensor a_cast = to(a, dtype), b_cast = to(b, dtype);
  ElementwiseLoop loop = ElementwiseLoop::make({&out, &a_cast, &b_cast});
  op(a.device().type, dtype, loop);
  return out;
}

Tensor compare(const Op<ElementwiseKernel>& op, const Tensor& a, const Tensor& b) {
  check_pair(a, b, op.name());
  return compare(op, a, b, result_type({&a, &b}));
}

Tensor compare(const Op<ElementwiseKernel>& op, const Tensor& a, const Scalar& b) {
  check_defined(a, op.name());
  DType dtype = promote_with_scalar(a.dtype(), b);
  return compare(op, a, operand_tensor(b, dtype, a.device()), dtype);
}

Tensor clamp(const Tensor& a, const Scalar* low, const Scalar* high, std::string_view name) {
  check_defined(a, name);
  DType dtype = a.dtype();
  if (low) dtype = promote_with_scalar(dtype, *low);
  if (high) dtype = promote_with_scalar(dtype, *high);
  EMBER_CHECK(dtype != DType::boolean, "{}: not supported for bool tensors", name);
  // A bound past the range on its own side (a min below every int32) changes nothing and
  // saturates exactly; past the other side the result would be a number the dtype cannot
  // hold, which PyTorch refuses too.
  if (low && scalar_range(*low, dtype) != ScalarRange::below) check_scalar_fits(name, *low, dtype);
  if (high && scalar_range(*high, dtype) != ScalarRange::above) check_scalar_fits(name, *high, dtype);
  Tensor out = make_tensor(a.shape(), dtype, a.device());
  // A NaN bound makes every element NaN, as in PyTorch (min and max would
  // each drop it); the gradient is then 0, no element being between the bounds.
  const bool nan_bound = is_floating(dtype) && ((low && std::isnan(low->to_double())) ||
                                                 (high && std::isnan(high->to_double())));
  if (out.numel() > 0 && nan_bound) {
    out.fill_(std::numeric_limits<double>::quiet_NaN());
  } else if (out.numel() > 0) {
    Tensor in = to(a, dtype);
    ElementwiseLoop loop = ElementwiseLoop::make({&out, &in});
    clamp_op(a.device().type, dtype, loop, low, high);
  }
  ClampParams params{low, high};
  return with_grad(clamp_grad, out, {&a}, &params);
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b, DType dtype) {
  EMBER_CHECK(condition.defined(), "where: undefined tensor argument");
  EMBER_CHECK(condition.dtype() == DType::boolean, "where: expected condition to be a bool tensor, got {}",
              condition.dtype());
  EMBER_CHECK(condition.device() == a.device(), "where: expected condition on {}, got {}", a.device(),
              condition.device());
  Shape shape = broadcast_shapes(broadcast_shapes(condition.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = make_tensor(shape, dtype, a.device());
  if (out.numel() > 0) {
    Tensor a_cast = to(a, dtype), b_cast = to(b, dtype);
    ElementwiseLoop loop = ElementwiseLoop::make({&out, &condition, &a_cast, &b_cast});
    where_op(a.device().type, dtype, loop);
  }
  return with_grad(where_grad, out, {&condition, &a, &b});
}

}  // namespace

Tensor neg(const Tensor& a) { return with_grad(neg_grad, signed_unary(neg_op, a), {&a}); }
Tensor abs(const Tensor& a) { return with_grad(abs_grad, signed_unary(abs_op, a), {&a}); }
Tensor floor(const Tensor& a) { return with_grad(floor_grad, rounding(floor_op, a), {&a}); }
Tensor ceil(const Tensor& a) { return with_grad(ceil_grad, rounding(ceil_op, a), {&a}); }
Tensor round(const Tensor& a) { return with_grad(round_grad, rounding(round_op, a), {&a}); }
Tensor trunc(const Tensor& a) { return with_grad(trunc_grad, rounding(trunc_op, a), {&a}); }
Tensor sign(const Tensor& a) {
  check_defined(a, "sign");
  return a.dtype() == DType::boolean ? a.clone() : with_grad(sign_grad, signed_unary(sign_op, a), {&a});
}
Tensor relu(const Tensor& a) { return with_grad(relu_grad, signed_unary(relu_op, a), {&a}); }
Tensor exp(const Tensor& a) { return with_grad(exp_grad, floating_unary(exp_op, a), {&a}); }
Tensor log(const Tensor& a) { return with_grad(log_grad, floating_unary(log_op, a), {&a}); }
Tensor log1p(const Tensor& a) { return with_grad(log1p_grad, floating_unary(log1p_op, a), {&a}); }
Tensor sqrt(const Tensor& a) { return with_grad(sqrt_grad, floating_unary(sqrt_op, a), {&a}); }
Tensor rsqrt(const Tensor& a) { return with_grad(rsqrt_grad, floating_unary(rsqrt_op, a), {&a}); }
Tensor sin(const Tensor& a) { return with_grad(sin_grad, floating_unary(sin_op, a), {&a}); }
Tensor cos(const Tensor& a) { return with_grad(cos_grad, floating_unary(cos_op, a), {&a}); }
Tensor tanh(const Tensor& a) { return with_grad(tanh_grad, floating_unary(tanh_op, a), {&a}); }
Tensor erf(const Tensor& a) { return with_grad(erf_grad, floating_unary(erf_op, a), {&a}); }
Tensor sigmoid(const Tensor& a) { return with_grad(sigmoid_grad, floating_unary(sigmoid_op, a), {&a}); }
Tensor silu(const Tensor& a) { return with_grad(silu_grad, floating_unary(silu_op, a), {&a}); }
Tensor gelu(const Tensor& a, GeluApproximation approximate) {
  bool tanh_form = approximate == GeluApproximation::tanh;
  return with_grad(tanh_form ? gelu_tanh_grad : gelu_grad, floating_unary(tanh_form ? gelu_tanh_op : gelu_op, a), {&a});
}

namespace {

// out = op(grad, input): one shape, computed in their common floating dtype.
Tensor activation_backward(const Op<ElementwiseKernel>& op, const Tensor& grad, const Tensor& input) {
  check_pair(grad, input, op.name());
  EMBER_CHECK(grad.shape() == input.shape(), "{}: grad of shape {} and input of shape {} differ", op.name(),
              grad.shape(), input.shape());
  DType dtype = promote_types(grad.dtype(), input.dtype());
  EMBER_CHECK(is_floating(dtype), "{}: expected floating tensors, got {} and {}", op.name(), grad.dtype(),
              input.dtype());
  return binary(op, grad, input, dtype);
}

}  // namespace

Tensor threshold_backward(const Tensor& grad, const Tensor& input) {
  return activation_backward(threshold_backward_op, grad, input);
}
Tensor gelu_backward(const Tensor& grad, const Tensor& input, GeluApproximation approximate) {
  return activation_backward(approximate == GeluApproximation::tanh ? gelu_tanh_backward_op : gelu_backward_op, grad,
                             input);
}
Tensor silu_backward(const Tensor& grad, const Tensor& input) {
  return activation_backward(silu_backward_op, grad, input);
}

// pow promotes like arithmetic (int ** int stays int, int ** 0.5 is f32).
Tensor pow(const Tensor& a, const Scalar& exponent) {
  check_defined(a, "pow");
  DType dtype = promote_with_scalar(a.dtype(), exponent);
  EMBER_CHECK(dtype != DType::boolean, "pow: not supported for bool tensors with a bool exponent");
  EMBER_CHECK(is_floating(dtype) || exponent.to_int() >= 0,
              "pow: integers to negative integer powers are not allowed ({} tensor, exponent {})", dtype,
              exponent.to_int());
  check_scalar_fits("pow", exponent, dtype);
  Tensor out = make_tensor(a.shape(), dtype, a.device());
  if (out.numel() > 0) {
    Tensor in = to(a, dtype);
    ElementwiseLoop loop = ElementwiseLoop::make({&out, &in});
    pow_scalar_op(a.device().type, dtype, loop, exponent);
  }
  return with_grad(pow_scalar_grad, out, {&a}, &exponent);
}

// Integer bases with negative integer exponents give 0 (or +-1 for bases +-1), as in PyTorch.
Tensor pow(const Tensor& a, const Tensor& exponent) {
  check_pair(a, exponent, "pow");
  DType dtype = result_type({&a, &exponent});
  EMBER_CHECK(dtype != DType::boolean, "pow: not supported for two bool tensors");
  return with_grad(pow_grad, binary(pow_op, a, exponent, dtype), {&a, &exponent});
}

// The division family: promoted as arithmetic, bool refused, and an integer
// divisor of 0 refused before any kernel runs (PyTorch raises
// ZeroDivisionError; the kernels would trap).
namespace {
Tensor division_family(const Op<ElementwiseKernel>& op, const GradSlot& slot, const Tensor& a, const Tensor& b) {
  check_pair(a, b, op.name());
  const DType dtype = result_type({&a, &b});
  EMBER_CHECK(dtype != DType::boolean, "{}: not supported for bool tensors ({} and {})", op.name(), a.dtype(),
              b.dtype());
  if (!is_floating(dtype))
    EMBER_CHECK(b.numel() == 0 || !any(eq(b, 0)).item<bool>(),
                "{}: integer division by zero (the {} divisor of shape {} holds a 0)", op.name(), b.dtype(), b.shape());
  const DType compute = compute_dtype(dtype, a, b);
  Tensor out = binary(op, a, b, compute);
  return with_grad(slot, compute == dtype ? out : to(out, dtype), {&a, &b});
}
}  // namespace

Tensor fmod(const Tensor& a, const Tensor& b) { return division_family(fmod_op, fmod_grad, a, b); }
Tensor fmod(const Tensor& a, const Scalar& b) { return fmod(a, as_tensor(b, a, "fmod")); }
Tensor remainder(const Tensor& a, const Tensor& b) { return division_family(remainder_op, remainder_grad, a, b); }
Tensor remainder(const Tensor& a, const Scalar& b) { return remainder(a, as_tensor(b, a, "remainder")); }
Tensor floor_divide(const Tensor& a, const Tensor& b) {
  return division_family(floor_divide_op, floor_divide_grad, a, b);
}
Tensor floor_divide(const Tensor& a, const Scalar& b) { return floor_divide(a, as_tensor(b, a, "floor_divide")); }

// maximum and minimum propagate nan from either side.
Tensor maximum(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "maximum");
  return with_grad(maximum_grad, binary(maximum_op, a, b, result_type({&a, &b})), {&a, &b});
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  check_pair(a, b, "minimum");
  return with_grad(minimum_grad, binary(minimum_op, a, b, result_type({&a, &b})), {&a, &b});
}

Tensor clamp(const Tensor& a, const Scalar& min, const Scalar& max) { return clamp(a, &min, &max, "clamp"); }
Tensor clamp_min(const Tensor& a, const Scalar& min) { return clamp(a, &min, nullptr, "clamp_min"); }
Tensor clamp_max(const Tensor& a, const Scalar& max) { return clamp(a, nullptr, &max, "clamp_max"); }

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  check_pair(a, b, "where");
  return where(condition, a, b, result_type({&a, &b}));
}
Tensor where(const Tensor& condition, const Tensor& a, const Scalar& b) {
  check_defined(a, "where");
  DType dtype = promote_with_scalar(a.dtype(), b);
  // A floating number past the dtype's range selects inf, as torch.where gives
  // (it selects, where masked_fill stores and PyTorch refuses); an integer
  // one has no value to select.
  if (!is_floating(dtype)) check_scalar_fits("where", b, dtype);
  return where(condition, a, operand_tensor(b, dtype, a.device()), dtype);
}

Tensor eq(const Tensor& a, const Tensor& b) { return compare(eq_op, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(ne_op, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(lt_op, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(le_op, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(gt_op, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(ge_op, a, b); }
Tensor eq(const Tensor& a, const Scalar& b) { return compare(eq_op, a, b); }
Tensor ne(const Tensor& a, const Scalar& b) { return compare(ne_op, a, b); }
Tensor lt(const Tensor& a, const Scalar& b) { return compare(lt_op, a, b); }
Tensor le(const Tensor& a, const Scalar& b) { return compare(le_op, a, b); }
Tensor gt(const Tensor& a, const Scalar& b) { return compare(gt_op, a, b); }
Tensor ge(const Tensor& a, const Scalar& b) { return compare(ge_op, a, b); }
// Any dtype: nonzero (nan included) is true.
Tensor logical_and(const Tensor& a, const Tensor& b) { return compare(logical_and_op, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return compare(logical_or_op, a, b); }
Tensor logical_not(const Tensor& a) { return predicate(logical_not_op, a); }
// Integer and bool tensors hold no nan or inf: all false.
Tensor isnan(const Tensor& a) { return predicate(isnan_op, a); }
Tensor isinf(const Tensor& a) { return predicate(isinf_op, a); }

}  // namespace ember
