// Creating tensors: filled, ranges, identity, wrapped memory. Random creation
// lives in core/ops/random.cpp.
#include "core/ops/creation.h"

#include <cmath>

#include "core/ops/views.h"
#include "core/scalar_fits.h"

namespace ember {

namespace {
// Only floating tensors can require gradients (as requires_grad_ and PyTorch say): an
// integer leaf would take a gradient truncated to its dtype.
Tensor finish(std::string_view op, Tensor t, const TensorOptions& options) {
  EMBER_CHECK(!options.requires_grad || is_floating(options.dtype),
              "{}: only floating point tensors can require gradients, got {}", op, options.dtype);
  t.impl()->requires_grad = options.requires_grad;
  return t;
}

// full under the name of the op the user called (zeros({-1}) said "empty").
Tensor filled(std::string_view op, const Shape& shape, const Scalar& value, TensorOptions options) {
  check_scalar_fits(op, value, options.dtype);
  Tensor t = make_tensor(shape, options.dtype, options.device, op);
  t.fill_(value);
  return finish(op, t, options);
}
}  // namespace

Tensor empty(const Shape& shape, TensorOptions options) {
  return finish("empty", make_tensor(shape, options.dtype, options.device), options);
}

Tensor full(const Shape& shape, const Scalar& value, TensorOptions options) {
  return filled("full", shape, value, options);
}
Tensor zeros(const Shape& shape, TensorOptions options) { return filled("zeros", shape, 0, options); }
Tensor ones(const Shape& shape, TensorOptions options) { return filled("ones", shape, 1, options); }
Tensor scalar_tensor(const Scalar& value, TensorOptions options) { return full({}, value, options); }

Tensor arange(const Scalar& end) { return arange(0, end, 1); }

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step) {
  bool integral = !start.is_floating() && !end.is_floating() && !step.is_floating();
  return arange(start, end, step, {.dtype = integral ? DType::i64 : DType::f32});
}

namespace {

// Integer bounds into an integer dtype are counted and filled in int64, as
// PyTorch's: through doubles, bounds past 2^53 were rounded (arange(2^53 + 1,
// 2^53 + 4) gave four elements, two of them equal) and arange(2^60, 2^60 + 5)
// came out empty.
Tensor arange_integral(int64_t lo, int64_t hi, int64_t delta, TensorOptions options) {
  EMBER_CHECK(delta != 0, "arange: step must be nonzero");
  EMBER_CHECK((delta > 0 && hi >= lo) || (delta < 0 && hi <= lo),
              "arange: upper bound and step sign are inconsistent (start={}, end={}, step={})", lo, hi, delta);
  const __int128 count = (__int128(hi) - lo + delta - (delta > 0 ? 1 : -1)) / delta;
  EMBER_CHECK(count < __int128(1e12), "arange: {} elements requested", double(count));
  const int64_t n = int64_t(count);
  if (n > 0) {
    check_scalar_fits("arange", lo, options.dtype);
    check_scalar_fits("arange", int64_t(__int128(lo) + __int128(n - 1) * delta), options.dtype);
  }
  Tensor host = make_tensor({n}, DType::i64);
  int64_t* data = host.data_ptr<int64_t>();
  // Every value lies between lo and hi, so none overflows.
  for (int64_t i = 0; i < n; ++i) data[i] = int64_t(__int128(lo) + __int128(i) * delta);
  return finish("arange", host.to(options.dtype).to(options.device), options);
}

}  // namespace

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions options) {
  if (is_integral(options.dtype) && start.is_integral() && end.is_integral() && step.is_integral())
    return arange_integral(start.to_int(), end.to_int(), step.to_int(), options);
  double lo = start.to_double(), hi = end.to_double(), delta = step.to_double();
  EMBER_CHECK(delta != 0, "arange: step must be nonzero");
  EMBER_CHECK(std::isfinite(lo) && std::isfinite(hi), "arange: bounds must be finite, got start={} end={}", lo, hi);
  // An infinite step gave an empty tensor (the count came out 0 or NaN).
  EMBER_CHECK(std::isfinite(delta), "arange: step must be finite, got {}", delta);
  EMBER_CHECK((delta > 0 && hi >= lo) || (delta < 0 && hi <= lo),
              "arange: upper bound and step sign are inconsistent (start={}, end={}, step={})", lo, hi, delta);
  double count = std::ceil((hi - lo) / delta);
  EMBER_CHECK(count < 1e12, "arange: {} elements requested", count);
  int64_t n = int64_t(count);
  if (is_integral(options.dtype)) {
    // PyTorch 2: the length from the numbers given, the values from start
    // and step truncated to integers first. Truncating each value instead
    // gave arange(-0.5, 2, 1) as [0, 0, 1] where PyTorch gives [0, 1, 2].
    EMBER_CHECK(std::abs(lo) < 9.2e18 && std::abs(delta) < 9.2e18,
                "arange: start {} and step {} do not fit {}", lo, delta, options.dtype);
    const int64_t first = int64_t(lo), stride = int64_t(delta);
    EMBER_CHECK(stride != 0, "arange: step {} truncates to 0 for {}", delta, options.dtype);
    if (n > 0) check_scalar_fits("arange", int64_t(__int128(first) + __int128(n - 1) * stride), options.dtype);
    Tensor integers = make_tensor({n}, DType::i64);
    int64_t* values = integers.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) values[i] = int64_t(__int128(first) + __int128(i) * stride);
    return finish("arange", integers.to(options.dtype).to(options.device), options);
  }
  Tensor host = make_tensor({n}, DType::f64);
  double* data = host.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) data[i] = lo + double(i) * delta;
  return finish("arange", host.to(options.dtype).to(options.device), options);
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  EMBER_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got {}", steps);
  Tensor host = make_tensor({steps}, DType::f64);
  double* data = host.data_ptr<double>();
  double delta = steps > 1 ? (end - start) / double(steps - 1) : 0.0;
  // Fill from both ends, as PyTorch does, so the last value is exactly `end`;
  // a single step is `start` (the halfway rule alone gave `end`).
  for (int64_t i = 0; i < steps; ++i)
    data[i] = steps == 1 || i < steps / 2 ? start + delta * double(i) : end - delta * double(steps - 1 - i);
  // The bounds are the extremes: past the dtype's range they became inf (f16
  // 70000), as PyTorch refuses them.
  if (steps > 0) {
    check_scalar_fits("linspace", start, options.dtype);
    check_scalar_fits("linspace", end, options.dtype);
  }
  return finish("linspace", host.to(options.dtype).to(options.device), options);
}

