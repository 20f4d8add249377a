// Entry points of the matrix products: validate, apply NumPy's matmul rules
// (1-d promotion, batch broadcasting), build one MatmulProblem and dispatch.
// Kernels: kernels/{reference,cpu}/matmul.cpp. Tests: tests/core/test_matmul.cpp.
#include "core/ops/linalg.h"

#include <atomic>

#include "core/autocast_ops.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/linalg_kernels.h"
#include "core/ops/views.h"

namespace ember {

GradSlot matmul_grad("matmul"), addmm_grad("addmm");

Op<void(const MatmulProblem&)> matmul_op("matmul");

namespace {
std::atomic<bool> g_float32_matmul_high{false};
}

void set_float32_matmul_precision(std::string_view precision) {
  EMBER_CHECK(precision == "highest" || precision == "high",
              "set_float32_matmul_precision: unknown precision '{}' (expected 'highest' or 'high')", precision);
  g_float32_matmul_high.store(precision == "high", std::memory_order_relaxed);
}

std::string_view float32_matmul_precision() {
  return g_float32_matmul_high.load(std::memory_order_relaxed) ? "high" : "highest";
}

namespace {

void check_pair(const Tensor& a, const Tensor& b, std::string_view op) {
  EMBER_CHECK(a.defined() && b.defined(), "{}: undefined tensor argument", op);
  EMBER_CHECK(a.device() == b.device(), "{}: expected both operands on the same device, got {} and {}", op, a.device(),
              b.device());
  EMBER_CHECK(a.dtype() == b.dtype(), "{}: expected both operands to have the same dtype, got {} and {}", op,
              a.dtype(), b.dtype());
  EMBER_CHECK(a.dtype() != DType::boolean, "{}: not supported for dtype bool", op);
}

// The matrix dims of a [batch..., rows, cols] view; a size-1 dim gets the
// stride a dense layout would have, so kernels see a plain matrix.
// Reads the inline shape and strides: size(-1) and stride(-1) check and wrap
// the dim on every call, which a 64x64 product notices.
MatrixOperand matrix_of(const Tensor& t) {
  const int last = t.dim() - 1;
  int64_t rows = t.shape()[last - 1], cols = t.shape()[last];
  MatrixOperand operand;
  operand.data = t.data_ptr(), operand.row_stride = t.strides()[last - 1], operand.col_stride = t.strides()[last];
  if (cols == 1) operand.col_stride = 1;
  if (rows == 1) operand.row_stride = operand.col_stride == 1 ? cols : 1;
  return operand;
}

// Fills the batch dims of `problem` from the expanded operands, dropping size-1
// dims and merging neighbours that are contiguous in every operand, so that the
// common [B, m, k] x [k, n] case arrives with one batch dim (or none).
void set_batch(MatmulProblem& problem, const Shape& batch, const Tensor& out, const Tensor& a, const Tensor& b) {
  const Tensor* tensors[3] = {&out, &a, &b};
  MatrixOperand* operands[3] = {&problem.out, &problem.a, &problem.b};
  int n = 0;
  for (int d = 0; d < batch.ndim(); ++d) {
    if (batch[d] == 1) continue;
    bool merge = n > 0;
    for (int i = 0; i < 3 && merge; ++i)
      merge = operands[i]->batch_strides[n - 1] == tensors[i]->stride(d) * batch[d];
    if (merge) {
      problem.batch_shape[n - 1] *= batch[d];
      for (int i = 0; i < 3; ++i) operands[i]->batch_strides[n - 1] = tensors[i]->stride(d);
      continue;
    }
    problem.batch_shape[n] = batch[d];
    for (int i = 0; i < 3; ++i) operands[i]->batch_strides[n] = tensors[i]->stride(d);
    ++n;
  }
  problem.batch_ndim = n;
  // [B, m, k] x [k, n] with a's rows evenly spaced across the batch is one
  // [B * m, k] x [k, n] product: one large GEMM instead of B small ones.
  if (n == 1 && problem.b.batch_strides[0] == 0 &&
      (problem.m == 1 || problem.a.batch_strides[0] == problem.m * problem.a.row_stride)) {
    problem.a.row_stride = problem.m == 1 ? problem.a.batch_strides[0] : problem.a.row_stride;
    problem.m *= problem.batch_shape[0];
    problem.batch_ndim = 0;
  }
}

// [batch_a..., m, k] x [batch_b..., k, n] -> [broadcast(batch_a, batch_b)..., m, n]
// plus `bias` ([m, n]-broadcastable, 2-d products only) when defined.
Tensor multiply(const Tensor& a, const Tensor& b, const Tensor& bias, std::string_view op) {
  int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  Shape batch_a(a.shape().span().first(a.dim() - 2)), batch_b(b.shape().span().first(b.dim() - 2));
  Shape batch = broadcast_shapes(batch_a, batch_b, op);
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out = make_tensor(out_shape, a.dtype(), a.device());
  if (out.numel() == 0) return out;
  if (k == 0) {  // an empty sum: zeros, plus the addend
    out.fill_(0);
    if (bias.defined()) out.copy_(bias);
    return out;
  }
  Shape a_shape = batch, b_shape = batch;
  a_shape.push_back(m), a_shape.push_back(k);
  b_shape.push_back(k), b_shape.push_back(n);
  // Views only where broadcasting needs them: a plain mm makes none (each is an allocation).
  Tensor a_view, b_view;
  const Tensor& a_expanded = a.shape() == a_shape ? a : (a_view = a.expand(a_shape));
  const Tensor& b_expanded = b.shape() == b_shape ? b : (b_view = b.expand(b_shape));
  MatmulProblem problem;
  problem.m = m, problem.n = n, problem.k = k;
  problem.out = matrix_of(out), problem.a = matrix_of(a_expanded), problem.b = matrix_of(b_expanded);
  if (bias.defined()) {
    Tensor bias_expanded = bias.expand({m, n});
    problem.bias.data = bias_expanded.data_ptr();
    problem.bias.row_stride = bias_expanded.stride(0), problem.bias.col_stride = bias_expanded.stride(1);
  }
  set_batch(problem, batch, out, a_expanded, b_expanded);
  matmul_op(a.device().type, a.dtype(), problem);
  return out;
}

void check_inner(const Tensor& a, const Tensor& b, int64_t a_inner, int64_t b_inner, std::string_view op) {
  EMBER_CHECK(a_inner == b_inner, "{}: shapes {} and {} cannot be multiplied ({} != {})", op, a.shape(), b.shape(),
              a_inner, b_inner);
}

// Whether `from` broadcasts to `to` without growing it (NumPy rules).
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.ndim() > to.ndim()) return false;
  for (int d = 1; d <= from.ndim(); ++d)
    if (from[from.ndim() - d] != 1 && from[from.ndim() - d] != to[to.ndim() - d]) return false;
  return true;
}

