// Whether a number fits a dtype, for the ops that store one (fill_, full,
// masked_fill, pad, clamp's bounds, pow's exponent). Arithmetic and comparisons
// with a number do not check: they wrap or meet inf, as in PyTorch.
// Tests: tests/core/test_scalar_fits.cpp.
#pragma once

#include <string_view>

#include "core/dtype.h"
#include "core/scalar.h"

namespace ember {

// Where a number lies against a dtype's range. inf and nan lie inside every
// floating dtype; an integer dtype has no nan.
enum class ScalarRange { inside, below, above, not_a_number };
ScalarRange scalar_range(const Scalar& value, DType dtype);

// Throws unless `value` fits `dtype`: a finite number past the dtype's largest or
// smallest one, or a non-finite one for an integer dtype, is an error naming `op`,
// as PyTorch's "value cannot be converted to type ... without overflow", where
// saturating or wrapping would store a different number than the one given.
// A fraction inside an integer dtype's range fits (it truncates); any value fits bool.
void check_scalar_fits(std::string_view op, const Scalar& value, DType dtype);

}  // namespace ember
