// The kernel interface of random creation and multinomial sampling (entry
// points: core/ops/random.cpp; kernels: kernels/{reference,cpu}/random.cpp,
// kernels/cuda/random.cu). Element i of a stream comes
// from lane i % per_block of Philox block (offset + i / per_block), so any
// split of the elements across threads gives the same tensor. The functions
// that turn a block into values live here, shared by every backend (the CUDA
// kernels call them too: EMBER_HOST_DEVICE), so the backends produce
// bit-identical values.
#pragma once

#include <array>
#include <cmath>
#include <numbers>
#include <type_traits>

#include "core/dispatch.h"
#include "core/random.h"
#include "core/tensor.h"

namespace ember {

// out (contiguous) filled from the stream (seed, first block offset); keyed by out's dtype.
extern Op<void(const Tensor& out, GeneratorState stream)> uniform_op, normal_op;
extern Op<void(const Tensor& out, GeneratorState stream, int64_t low, int64_t high)> randint_op;

// multinomial: `weights` is a contiguous f64 [rows, categories] working copy
// of the validated weights, which the kernel overwrites (with replacement
// by their running sums; without, it zeroes each category it draws); `out` is contiguous i64
// [rows, samples]. Keyed by f64, the working copy's dtype, whatever the
// input's floating dtype (the conversion is exact).
struct MultinomialProblem {
  double* weights = nullptr;
  int64_t* out = nullptr;
  int64_t rows = 0, categories = 0, samples = 0;
  bool replacement = false;
  GeneratorState stream;
};
extern Op<void(const MultinomialProblem&)> multinomial_op;

namespace random_detail {

// Values per Philox block: f64 needs two 32-bit words per uniform.
template <class T>
inline constexpr int kUniformsPerBlock = std::is_same_v<T, double> ? 2 : 4;

// The functions below return T's compute type, which the caller stores as T:
// device code cannot construct core's Half and BFloat16 (their conversions are
// host functions), and each value here converts to T exactly, or as a store
// from the compute type rounds it (to nearest even on every backend).

// A uniform in [0, 1) from lane `lane` of a block. f32 and f64 take no more
// random bits than they hold, so the value is exact and below 1. A 16-bit T
// takes f32's draw, which the store rounds to T, so a value keeps T's whole
// resolution near 0 and is the f32 tensor's, rounded; a draw that would round
// up to 1 gives 0 instead, as PyTorch 2's: [1 - 2^-9, 1) for bf16 and
// [1 - 2^-12, 1) for f16 (half an ulp below 1; the tie rounds to 1, even).
// A grid of T's own (256 values for bf16) lost every level below 2^-8.
template <class T>
EMBER_HOST_DEVICE inline ComputeType<T> uniform(const std::array<uint32_t, 4>& words, int lane) {
  if constexpr (std::is_same_v<T, double>) {
    return uniform_double(words[2 * lane], words[2 * lane + 1]);
  } else if constexpr (std::is_same_v<T, float>) {
    return uniform_float(words[lane]);
  } else {
    constexpr float rounds_to_one = std::is_same_v<T, Half> ? 1.0f - 0x1p-12f : 1.0f - 0x1p-9f;
    const float u = uniform_float(words[lane]);
    return u >= rounds_to_one ? 0.0f : u;
  }
}

// Box-Muller: the uniforms of lanes (2p, 2p+1) give the normals of lanes 2p and
// 2p+1. CUDA's logf, sinf and cosf are not glibc's, so a GPU's normals differ
// from the CPU's in the last bits (Note [Random streams on the GPU], kernels/cuda/README.md).
template <class T>
EMBER_HOST_DEVICE inline std::array<ComputeType<T>, 2> normal_pair(const std::array<uint32_t, 4>& words, int pair) {
  using Real = ComputeType<T>;
  constexpr Real two_pi = Real(2 * std::numbers::pi);
  Real u1 = uniform<Real>(words, 2 * pair), u2 = uniform<Real>(words, 2 * pair + 1);
  Real radius = std::sqrt(Real(-2) * std::log(Real(1) - u1));  // 1 - u1 is in (0, 1]
  Real angle = two_pi * u2;
  return {radius * std::cos(angle), radius * std::sin(angle)};
}

// randint takes bits % range: one 32-bit word per value up to a range of
// 2^24, where that modulo's bias is below 2^-8 of a value's odds; two words
// above it. One word for every range up to 2^32 drew values below
// 2^32 mod range twice as often as the rest (randint(0, 3e9): mean 0.41 of
// the range; PyTorch 2 fixed the same bias).
constexpr uint64_t kOneWordRandintRange = uint64_t(1) << 24;
EMBER_HOST_DEVICE inline int randint_per_block(uint64_t range) { return range <= kOneWordRandintRange ? 4 : 2; }

template <class T>
EMBER_HOST_DEVICE inline ComputeType<T> randint(const std::array<uint32_t, 4>& words, int lane, int64_t low,
                                                uint64_t range) {
  uint64_t bits = range <= kOneWordRandintRange ? uint64_t(words[lane])
                                                : (uint64_t(words[2 * lane]) << 32) | words[2 * lane + 1];
  // An integer's conversion to the compute type is convert<T>'s (core/convert.h),
  // which device code cannot call for 16-bit T.
  return ComputeType<T>(int64_t(uint64_t(low) + bits % range));
}

// multinomial draws sample s of row r with the f64 uniform of element
// r * samples + s of the stream, as f64's uniform does (two words a value).
EMBER_HOST_DEVICE inline double multinomial_uniform(GeneratorState stream, int64_t element) {
  const std::array<uint32_t, 4> words =
      philox4x32(philox_counter(stream.offset, uint64_t(element / 2)), philox_key(stream.seed));
  const int lane = int(element % 2);
  return uniform_double(words[2 * lane], words[2 * lane + 1]);
}

// The category a uniform u in [0, 1) selects: the first whose running sum of
// weights exceeds u * total. Only sums in index order and one product, which
// no fused multiply-add can change, so every backend picks the same category.
// The last category with a weight covers u * total rounding up to the total.
EMBER_HOST_DEVICE inline int64_t draw_category(const double* weights, int64_t categories, double u) {
  double total = 0;
  for (int64_t c = 0; c < categories; ++c) total += weights[c];
  const double target = u * total;
  double running = 0;
  int64_t last = 0;
  for (int64_t c = 0; c < categories; ++c) {
    if (weights[c] == 0) continue;
    running += weights[c];
    last = c;
    if (running > target) return c;
  }
  return last;
}

// With replacement the weights never change, so the row's running sums are
// computed once, in place (the same sums in the same order as draw_category's),
// and each sample is a binary search for the first running sum above
// u * total: draw_category's category in O(log categories).
EMBER_HOST_DEVICE inline int64_t search_category(const double* running, int64_t categories, double u) {
  const double total = running[categories - 1], target = u * total;
  int64_t low = 0, high = categories;
  while (low < high) {
    const int64_t middle = low + (high - low) / 2;
    if (running[middle] > target) high = middle;
    else low = middle + 1;
  }
  // u * total rounded up to the total: the last category with a weight, where the sums stop growing
  if (low == categories) low = categories - 1;
  while (low > 0 && running[low - 1] == running[low]) --low;
  return low;
}

// All the samples of one row, in order: every backend calls this, a thread per row.
EMBER_HOST_DEVICE inline void multinomial_row(const MultinomialProblem& p, int64_t row) {
  double* weights = p.weights + row * p.categories;
  int64_t* out = p.out + row * p.samples;
  if (p.replacement) {
    double running = 0;
    for (int64_t c = 0; c < p.categories; ++c) {
      running += weights[c];
      weights[c] = running;
    }
    for (int64_t s = 0; s < p.samples; ++s)
      out[s] = search_category(weights, p.categories, multinomial_uniform(p.stream, row * p.samples + s));
    return;
  }
  for (int64_t s = 0; s < p.samples; ++s) {
    out[s] = draw_category(weights, p.categories, multinomial_uniform(p.stream, row * p.samples + s));
    weights[out[s]] = 0;
  }
}

}  // namespace random_detail
}  // namespace ember
