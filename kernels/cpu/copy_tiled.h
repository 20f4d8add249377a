// Same-dtype copies whose output and input are dense along different dims
// (contiguous() of a transpose or permute, copy_ between such layouts): they
// go tile by tile instead of row by row. Called by copy.cpp; tests:
// tests/core/test_copy.cpp; bench: bench/bench_copy.cpp.
#pragma once

#include <cstdint>

#include "core/elementwise_loop.h"

namespace ember::cpu {

// Copies operand 1 of `loop` into operand 0, both of one dtype of
// `element_size` bytes (1, 2, 4 or 8), when the dim along which the output is
// densest is not the input's; returns false, copying nothing, otherwise.
bool copy_tiled(const ElementwiseLoop& loop, int64_t element_size);

}  // namespace ember::cpu
