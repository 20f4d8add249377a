// Scalar arithmetic shared by the reference, CPU and CUDA kernels, so all
// compute exactly the same function: integers wrap on overflow (as PyTorch's
// do) instead of being undefined, and 16-bit floats compute in float. The
// functions are constexpr so that CUDA device code may call them (nvcc's
// --expt-relaxed-constexpr); there T is already a compute type (never Half
// or BFloat16, whose conversions are host code).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/dtype.h"
#include "core/scalar.h"

namespace ember::arith {

template <class T>
using Unsigned = std::make_unsigned_t<T>;

template <class T>
constexpr T add(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) return a || b;
  else if constexpr (std::is_integral_v<T>) return T(Unsigned<T>(a) + Unsigned<T>(b));
  else return T(ComputeType<T>(a) + ComputeType<T>(b));
}
template <class T>
constexpr T sub(T a, T b) {
  if constexpr (std::is_integral_v<T>) return T(Unsigned<T>(a) - Unsigned<T>(b));
  else return T(ComputeType<T>(a) - ComputeType<T>(b));
}
template <class T>
constexpr T mul(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) return a && b;
  else if constexpr (std::is_integral_v<T>) return T(Unsigned<T>(a) * Unsigned<T>(b));
  else return T(ComputeType<T>(a) * ComputeType<T>(b));
}
// Only floating types reach div: the entry point makes integer division true division.
template <class T>
constexpr T div(T a, T b) {
  return T(ComputeType<T>(a) / ComputeType<T>(b));
}


// Integer power by repeated squaring, wrapping. A negative exponent gives 0
// except for bases 1 and -1 (PyTorch's rule for tensor exponents; a negative
// scalar exponent is refused by the entry point).
template <class T>
constexpr T power(T base, int64_t exponent) {
  if (exponent < 0) return base == 1 ? T(1) : base == -1 ? T(exponent % 2 == 0 ? 1 : -1) : T(0);
  T result = 1;
  while (exponent > 0) {
    if (exponent & 1) result = mul(result, base);
    base = mul(base, base);
    exponent >>= 1;
  }
  return result;
}

template <class T>
constexpr bool is_nan(T x) {
  if constexpr (std::is_integral_v<T>) return false;
  else return std::isnan(ComputeType<T>(x));
}

// maximum and minimum propagate nan from either side, as PyTorch's do.
template <class T>
constexpr T maximum(T a, T b) {
  if (is_nan(a) || is_nan(b)) return is_nan(a) ? a : b;
  return ComputeType<T>(a) < ComputeType<T>(b) ? b : a;
}
template <class T>
constexpr T minimum(T a, T b) {
  if (is_nan(a) || is_nan(b)) return is_nan(a) ? a : b;
  return ComputeType<T>(b) < ComputeType<T>(a) ? b : a;
}

// The division family on a nonzero divisor (the entry points refuse an
// integer 0, as PyTorch's raise; a floating 0 gives nan or inf). Integers
// wrap where C++ is undefined: INT_MIN / -1 is INT_MIN and INT_MIN % -1 is 0.
// fmod: the remainder of truncated division, with the sign of a (C's fmod).
template <class T>
constexpr T fmod(T a, T b) {
  if constexpr (std::is_integral_v<T>) return b == T(-1) ? T(0) : T(a % b);
  else return T(std::fmod(ComputeType<T>(a), ComputeType<T>(b)));
}
// remainder: the remainder of floor division, with the sign of b (Python's %).
template <class T>
constexpr T remainder(T a, T b) {
  using C = ComputeType<T>;
  const C m = C(fmod(a, b)), divisor = C(b);
  return T(m != C(0) && ((divisor < C(0)) != (m < C(0))) ? m + divisor : m);
}
// floor_divide: floor(a / b) (Python's //). Floating: from the truncated
// quotient (a - fmod(a, b)) / b, stepped down where the signs differ, then
// rounded to the nearest whole number, so that it agrees with remainder
// (a = b * floor_divide(a, b) + remainder(a, b)) where a / b rounds up to
// a whole number; a quotient of 0 keeps the sign of a / b.
template <class T>
constexpr T floor_divide(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == T(-1)) return sub(T(0), a);
    const T quotient = T(a / b);
    return a % b != 0 && ((a < 0) != (b < 0)) ? T(quotient - 1) : quotient;
  } else {
    using C = ComputeType<T>;
    const C x = C(a), y = C(b);
    if (y == C(0)) return T(x / y);
    const C m = std::fmod(x, y);
    C quotient = (x - m) / y;
    if (m != C(0) && ((y < C(0)) != (m < C(0)))) quotient -= C(1);
    if (quotient == C(0)) return T(std::copysign(C(0), x / y));
    const C whole = std::floor(quotient);
    return T(quotient - whole > C(0.5) ? whole + C(1) : whole);
  }
}

// A clamp bound in T's compute type. An absent (null) bound is the type's
// extreme; an integer bound outside T's range saturates instead of wrapping.
template <class T>
inline ComputeType<T> clamp_bound(const Scalar* bound, bool lower) {
  using C = ComputeType<T>;
  if constexpr (std::is_integral_v<T>) {
    if (!bound) return lower ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
    return T(std::clamp<int64_t>(bound->to_int(), std::numeric_limits<T>::lowest(), std::numeric_limits<T>::max()));
  } else {
    if (!bound) return lower ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
    return bound->to<C>();
  }
}

}  // namespace ember::arith
