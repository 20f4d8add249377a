// The per-dtype tolerance every op test compares with: exact for integers
// and bool, per precision for floats. Without GoogleTest, so that the op
// fuzzer (tests/fuzz/ops/compare.cpp) uses the same one as the unit suites
// (tests/support/test_support.h).
#pragma once

#include <ember/ember.h>

namespace ember::testing {

inline double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f32: return 1e-5;
    case DType::f64: return 1e-10;
    case DType::f16: return 2e-3;
    case DType::bf16: return 1.6e-2;
    default: return 0.0;
  }
}

}  // namespace ember::testing
