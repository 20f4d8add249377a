// Promotion of a tensor's dtype with a Python-style number.
#include "core/scalar.h"

namespace ember {

DType promote_with_scalar(DType tensor, const Scalar& scalar) {
  auto category = [](DType d) { return d == DType::boolean ? 0 : is_integral(d) ? 1 : 2; };
  int scalar_category = scalar.is_bool() ? 0 : scalar.is_integral() ? 1 : 2;
  if (scalar_category <= category(tensor)) return tensor;
  return scalar.default_dtype();  // bool tensor + int -> i64; int tensor + float -> f32
}

}  // namespace ember
