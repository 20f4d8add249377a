// The op table: the `grad` prefix, then the math and shape families, in a
// fixed order (an opcode byte indexes it modulo its size, so appending an
// entry keeps the meaning of opcodes below the old size). Also the operand
// helpers of table_parts.h.
#include <cmath>

#include "fuzz/ops/table_parts.h"

namespace ember::fuzz {

Tensor partner(Reader& in, Pool& pool, const Tensor& like) {
  if (!in.flag()) return operand(in, pool);
  const DType dtype = in.flag() ? like.dtype() : in.dtype();
  return read_tensor_of(in, like.shape(), dtype);
}

Tensor matmul_partner(Reader& in, Pool& pool, const Tensor& a) {
  if (!in.flag()) return operand(in, pool);
  Shape shape = a.shape();
  const int64_t n = in.in_range(0, 5);
  if (shape.ndim() == 0) {
    shape = Shape{n};
  } else if (shape.ndim() == 1) {
    shape = Shape{shape[0], n};
  } else {
    shape[shape.ndim() - 2] = shape.back();
    shape[shape.ndim() - 1] = n;
  }
  return read_tensor_of(in, shape, a.dtype());
}

Shape addmm_bias_shape(Reader& in, const Tensor& a, const Tensor& b) {
  const int64_t rows = a.dim() > 0 ? a.size(0) : 1, cols = b.dim() > 0 ? b.size(-1) : 1;
  switch (in.byte() % 3) {
    case 0: return {rows, cols};
    case 1: return {cols};
    default: return {1};
  }
}

Tensor image(Reader& in, Pool& pool) {
  if (!in.flag()) return operand(in, pool);
  const DType dtype = kFloating[in.byte() % kFloating.size()];
  Shape shape{in.in_range(0, 2), in.in_range(0, 4), in.in_range(0, 6), in.in_range(0, 6)};
  return read_tensor_of(in, shape, dtype);
}

Shape trailing_shape(Reader& in, Pool& pool, const Tensor& x) {
  const uint8_t b = in.byte();
  if (b % 4 == 3) return read_shape(in, pool);
  const int count = std::min<int>(b % 3, x.dim());
  return Shape(x.shape().span().last(size_t(count)));
}

Shape read_class_shape(Reader& in) {
  const uint8_t mode = in.byte() % 3;
  const int64_t classes = in.in_range(0, 4);
  if (mode == 0) return {classes};
  const int64_t batch = in.in_range(0, 3);
  if (mode == 1) return {batch, classes};
  return {batch, classes, in.in_range(0, 3)};
}

Shape rows_of(const Tensor& input) {
  Shape rows = input.shape();
  if (rows.ndim() >= 2) rows.erase(1);
  else rows = Shape{};
  return rows;
}

std::string scalar_name(const Scalar& s) {
  if (s.is_bool()) return s.to_int() ? "true" : "false";
  if (s.is_integral()) return fmt::format("{}", s.to_int());
  return fmt::format("{}", s.to_double());
}

std::span<const OpEntry> op_table() {
  static const std::vector<OpEntry> table = [] {
    std::vector<OpEntry> entries{{"grad", nullptr}};
    for (OpEntry& e : math_entries()) entries.push_back(std::move(e));
    for (OpEntry& e : shape_entries()) entries.push_back(std::move(e));
    return entries;
  }();
  return table;
}

}  // namespace ember::fuzz