Tensor eye(int64_t n, int64_t m, TensorOptions options) {
  EMBER_CHECK(n >= 0, "eye: n must be non-negative, got {}", n);
  EMBER_CHECK(m >= -1, "eye: m must be non-negative (or -1: m = n), got {}", m);
  if (m == -1) m = n;
  Tensor t = zeros({n, m}, {.dtype = options.dtype, .device = options.device});
  diagonal(t).fill_(1);
  return finish("eye", t, options);
}

Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device) {
  return from_blob(data, shape, contiguous_strides(shape, "from_blob"), dtype, device);
}

Tensor from_blob(void* data, const Shape& shape, const Strides& strides, DType dtype, Device device) {
  EMBER_CHECK(shape.ndim() == strides.ndim(), "from_blob: shape {} and strides {} have different lengths", shape,
              strides);
  int64_t extent = 1;
  for (int d = 0; d < shape.ndim(); ++d) {
    EMBER_CHECK(shape[d] >= 0 && strides[d] >= 0, "from_blob: negative size or stride in shape {} strides {}", shape,
                strides);
    if (shape[d] == 0) extent = 0;
    if (extent) extent += (shape[d] - 1) * strides[d];
  }
  auto storage = std::make_shared<Storage>(data, size_t(extent * element_size(dtype)), device, nullptr);
  return Tensor::make(std::move(storage), dtype, shape, strides, 0);
}

template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
  Shape target = shape.empty() ? Shape{int64_t(values.size())} : shape;
  EMBER_CHECK(target.numel() == int64_t(values.size()), "from_vector: {} values do not fill shape {}", values.size(),
              target);
  Tensor t = make_tensor(target, dtype_of<T>);
  T* data = static_cast<T*>(t.data_ptr());
  for (size_t i = 0; i < values.size(); ++i) data[i] = values[i];
  return t;
}
template Tensor from_vector(const std::vector<float>&, const Shape&);
template Tensor from_vector(const std::vector<double>&, const Shape&);
template Tensor from_vector(const std::vector<Half>&, const Shape&);
template Tensor from_vector(const std::vector<BFloat16>&, const Shape&);
template Tensor from_vector(const std::vector<int32_t>&, const Shape&);
template Tensor from_vector(const std::vector<int64_t>&, const Shape&);
template Tensor from_vector(const std::vector<bool>&, const Shape&);

Tensor empty_like(const Tensor& t) { return empty(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), {.dtype = t.dtype(), .device = t.device()}); }
Tensor full_like(const Tensor& t, const Scalar& value) {
  return full(t.shape(), value, {.dtype = t.dtype(), .device = t.device()});
}

}  // namespace ember
