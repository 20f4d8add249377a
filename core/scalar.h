// Scalar: a number passed to an op (t + 2.5, full(shape, 7)). It remembers its
// category (bool, integer, floating) because promotion depends on it: a scalar
// never widens a tensor within its category, but does across categories.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/convert.h"
#include "core/dtype.h"

namespace ember {

namespace detail {
// An integer scalar holds an int64: a uint64 above INT64_MAX would wrap to a negative number.
[[noreturn]] void refuse_unsigned_scalar(uint64_t value);
}  // namespace detail

class Scalar {
 public:
  enum class Kind : uint8_t { boolean, integer, floating };

  Scalar() : Scalar(int64_t(0)) {}
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Scalar(T value) {  // NOLINT: implicit, like a Python number
    if constexpr (std::is_same_v<T, bool>) {
      kind_ = Kind::boolean;
      i_ = value;
    } else if constexpr (std::is_integral_v<T>) {
      if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t))
        if (value > uint64_t(INT64_MAX)) detail::refuse_unsigned_scalar(uint64_t(value));
      kind_ = Kind::integer;
      i_ = int64_t(value);
    } else {
      kind_ = Kind::floating;
      d_ = double(value);
    }
  }
  Scalar(Half h) : Scalar(float(h)) {}          // NOLINT
  Scalar(BFloat16 h) : Scalar(float(h)) {}      // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::floating; }
  bool is_integral() const { return kind_ == Kind::integer; }
  bool is_bool() const { return kind_ == Kind::boolean; }

  double to_double() const { return kind_ == Kind::floating ? d_ : double(i_); }
  int64_t to_int() const { return kind_ == Kind::floating ? convert<int64_t>(d_) : i_; }

  template <class T>
  T to() const {
    if (kind_ == Kind::floating) return convert<T>(d_);
    if constexpr (std::is_same_v<T, bool>) return i_ != 0;
    else if constexpr (std::is_integral_v<T>) return T(i_);
    else return T(static_cast<ComputeType<T>>(i_));  // rounded once (through double, 2^60 + 2^36 + 1 lost 2^37)
  }

  // The dtype a tensor of this scalar alone would have (f32 for floats, i64 for ints).
  DType default_dtype() const {
    return kind_ == Kind::floating ? DType::f32 : kind_ == Kind::integer ? DType::i64 : DType::boolean;
  }

 private:
  Kind kind_;
  int64_t i_ = 0;
  double d_ = 0.0;
};

// The result dtype of `tensor op scalar`: the tensor's, unless the scalar is of
// a higher category (bool < integer < floating).
DType promote_with_scalar(DType tensor, const Scalar& scalar);

}  // namespace ember
