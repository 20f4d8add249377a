// CPU softmax and log_softmax. Along the last dim (inner == 1) a line is dense:
// one pass for the maximum, one for exp and its sum (the SIMD exp of
// vector_exp.cpp for f32), one to scale. Along any other dim, lines are columns
// of [size, inner] blocks, a tile of columns at a time so every pass reads rows
// contiguously. f16/bf16 compute in float. Tests: tests/core/test_softmax.cpp.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/convert.h"
#include "core/ops/reduction_kernels.h"
#include "core/parallel.h"
#include "kernels/cpu/families.h"
#include "kernels/cpu/vector_exp.h"

namespace ember::cpu {

void register_softmax_kernels();

namespace {

constexpr int64_t kColumnWidth = 256;  // columns per tile of a non-last-dim softmax
constexpr int64_t kMaxChunks = 64;     // pieces one long line is split into
constexpr int64_t kExpBlock = 2048;    // elements whose exp sum is one double

template <class V>
using Array = Eigen::Array<V, Eigen::Dynamic, 1>;

template <class V>
constexpr V kInfinity = std::numeric_limits<V>::infinity();

template <class V>
V line_max(const V* x, int64_t n) {
  return Eigen::Map<const Array<V>>(x, n).maxCoeff();
}

// y = exp(x - m), exactly 0 where x is -inf; returns sum(y). Blocks stay in L1
// between the passes, and their sums add up in double, so a long line's sum
// stays accurate. Floats use the SIMD exp of vector_exp.cpp; doubles Eigen's,
// whose clamped input makes exp(-inf) the smallest double instead of 0.
template <class V>
double exp_and_sum(const V* x, V* y, int64_t n, V m) {
  double total = 0;
  for (int64_t begin = 0; begin < n; begin += kExpBlock) {
    const int64_t count = std::min(kExpBlock, n - begin);
    if constexpr (std::is_same_v<V, float>) {
      total += exp_shifted_sum(x + begin, y + begin, count, m);
    } else {
      Eigen::Map<Array<V>> out(y + begin, count);
      out = (Eigen::Map<const Array<V>>(x + begin, count) - m).exp();
      for (int64_t i = begin; i < begin + count; ++i) y[i] = x[i] == -kInfinity<V> ? V(0) : y[i];
      total += double(out.sum());
    }
  }
  return total;
}

// out = softmax or log_softmax of a dense line, given its max m and sum s of
// exp(x - m). log_softmax is (x - m) - log(s): for logits of large magnitude
// m + log(s) rounds to m, and x - (m + log(s)) would lose the result.
template <bool kLog, class V>
void finish_line(const V* x, V* y, int64_t n, V m, V s) {
  Eigen::Map<Array<V>> out(y, n);
  if constexpr (kLog) out = (Eigen::Map<const Array<V>>(x, n) - m) - std::log(s);
  else out *= V(1) / s;
}

// One dense line of float or double, split across threads when it alone is
// large. The pieces are whole exp blocks, and the blocks' sums are added in
// order, as one thread adds them: the result is the same bits whatever the
// thread count, as PyTorch's (per-thread partial sums added in V were not).
template <bool kLog, class V>
void dense_line(const V* x, V* y, int64_t n) {
  const int64_t threads = in_parallel_region() ? 1 : std::min<int64_t>(get_num_threads(), kMaxChunks);
  const int64_t blocks = (n + kExpBlock - 1) / kExpBlock;
  const int64_t chunks = std::min({threads, n / kParallelGrain + 1, std::max<int64_t>(blocks, 1)});
  if (chunks == 1) {
    const V m = line_max(x, n);
    finish_line<kLog>(x, y, n, m, V(exp_and_sum(x, y, n, m)));
    return;
  }
  auto each_chunk = [&](auto&& body) {
    parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
      for (int64_t c = first; c < last; ++c) {
        const int64_t begin = blocks * c / chunks * kExpBlock, end = std::min(n, blocks * (c + 1) / chunks * kExpBlock);
        body(c, begin, end);
      }
    });
  };
  V maxima[kMaxChunks];
  each_chunk([&](int64_t c, int64_t begin, int64_t end) { maxima[c] = line_max(x + begin, end - begin); });
  V m = -kInfinity<V>;
  for (int64_t c = 0; c < chunks; ++c) m = maxima[c] > m ? maxima[c] : m;
  std::vector<double> sums(static_cast<size_t>(blocks));
  each_chunk([&](int64_t, int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; b += kExpBlock)
      sums[size_t(b / kExpBlock)] = exp_and_sum(x + b, y + b, std::min(kExpBlock, end - b), m);
  });
  double total = 0;
  for (double sum : sums) total += sum;
  const V s = V(total);
  each_chunk([&](int64_t, int64_t begin, int64_t end) { finish_line<kLog>(x + begin, y + begin, end - begin, m, s); });
}

