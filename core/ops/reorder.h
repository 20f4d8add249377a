// Ops that move elements without computing on them: flip, roll and
// repeat_interleave, as in PyTorch. They are composites of views and copies
// (no kernels of their own), so they run on every device and dtype that copy_
// and index_select serve. Entry points: core/ops/reorder.cpp; tests:
// tests/core/test_reorder.cpp.
#pragma once

#include <optional>
#include <vector>

#include "core/tensor.h"

namespace ember {

// A copy of t with the order of elements reversed along each of `dims`
// (negative dims count from the end; a dim may appear once).
Tensor flip(const Tensor& t, const Dims& dims);

// A copy of t with elements shifted by shifts[i] along dims[i], wrapping
// around; a dim may appear more than once (its shifts add up). With no dims,
// t is flattened, rolled by its single shift and given its shape back.
Tensor roll(const Tensor& t, const std::vector<int64_t>& shifts, const std::vector<int64_t>& dims = {});
Tensor roll(const Tensor& t, int64_t shift, std::optional<int64_t> dim = std::nullopt);

// Each element (each slice along dim) repeated `repeats` times in place:
// [a, b] -> [a, a, b, b]. Without dim the input is flattened first.
Tensor repeat_interleave(const Tensor& t, int64_t repeats, std::optional<int64_t> dim = std::nullopt);
// Slice i repeated repeats[i] times; repeats is 1-d i32/i64 of t's size along
// dim, or one value for every slice. The result's size depends on the values,
// so they are read on the host (a device-to-host copy for a GPU tensor).
Tensor repeat_interleave(const Tensor& t, const Tensor& repeats, std::optional<int64_t> dim = std::nullopt);
// [0] * repeats[0] + [1] * repeats[1] + ...: i64, the index that the form
// above selects with.
Tensor repeat_interleave(const Tensor& repeats);

}  // namespace ember
