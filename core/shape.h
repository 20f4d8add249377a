// Shape: the sizes (or strides, or a list of dims) of a tensor, stored inline.
// A fixed capacity keeps a tensor's metadata in one allocation, which matters
// for per-op overhead; ember supports up to kMaxDims dimensions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

#include <fmt/format.h>

#include "core/error.h"

namespace ember {

inline constexpr int kMaxDims = 10;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}
  explicit Shape(std::span<const int64_t> dims) {
    EMBER_CHECK(dims.size() <= size_t(kMaxDims), "Shape: {} dims given, ember supports at most {}", dims.size(), kMaxDims);
    ndim_ = int(dims.size());
    std::copy(dims.begin(), dims.end(), dims_);
  }
  static Shape filled(int ndim, int64_t value) {
    Shape s;
    s.resize(ndim, value);
    return s;
  }

  int ndim() const { return ndim_; }
  size_t size() const { return size_t(ndim_); }
  bool empty() const { return ndim_ == 0; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t& operator[](int i) { return dims_[i]; }
  int64_t back() const { return dims_[ndim_ - 1]; }
  const int64_t* begin() const { return dims_; }
  const int64_t* end() const { return dims_ + ndim_; }
  int64_t* begin() { return dims_; }
  int64_t* end() { return dims_ + ndim_; }
  const int64_t* data() const { return dims_; }
  std::span<const int64_t> span() const { return {dims_, size_t(ndim_)}; }

  void push_back(int64_t d) {
    EMBER_CHECK(ndim_ < kMaxDims, "Shape: more than {} dims", kMaxDims);
    dims_[ndim_++] = d;
  }
  void insert(int at, int64_t d) {
    EMBER_CHECK(ndim_ < kMaxDims, "Shape: more than {} dims", kMaxDims);
    std::copy_backward(dims_ + at, dims_ + ndim_, dims_ + ndim_ + 1);
    dims_[at] = d;
    ++ndim_;
  }
  void erase(int at) {
    std::copy(dims_ + at + 1, dims_ + ndim_, dims_ + at);
    --ndim_;
  }
  void resize(int ndim, int64_t value = 0) {
    EMBER_CHECK(ndim >= 0 && ndim <= kMaxDims, "Shape: {} dims requested, ember supports at most {}", ndim, kMaxDims);
    for (int i = ndim_; i < ndim; ++i) dims_[i] = value;
    ndim_ = ndim;
  }

  // In uint64: a shape with a zero size holds 0 elements even when its other
  // sizes multiply past int64 ([7, INT64_MAX, 0], found by the op fuzzer),
  // and 0 times anything is 0 modulo 2^64. Shapes without a zero whose
  // product overflows are refused where tensors are made (make_tensor) and
  // where views may grow (check_numel_fits).
  int64_t numel() const {
    uint64_t n = 1;
    for (int i = 0; i < ndim_; ++i) n *= uint64_t(dims_[i]);
    return int64_t(n);
  }
  std::string str() const;  // "[2, 3]"

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.ndim_ != b.ndim_) return false;
    for (int i = 0; i < a.ndim_; ++i)  // a plain loop: std::equal becomes a memcmp call
      if (a.dims_[i] != b.dims_[i]) return false;
    return true;
  }

 private:
  int64_t dims_[kMaxDims] = {};
  int ndim_ = 0;
};

using Strides = Shape;
using Dims = Shape;  // a list of dimension indices, e.g. the dims of a reduction

// Wraps a possibly negative dim into [0, ndim); `op` names the caller in the error.
int64_t wrap_dim(int64_t dim, int64_t ndim, std::string_view op);

// Refuses a shape without a zero size whose element count overflows int64
// (an expand or as_strided to [2^32, 2^32]: numel() would wrap to 0 and a
// reduction of it return the identity). `op` names the caller.
void check_numel_fits(const Shape& shape, std::string_view op);

// Row-major strides of a contiguous tensor of this shape. An error naming
// `op` when they overflow int64, which a shape with a zero dim can do while
// holding no elements ([0, 2^40, 2^40]): no tensor may have such a shape.
Strides contiguous_strides(const Shape& shape, std::string_view op);

// The broadcast of two shapes (NumPy rules), or an error naming `op`.
Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view op);

}  // namespace ember

template <>
struct fmt::formatter<ember::Shape> : fmt::formatter<std::string_view> {
  auto format(const ember::Shape& s, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(s.str(), ctx);
  }
};