// Lines along the last dim; 16-bit types go through a float copy of each line.
template <bool kLog, class T>
void dense_lines(const SoftmaxLoop& loop) {
  const T* in = reinterpret_cast<const T*>(loop.input);
  T* out = reinterpret_cast<T*>(loop.output);
  const int64_t n = loop.size;
  parallel_for(0, loop.outer, std::max<int64_t>(1, kParallelGrain / n), [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, ComputeType<T>>) {
      for (int64_t row = begin; row < end; ++row) dense_line<kLog>(in + row * n, out + row * n, n);
    } else {
      std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
      for (int64_t row = begin; row < end; ++row) {
        for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(in[row * n + i]);
        dense_line<kLog>(x.data(), y.data(), n);
        for (int64_t i = 0; i < n; ++i) out[row * n + i] = T(y[size_t(i)]);
      }
    }
  });
}

// Lines along a dim with inner > 1: columns k0..k0+width of block `outer`,
// each pass walking the block's rows (stride inner) and a tile of columns.
template <bool kLog, class T>
void column_tile(const SoftmaxLoop& loop, int64_t outer, int64_t k0, int64_t width) {
  using V = ComputeType<T>;
  const int64_t size = loop.size, inner = loop.inner;
  const T* x = reinterpret_cast<const T*>(loop.input) + outer * size * inner + k0;
  T* y = reinterpret_cast<T*>(loop.output) + outer * size * inner + k0;
  V m[kColumnWidth], s[kColumnWidth];
  for (int64_t k = 0; k < width; ++k) m[k] = -kInfinity<V>, s[k] = V(0);
  for (int64_t i = 0; i < size; ++i)
    for (int64_t k = 0; k < width; ++k) m[k] = V(x[i * inner + k]) > m[k] ? V(x[i * inner + k]) : m[k];
  if constexpr (std::is_same_v<T, float>) {  // exp once, through the SIMD exp, kept in y
    float shifted[kColumnWidth];
    for (int64_t i = 0; i < size; ++i) {
      for (int64_t k = 0; k < width; ++k) shifted[k] = x[i * inner + k] - m[k];
      exp_shifted_sum(shifted, y + i * inner, width, 0.0f);
      for (int64_t k = 0; k < width; ++k) s[k] += y[i * inner + k];
    }
  } else {
    for (int64_t i = 0; i < size; ++i)
      for (int64_t k = 0; k < width; ++k) s[k] += std::exp(V(x[i * inner + k]) - m[k]);
  }
  for (int64_t k = 0; k < width; ++k) s[k] = kLog ? std::log(s[k]) : V(1) / s[k];
  for (int64_t i = 0; i < size; ++i)
    for (int64_t k = 0; k < width; ++k) {
      V v = V(x[i * inner + k]);
      if constexpr (kLog) y[i * inner + k] = T((v - m[k]) - s[k]);  // as finish_line
      else if constexpr (std::is_same_v<T, float>) y[i * inner + k] *= s[k];
      else y[i * inner + k] = T(std::exp(v - m[k]) * s[k]);
    }
}

template <bool kLog, class T>
void column_lines(const SoftmaxLoop& loop) {
  const int64_t tiles = (loop.inner + kColumnWidth - 1) / kColumnWidth;
  const int64_t grain = std::max<int64_t>(1, kParallelGrain / (loop.size * std::min(loop.inner, kColumnWidth)));
  parallel_for(0, loop.outer * tiles, grain, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      int64_t k0 = item % tiles * kColumnWidth;
      column_tile<kLog, T>(loop, item / tiles, k0, std::min(kColumnWidth, loop.inner - k0));
    }
  });
}

template <bool kLog, class T>
void softmax(const SoftmaxLoop& loop) {
  if (loop.inner == 1) dense_lines<kLog, T>(loop);
  else column_lines<kLog, T>(loop);
}

}  // namespace

void register_softmax_kernels() {
  register_for<float, double, Half, BFloat16>(softmax_op, DeviceType::cpu,
                                              [](auto tag) { return &softmax<false, decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(log_softmax_op, DeviceType::cpu,
                                              [](auto tag) { return &softmax<true, decltype(tag)>; });
}

}  // namespace ember::cpu