bool is_one(const Scalar& s) { return s.to_double() == 1.0; }

// The products run in the autocast dtype (Note [Autocast]).
constexpr AutocastKind kLower = AutocastKind::lower_precision;

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (autocast_wants(kLower, {&a, &b})) [[unlikely]]
    return matmul(autocast_input(a, kLower), autocast_input(b, kLower));
  check_pair(a, b, "matmul");
  EMBER_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need to be at least 1-d, got shapes {} and {}",
              a.shape(), b.shape());
  // NumPy: a 1-d left operand is a row [1, k], a 1-d right operand a column [k, 1];
  // the added dim is removed from the result.
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  check_inner(a, b, a2.size(-1), b2.size(-2), "matmul");
  Tensor out = multiply(a2, b2, Tensor(), "matmul");
  if (a.dim() == 1) out = out.squeeze(-2);
  if (b.dim() == 1) out = out.squeeze(-1);
  return with_grad(matmul_grad, out, {&a, &b});
}

Tensor mm(const Tensor& a, const Tensor& b) {
  if (autocast_wants(kLower, {&a, &b})) [[unlikely]]
    return mm(autocast_input(a, kLower), autocast_input(b, kLower));
  check_pair(a, b, "mm");
  EMBER_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-d tensors, got shapes {} and {}", a.shape(), b.shape());
  check_inner(a, b, a.size(1), b.size(0), "mm");
  return with_grad(matmul_grad, multiply(a, b, Tensor(), "mm"), {&a, &b});
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (autocast_wants(kLower, {&a, &b})) [[unlikely]]
    return bmm(autocast_input(a, kLower), autocast_input(b, kLower));
  check_pair(a, b, "bmm");
  EMBER_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-d tensors, got shapes {} and {}", a.shape(), b.shape());
  EMBER_CHECK(a.size(0) == b.size(0), "bmm: batch sizes of shapes {} and {} differ ({} != {})", a.shape(), b.shape(),
              a.size(0), b.size(0));
  check_inner(a, b, a.size(2), b.size(1), "bmm");
  return with_grad(matmul_grad, multiply(a, b, Tensor(), "bmm"), {&a, &b});
}

Tensor addmm(const Tensor& input, const Tensor& a, const Tensor& b, const Scalar& beta, const Scalar& alpha) {
  if (autocast_wants(kLower, {&input, &a, &b})) [[unlikely]]
    return addmm(autocast_input(input, kLower), autocast_input(a, kLower), autocast_input(b, kLower), beta, alpha);
  check_pair(a, b, "addmm");
  check_pair(input, a, "addmm");
  EMBER_CHECK(a.dim() == 2 && b.dim() == 2, "addmm: expected 2-d matrices, got shapes {} and {}", a.shape(),
              b.shape());
  check_inner(a, b, a.size(1), b.size(0), "addmm");
  Shape out_shape{a.size(0), b.size(1)};
  EMBER_CHECK(broadcasts_to(input.shape(), out_shape),
              "addmm: input of shape {} cannot be broadcast to the product's shape {}", input.shape(), out_shape);
  EMBER_CHECK(!is_integral(a.dtype()) || (!alpha.is_floating() && !beta.is_floating()),
              "addmm: for integer tensors ({}), alpha and beta must not be floating point", a.dtype());
  // beta = alpha = 1 is a linear layer: the kernel adds input while the
  // product is still in its accumulator (one rounding for bf16).
  if (is_one(beta) && is_one(alpha)) return with_grad(addmm_grad, multiply(a, b, input, "addmm"), {&input, &a, &b});
  Tensor product = with_grad(matmul_grad, multiply(a, b, Tensor(), "addmm"), {&a, &b});
  if (!is_one(alpha)) product = mul(product, alpha);
  if (beta.to_double() == 0.0) return product;  // as PyTorch: input is ignored, nan included
  return add(product, is_one(beta) ? input : mul(input, beta));
}

}  // namespace ember
