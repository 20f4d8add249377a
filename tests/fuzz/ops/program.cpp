// The op fuzzer's decoder: bytes to tensors and arguments (see program.h).
#include "fuzz/ops/program.h"

#include <array>
#include <cmath>
#include <limits>
#include <numeric>

namespace ember::fuzz {

int64_t Reader::integer(int64_t lo, int64_t hi) {
  uint8_t b = byte();
  if (b < 0xF8) return lo + int64_t(b) % (hi - lo + 1);
  const std::array<int64_t, 8> edges = {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(),
                                        std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(),
                                        -(int64_t(1) << 40),                 int64_t(1) << 40,
                                        lo - 1,                              hi + 1};
  return edges[b - 0xF8];
}

Scalar Reader::scalar() {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  switch (byte() % 18) {
    case 0: return 0;
    case 1: return 1;
    case 2: return -1;
    case 3: return 2;
    case 4: return 3;
    case 5: return -3;
    case 6: return 0.5;
    case 7: return -1.5;
    case 8: return 2.25;
    case 9: return -0.0;
    case 10: return true;
    case 11: return false;
    case 12: return kInf;
    case 13: return -kInf;
    case 14: return std::numeric_limits<double>::quiet_NaN();
    case 15: return 1e30;
    case 16: return std::numeric_limits<int64_t>::max();
    default: return std::numeric_limits<int64_t>::min();
  }
}

double Reader::probability() {
  constexpr std::array<double, 8> values = {0, 0.25, 0.5, 1, 0.1, -0.5, 1.5, std::numeric_limits<double>::quiet_NaN()};
  return values[byte() % values.size()];
}

DType Reader::dtype() { return kAllDTypes[byte() % kNumDTypes]; }

void Pool::add(const Tensor& t) {
  if (tensors_.size() < kSize) {
    tensors_.push_back(t);
    return;
  }
  tensors_[next_] = t;
  next_ = (next_ + 1) % kSize;
}

namespace {

// SplitMix64: values from a one-byte seed, the same on every run.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) { return lo + (hi - lo) * double(next() >> 11) * 0x1.0p-53; }
  int64_t below(int64_t n) { return n <= 0 ? 0 : int64_t(next() % uint64_t(n)); }

 private:
  uint64_t state_;
};

// Values of a kind byte: 0 small integers in [-4, 4] (exact in every dtype, so
// sums and products are exact too); 1 uniform in [-2, 2); 2 positive, in
// [0.01, 4] (log, sqrt, pow); 3 uniform with a quarter of specials (+-inf, nan,
// +-0, +-1e30, 1e-30, 65504, 7e4 past f16's range, 3e38, 2^31, 2^53 + 1);
// 4 wide magnitudes, +-2^[-20, 20].
std::vector<double> read_values(Reader& in, int64_t count) {
  const uint8_t kind = in.byte() % 5;
  Random random(in.byte());
  constexpr double kInf = std::numeric_limits<double>::infinity();
  constexpr std::array<double, 14> specials = {kInf, -kInf, std::numeric_limits<double>::quiet_NaN(), 0.0, -0.0,
                                               1e30, -1e30, 1e-30, 65504, 7e4, 3e38, 2147483648.0,
                                               9007199254740993.0, -1.0};
  std::vector<double> values(static_cast<size_t>(count));
  for (double& v : values) {
    switch (kind) {
      case 0: v = double(random.below(9) - 4); break;
      case 1: v = random.uniform(-2, 2); break;
      case 2: v = random.uniform(0.01, 4); break;
      case 3: v = random.below(4) == 0 ? specials[size_t(random.below(specials.size()))] : random.uniform(-2, 2); break;
      default: v = (random.below(2) ? 1 : -1) * std::ldexp(random.uniform(1, 2), int(random.below(41)) - 20); break;
    }
  }
  return values;
}

// A permutation of ndim dims from one byte (its digits in mixed radix).
Dims permutation(uint8_t b, int ndim) {
  std::vector<int64_t> left(static_cast<size_t>(ndim));
  std::iota(left.begin(), left.end(), 0);
  Dims order;
  for (int i = ndim; i > 0; --i) {
    size_t pick = size_t(b % i);
    b = uint8_t(b / i);
    order.push_back(left[pick]);
    left.erase(left.begin() + int64_t(pick));
  }
  return order;
}

Shape fresh_shape(Reader& in) {
  constexpr std::array<int64_t, 8> sizes = {0, 1, 1, 2, 3, 4, 5, 7};
  Shape shape;
  const int ndim = in.byte() % 5;
  for (int d = 0; d < ndim; ++d) shape.push_back(sizes[in.byte() % sizes.size()]);
  return shape;
}

}  // namespace

