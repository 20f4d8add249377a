// The op fuzzer's comparison of a fast result with the reference one
// (tests/fuzz/README_ops.md, "Tolerances"). Used by tests/fuzz/ops.cpp.
#pragma once

#include <string>

#include "fuzz/ops/table.h"
#include "support/tolerance.h"

namespace ember::fuzz {

using ember::testing::tolerance;  // the unit suites' per-dtype tolerance

struct Expectation {
  Accuracy accuracy = Accuracy::exact;
  // scaled: the reference result of the op on the inputs' absolute values
  // (f64), the scale of each output element's error; undefined when not
  // computable, which falls back to `rounding`.
  Tensor magnitude;
  int64_t terms = 1;  // an upper bound on the terms summed into one element
  double power = 1;   // Call::power
  // The least precise floating dtype the values passed through (the op's
  // inputs; for gradients its results too), when coarser than the compared
  // one: the f64 exponent's gradient of pow(f32 tensor, f64 0-d tensor) is a
  // sum of g x^y log(x), with log taken of the f32 x.
  DType precision = DType::f64;
};

// Where `fast` and `reference` differ beyond `expected`: shape, dtype or the
// first differing element with both values and the allowed difference. Empty
// when they agree.
std::string difference(const Tensor& fast, const Tensor& reference, const Expectation& expected);

}  // namespace ember::fuzz
