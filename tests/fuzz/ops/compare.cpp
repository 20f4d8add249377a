// The op fuzzer's comparison (see compare.h and README_ops.md, "Tolerances").
#include "fuzz/ops/compare.h"

#include <cmath>
#include <limits>
#include <vector>

namespace ember::fuzz {

namespace {

double largest_finite(DType dtype) {
  switch (dtype) {
    case DType::f16: return 65504.0;
    case DType::bf16: return 3.3895313892515355e38;
    case DType::f32: return double(std::numeric_limits<float>::max());
    default: return std::numeric_limits<double>::max();
  }
}

// The rounding unit and range of the type the fast kernels accumulate in:
// the 16-bit floats and f32 sum in f32 (as PyTorch's CPU kernels do), the
// reference kernels in f64.
double accumulator_epsilon(DType dtype) {
  return dtype == DType::f64 ? std::numeric_limits<double>::epsilon()
                             : double(std::numeric_limits<float>::epsilon());
}
double accumulator_max(DType dtype) {
  return dtype == DType::f64 ? std::numeric_limits<double>::max() : double(std::numeric_limits<float>::max());
}
double accumulator_min(DType dtype) {
  return dtype == DType::f64 ? std::numeric_limits<double>::min() : double(std::numeric_limits<float>::min());
}

// The flat index as a multi-index, for reports.
std::string position(const Shape& shape, int64_t flat) {
  Shape index = Shape::filled(shape.ndim(), 0);
  for (int d = shape.ndim() - 1; d >= 0; --d) {
    index[d] = flat % std::max<int64_t>(shape[d], 1);
    flat /= std::max<int64_t>(shape[d], 1);
  }
  return index.str();
}

// One side overflowed to inf where the other rounded to the largest finite
// value (or near it, within the tolerance): which side crosses depends only on
// the last rounding, the same legitimate difference as any other.
bool overflow_boundary(double a, double b, DType dtype) {
  if (std::isnan(a) || std::isnan(b) || (std::isinf(a) && std::isinf(b))) return false;
  double finite = std::isinf(a) ? b : a, infinite = std::isinf(a) ? a : b;
  return std::signbit(finite) == std::signbit(infinite) &&
         std::abs(finite) >= largest_finite(dtype) / (1 + 2 * tolerance(dtype));
}

}  // namespace

std::string difference(const Tensor& fast, const Tensor& reference, const Expectation& expected) {
  if (fast.defined() != reference.defined())
    return fmt::format("the fast result is {}defined, the reference one {}defined", fast.defined() ? "" : "un",
                       reference.defined() ? "" : "un");
  if (!fast.defined()) return {};
  if (fast.shape() != reference.shape())
    return fmt::format("shape {} vs reference {}", fast.shape(), reference.shape());
  if (fast.dtype() != reference.dtype())
    return fmt::format("dtype {} vs reference {}", fast.dtype(), reference.dtype());
  const DType dtype = fast.dtype();
  if (!is_floating(dtype)) {
    std::vector<int64_t> a = fast.to_vector<int64_t>(), e = reference.to_vector<int64_t>();
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i] != e[i])
        return fmt::format("element {} (flat {}): {} vs reference {}", position(fast.shape(), int64_t(i)), i, a[i], e[i]);
    return {};
  }
  std::vector<double> a = fast.to_vector<double>(), e = reference.to_vector<double>();
  std::vector<double> magnitude;
  if (expected.accuracy == Accuracy::scaled && expected.magnitude.defined() &&
      expected.magnitude.numel() == fast.numel())
    magnitude = expected.magnitude.to_vector<double>();
  const double tol = std::max(tolerance(dtype), tolerance(expected.precision));
  // Rounding error of a sum of n terms is at most (n - 1) eps sum|terms| in
  // any order and grows like sqrt(n) eps sum|terms| in practice; the larger of
  // that and the dtype's tolerance, times sum|terms|.
  const double sum_scale = std::max(tol, std::sqrt(double(expected.terms)) *
                                                    std::max(accumulator_epsilon(dtype), accumulator_epsilon(expected.precision)));
  // Terms below the accumulator's smallest normal number lose their digits
  // (a p-norm's |x|^p underflows in f32 where the reference's f64 keeps it):
  // an absolute allowance of n such terms, in the result's units.
  const double underflow = std::pow(accumulator_min(dtype) * double(expected.terms), 1 / expected.power);
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == e[i] || (std::isnan(a[i]) && std::isnan(e[i]))) continue;
    double allowed = 0;
    if (expected.accuracy != Accuracy::exact) {
      if (!std::isfinite(a[i]) || !std::isfinite(e[i])) {
        if (overflow_boundary(a[i], e[i], dtype)) continue;
        // A sum whose |terms| may add up past the f32 range may overflow an
        // f32 accumulator on one side only. The fast kernels' (inf, or nan
        // from inf - inf) where the reference's f64 one does not; or, for the
        // 16-bit dtypes, the reference's f32 one, which rounds each product
        // before adding it, where the fast kernels' fused multiply-add keeps
        // a product past the range (3e38 x 1.5) that the running sum brings
        // back (a bf16 matmul's exact -1.34e38, PyTorch's too). A finite
        // fast result then needs finite terms (a finite magnitude) and stays
        // within their sum. (The magnitude of a mean is the mean of |terms|:
        // times the number of terms, a bound on the running sum; a p-norm's
        // accumulator holds its p-th power.)
        const bool may_overflow = !magnitude.empty() && std::pow(std::abs(magnitude[i]), expected.power) *
                                                             double(expected.terms) > accumulator_max(dtype);
        if (may_overflow && !std::isfinite(a[i])) continue;
        if (may_overflow && std::isfinite(magnitude[i]) && std::abs(a[i]) <= std::abs(magnitude[i]) * (1 + tol))
          continue;
      } else {
        // A nan magnitude (the op on |inputs| can meet inf - inf where the op
        // itself does not) says nothing about the scale: the dtype's tolerance
        // alone then, not a nan allowance that fails every difference.
        const bool scaled = !magnitude.empty() && !std::isnan(magnitude[i]);
        allowed = tol * std::abs(e[i]) + (scaled ? sum_scale * std::abs(magnitude[i]) + underflow : tol);
        if (std::abs(a[i] - e[i]) <= allowed) continue;
      }
    }
    return fmt::format("element {} (flat {}): {:.17g} vs reference {:.17g} (allowed difference {:.3g})",
                       position(fast.shape(), int64_t(i)), i, a[i], e[i], allowed);
  }
  return {};
}

}  // namespace ember::fuzz