Shape broadcastable_to(Reader& in, const Shape& shape) {
  const int drop = in.byte() % (shape.ndim() + 1);
  const uint8_t mask = in.byte();
  Shape out;
  for (int d = drop; d < shape.ndim(); ++d) out.push_back(mask >> (d % 8) & 1 ? 1 : shape[d]);
  return out;
}

Shape read_shape(Reader& in, const Pool& pool) {
  const uint8_t mode = in.byte() % 4;
  if (mode == 0 || pool.empty()) return fresh_shape(in);
  const Shape& base = pool[in.byte() % pool.size()].shape();
  if (mode == 1) return base;
  if (mode == 2) return broadcastable_to(in, base);
  const int64_t n = in.in_range(0, 5);
  Shape out = base;
  if (out.ndim() == 0) return Shape{n};
  if (out.ndim() == 1) return Shape{out[0], n};
  out[out.ndim() - 2] = out[out.ndim() - 1];
  out[out.ndim() - 1] = n;
  return out;
}

Tensor lay_out(Reader& in, const std::vector<double>& values, const Shape& shape, DType dtype) {
  Tensor dense = from_vector(values).reshape(shape).to(dtype);
  const int ndim = shape.ndim();
  const uint8_t layout = in.byte() % 7;
  if (layout == 0 || ndim == 0) return dense;
  const uint8_t detail = in.byte();
  switch (layout) {
    case 1:
      return ndim < 2 ? dense : dense.transpose(0, -1).contiguous().transpose(0, -1);
    case 2: {
      Dims order = permutation(detail, ndim), inverse = order;
      for (int d = 0; d < ndim; ++d) inverse[int(order[d])] = d;
      return dense.permute(order).contiguous().permute(inverse);
    }
    case 3: {
      const int d = detail % ndim;
      Shape wide = shape;
      wide[d] = 2 * shape[d] + 1;
      Tensor strided = zeros(wide, {.dtype = dtype}).slice(d, detail / ndim % 2, wide[d], 2).narrow(d, 0, shape[d]);
      strided.copy_(dense);
      return strided;
    }
    case 4: {
      const int64_t offset = 1 + detail % 3;
      Tensor base = zeros({dense.numel() + offset + 2}, {.dtype = dtype});
      Tensor view = as_strided(base, shape, contiguous_strides(shape, "fuzz_ops"), offset);
      view.copy_(dense);
      return view;
    }
    case 5: {
      const int d = detail % ndim;
      if (shape[d] == 0) return dense;
      return dense.narrow(d, 0, 1).contiguous().expand(shape);
    }
    default: {
      Strides strides = dense.strides();
      for (int d = 0; d < ndim; ++d)
        if (shape[d] == 1) strides[d] = detail >> (d % 8) & 1 ? 17 : 0;
      Tensor base = zeros({dense.numel() + 17}, {.dtype = dtype});
      Tensor view = as_strided(base, shape, strides, 0);
      view.copy_(dense);
      return view;
    }
  }
}

Tensor read_tensor_of(Reader& in, const Shape& shape, DType dtype) {
  std::vector<double> values = read_values(in, shape.numel());
  return lay_out(in, values, shape, dtype);
}

Tensor read_tensor(Reader& in, const Pool& pool) {
  const DType dtype = in.dtype();
  const Shape shape = read_shape(in, pool);
  return read_tensor_of(in, shape, dtype);
}

Tensor operand(Reader& in, Pool& pool) {
  const uint8_t selector = in.byte();
  if (!pool.empty() && selector % (pool.size() + 1) < pool.size()) return pool[selector % (pool.size() + 1)];
  Tensor fresh = read_tensor(in, pool);
  pool.add(fresh);
  return fresh;
}

Tensor read_indices(Reader& in, const Shape& shape, int64_t bound) {
  const DType dtype = in.flag() ? DType::i64 : DType::i32;
  Random random(in.byte());
  std::vector<double> values(static_cast<size_t>(shape.numel()));
  for (double& v : values) v = double(random.below(bound));
  const uint8_t plant = in.byte();
  if (plant % 8 == 0 && !values.empty()) values[size_t(plant / 8) % values.size()] = plant & 8 ? -1.0 : double(bound);
  return lay_out(in, values, shape, dtype);
}

Tensor read_mask(Reader& in, const Shape& shape) {
  const int64_t density = in.byte() % 4;
  Random random(in.byte());
  std::vector<double> values(static_cast<size_t>(shape.numel()));
  for (double& v : values) v = random.below(3) < density ? 1.0 : 0.0;
  return lay_out(in, values, shape, DType::boolean);
}

Dims read_dims(Reader& in, int ndim) {
  const int count = in.byte() % (ndim + 1);
  Dims dims;
  for (int i = 0; i < count; ++i) dims.push_back(in.dim(ndim));
  return dims;
}

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return fmt::format("{}{} strides {} offset {}", t.dtype(), t.shape(), t.strides(), t.offset());
}

}  // namespace ember::fuzz
