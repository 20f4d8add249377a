// Pieces shared by the op table's files (ops/table_math.cpp, ops/table_shape.cpp,
// assembled by ops/table.cpp): operand helpers that make valid combinations
// likely (an operand of the right shape for a second argument, an NCHW image,
// a matmul partner) while still letting the program pick any pool tensor.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "fuzz/ops/table.h"

namespace ember::fuzz {

using Inputs = std::vector<Tensor>;

inline constexpr std::array<DType, 4> kFloating = {DType::f32, DType::f64, DType::f16, DType::bf16};

// A second operand for `like`: a flag picks a fresh tensor of like's shape
// (a second flag: like's dtype or a dtype byte) or any operand.
Tensor partner(Reader& in, Pool& pool, const Tensor& like);
// A right operand for a matrix product with `a`: a flag picks any operand or a
// fresh tensor of a's dtype shaped [..., k, n] for a = [..., m, k].
Tensor matmul_partner(Reader& in, Pool& pool, const Tensor& a);
// addmm's input for a @ b: [n, m], [m] or [1] (a byte), so that it mostly broadcasts.
Shape addmm_bias_shape(Reader& in, const Tensor& a, const Tensor& b);
// An [N, C, H, W] operand for convolution and pooling: a flag picks any operand
// or a fresh floating one (dtype byte, N 0-2, C 0-4, H and W 0-6).
Tensor image(Reader& in, Pool& pool);
// normalized_shape for layer_norm/rms_norm: a byte; mostly the last 0-2 dims of x, else a fresh shape.
Shape trailing_shape(Reader& in, Pool& pool, const Tensor& x);
// Class-score shapes: [C], [N, C] or [N, C, d] (mode byte, size bytes).
Shape read_class_shape(Reader& in);
// The class-index target shape of class scores: the input's shape without dim 1 ([] for [C]).
Shape rows_of(const Tensor& input);
// The shape `make` returns, or [0] when it throws ember::Error (the op under test
// then sees a mismatched argument, which it must refuse).
template <class F>
Shape shape_or_empty(F&& make) {
  try {
    return make().shape();
  } catch (const Error&) {
    return Shape{0};
  }
}
std::string scalar_name(const Scalar& s);

std::vector<OpEntry> math_entries();   // ops/table_math.cpp
std::vector<OpEntry> shape_entries();  // ops/table_shape.cpp

}  // namespace ember::fuzz
