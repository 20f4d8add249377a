// Shape helpers shared by every op: dims, strides, broadcasting.
#include "core/shape.h"

namespace ember {

std::string Shape::str() const {
  std::string out = "[";
  for (int i = 0; i < ndim_; ++i) {
    if (i) out += ", ";
    out += std::to_string(dims_[i]);
  }
  return out + "]";
}

int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op) {
  int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;  // a 0-d tensor accepts dim 0 and -1
  EMBER_CHECK(dim >= lo && dim <= hi, "{}: dim {} out of range for a tensor with {} dims (expected [{}, {}])", op,
              dim, ndim, lo, hi);
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

void check_numel_fits(const Shape& shape, std::string_view op) {
  int64_t numel = 1;
  bool overflow = false;
  for (int64_t d : shape) {
    if (d == 0) return;
    overflow = overflow || __builtin_mul_overflow(numel, d, &numel);
  }
  EMBER_CHECK(!overflow, "{}: shape {} has more elements than 64 bits count", op, shape);
}

Strides contiguous_strides(const Shape& shape, std::string_view op) {
  Strides strides = Shape::filled(shape.ndim(), 1);
  for (int i = shape.ndim() - 2; i >= 0; --i)
    EMBER_CHECK(!__builtin_mul_overflow(strides[i + 1], std::max<int64_t>(shape[i + 1], 1), &strides[i]),
                "{}: shape {} is too large: its strides overflow 64 bits", op, shape);
  return strides;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op) {
  if (a == b) return a;
  int ndim = std::max(a.ndim(), b.ndim());
  Shape out = Shape::filled(ndim, 1);
  for (int i = 0; i < ndim; ++i) {
    int ia = i - (ndim - a.ndim()), ib = i - (ndim - b.ndim());
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    EMBER_CHECK(da == db || da == 1 || db == 1, "{}: shapes {} and {} cannot be broadcast", op, a, b);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace ember
