// Promotion of a tensor's dtype with a Python-style number, and whether one fits a dtype.
#include "core/scalar.h"
#include "core/scalar_fits.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace ember {

void detail::refuse_unsigned_scalar(uint64_t value) {
  throw_error(fmt::format("Scalar: {} is above the largest int64 ({}), and integer scalars are int64 (libtorch "
                          "refuses it too); pass a double (exact to 2^53) or a value that fits in int64",
                          value, std::numeric_limits<int64_t>::max()));
}

DType promote_with_scalar(DType tensor, const Scalar& scalar) {
  auto category = [](DType d) { return d == DType::boolean ? 0 : is_integral(d) ? 1 : 2; };
  int scalar_category = scalar.is_bool() ? 0 : scalar.is_integral() ? 1 : 2;
  if (scalar_category <= category(tensor)) return tensor;
  return scalar.default_dtype();  // bool tensor + int -> i64; int tensor + float -> f32
}

namespace {

// The largest finite value of a floating dtype.
double largest(DType dtype) {
  switch (dtype) {
    case DType::f16: return 65504.0;
    case DType::bf16: return 3.3895313892515355e38;
    case DType::f32: return double(std::numeric_limits<float>::max());
    default: return std::numeric_limits<double>::max();
  }
}

}  // namespace

ScalarRange scalar_range(const Scalar& value, DType dtype) {
  if (value.is_bool() || dtype == DType::boolean || dtype == DType::f64) return ScalarRange::inside;
  const double v = value.to_double();
  if (is_floating(dtype)) {
    if (!std::isfinite(v)) return ScalarRange::inside;  // inf and nan are values of every floating dtype
    return v > largest(dtype) ? ScalarRange::above : v < -largest(dtype) ? ScalarRange::below : ScalarRange::inside;
  }
  const bool i32 = dtype == DType::i32;
  if (!value.is_floating()) {
    const int64_t i = value.to_int();
    if (!i32) return ScalarRange::inside;
    return i > std::numeric_limits<int32_t>::max()   ? ScalarRange::above
           : i < std::numeric_limits<int32_t>::min() ? ScalarRange::below
                                                     : ScalarRange::inside;
  }
  // Compared unrounded, as PyTorch: -2147483648.5 does not fit int32, though it truncates into it.
  constexpr double kTwo63 = 9223372036854775808.0;
  if (std::isnan(v)) return ScalarRange::not_a_number;
  if (v < (i32 ? double(std::numeric_limits<int32_t>::min()) : -kTwo63)) return ScalarRange::below;
  return (i32 ? v > double(std::numeric_limits<int32_t>::max()) : v >= kTwo63) ? ScalarRange::above
                                                                              : ScalarRange::inside;
}

void check_scalar_fits(std::string_view op, const Scalar& value, DType dtype) {
  EMBER_CHECK(scalar_range(value, dtype) == ScalarRange::inside, "{}: value {} cannot be converted to {} without overflow",
              op, value.is_floating() ? fmt::format("{}", value.to_double()) : fmt::format("{}", value.to_int()), dtype);
}

}  // namespace ember
