// The op fuzzer's decoder (tests/fuzz/README_ops.md, "Input"): reads the
// fuzzer's bytes as a small program and turns them into tensors (dtype, shape,
// memory layout, values) and op arguments. Used by tests/fuzz/ops.cpp and the
// op table (ops/table.cpp). Every byte string is a valid program: past the
// end every read returns 0.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ember/ember.h>

namespace ember::fuzz {

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return position_ >= size_; }
  uint8_t byte() { return done() ? 0 : data_[position_++]; }
  bool flag() { return byte() & 1; }
  // One byte as a number in [lo, hi] (hi - lo < 248). Bytes 0xF8..0xFF give
  // instead an edge value that validation must refuse or survive: INT64_MIN,
  // INT64_MAX, INT32_MIN, INT32_MAX, -2^40, 2^40, lo - 1, hi + 1. Only for
  // arguments whose valid values never allocate in proportion (dims, indices,
  // starts, strides of windows); sizes use `in_range`.
  int64_t integer(int64_t lo, int64_t hi);
  // A dim of an ndim tensor: `integer` over [-ndim, ndim - 1] (a 0-d tensor takes -1 and 0).
  int64_t dim(int ndim) { return integer(-std::max(ndim, 1), std::max(ndim, 1) - 1); }
  // One byte as a number in [lo, hi], never an edge value.
  int64_t in_range(int64_t lo, int64_t hi) { return lo + int64_t(byte()) % (hi - lo + 1); }
  // A Scalar argument: small integers and fractions, bools, +-inf, nan, 1e30, -0.0 and int64 extremes.
  Scalar scalar();
  // A probability-like double: 0, 0.25, 0.5, 1, and the invalid -0.5, 1.5, nan.
  double probability();
  DType dtype();

 private:
  const uint8_t* data_;
  size_t size_;
  size_t position_ = 0;
};

// The tensors made so far, the operands of later ops: a ring of kSize slots,
// the oldest replaced first.
class Pool {
 public:
  static constexpr size_t kSize = 8;
  bool empty() const { return tensors_.empty(); }
  size_t size() const { return tensors_.size(); }
  const Tensor& operator[](size_t i) const { return tensors_[i]; }
  void add(const Tensor& t);

 private:
  std::vector<Tensor> tensors_;
  size_t next_ = 0;
};

// An operand: a selector byte s; with n tensors in the pool, s % (n + 1) < n
// picks that slot, and s % (n + 1) == n (always, for an empty pool) reads a
// fresh tensor (`read_tensor`), which also joins the pool.
Tensor operand(Reader& in, Pool& pool);
// A fresh tensor: dtype byte, shape (`read_shape`), layout byte, values (kind byte, seed byte).
Tensor read_tensor(Reader& in, const Pool& pool);
// A shape: a mode byte, then
//   0: fresh, ndim byte (0..4), one size byte per dim (0, 1, 1, 2, 3, 4, 5, 7);
//   1: a slot byte: that pool tensor's shape;
//   2: a slot byte, a drop byte, a mask byte: broadcastable to the slot's shape
//      (leading dims dropped, masked dims set to 1);
//   3: a slot byte, a size byte: a matmul right operand for the slot ([..., m, k] -> [..., k, n]).
// Modes 1-3 read as mode 0 when the pool is empty.
Shape read_shape(Reader& in, const Pool& pool);
// A fresh tensor of a given shape and dtype (layout, value kind and seed bytes).
Tensor read_tensor_of(Reader& in, const Shape& shape, DType dtype);
// Class or row indices of `shape` in [0, bound): dtype flag (i64/i32), seed
// byte, and a byte that sometimes plants one out-of-range value (-1 or bound),
// which the op must refuse; then a layout byte.
Tensor read_indices(Reader& in, const Shape& shape, int64_t bound);
// A bool mask of `shape` (density and seed bytes, layout byte).
Tensor read_mask(Reader& in, const Shape& shape);
// Dims for a reduction of an ndim tensor: count byte, then one `integer` each.
Dims read_dims(Reader& in, int ndim);
// A shape broadcastable to `shape` (drop byte, mask byte).
Shape broadcastable_to(Reader& in, const Shape& shape);

// `values` (row-major) as a tensor of `shape` and `dtype` in the memory layout
// a layout byte picks: 0 contiguous; 1 transposed (first and last dims swapped
// in memory); 2 permuted (dim order from the next byte); 3 every other element
// of a twice-as-large dim (dim byte); 4 at an offset of 1-3 elements into a
// larger storage (offset byte); 5 expanded: one dim (dim byte) read with
// stride 0, so its values repeat; 6 size-1 dims with stride 0 or 17.
Tensor lay_out(Reader& in, const std::vector<double>& values, const Shape& shape, DType dtype);

// Describes a tensor for a report: dtype, shape, strides, offset.
std::string describe(const Tensor& t);

}  // namespace ember::fuzz
