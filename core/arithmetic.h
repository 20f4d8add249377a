// Scalar arithmetic shared by the reference and CPU kernels, so both compute
// exactly the same function: integers wrap on overflow (as PyTorch's do)
// instead of being undefined, and 16-bit floats compute in float.
#pragma once

#include <type_traits>

#include "core/dtype.h"

namespace ember::arith {

template <class T>
using Unsigned = std::make_unsigned_t<T>;

template <class T>
inline T add(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) return a || b;
  else if constexpr (std::is_integral_v<T>) return T(Unsigned<T>(a) + Unsigned<T>(b));
  else return T(ComputeType<T>(a) + ComputeType<T>(b));
}
template <class T>
inline T sub(T a, T b) {
  if constexpr (std::is_integral_v<T>) return T(Unsigned<T>(a) - Unsigned<T>(b));
  else return T(ComputeType<T>(a) - ComputeType<T>(b));
}
template <class T>
inline T mul(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) return a && b;
  else if constexpr (std::is_integral_v<T>) return T(Unsigned<T>(a) * Unsigned<T>(b));
  else return T(ComputeType<T>(a) * ComputeType<T>(b));
}
// Only floating types reach div: the entry point makes integer division true division.
template <class T>
inline T div(T a, T b) {
  return T(ComputeType<T>(a) / ComputeType<T>(b));
}

}  // namespace ember::arith
