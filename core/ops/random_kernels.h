// The kernel interface of random creation (entry points: core/ops/random.cpp;
// kernels: kernels/{reference,cpu}/random.cpp). Element i of a stream comes
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

namespace random_detail {

// Values per Philox block: f64 needs two 32-bit words per uniform.
template <class T>
inline constexpr int kUniformsPerBlock = std::is_same_v<T, double> ? 2 : 4;

// The functions below return T's compute type, which the caller stores as T:
// device code cannot construct core's Half and BFloat16 (their conversions are
// host functions), and each value here converts to T exactly, or as a store
// from the compute type rounds it (to nearest even on every backend).

// A uniform in [0, 1) from lane `lane` of a block, with no more random bits
// than T can hold, so rounding never reaches 1 and the conversion to T is exact.
template <class T>
EMBER_HOST_DEVICE inline ComputeType<T> uniform(const std::array<uint32_t, 4>& words, int lane) {
  if constexpr (std::is_same_v<T, double>) return uniform_double(words[2 * lane], words[2 * lane + 1]);
  else if constexpr (std::is_same_v<T, float>) return uniform_float(words[lane]);
  else if constexpr (std::is_same_v<T, Half>) return float(words[lane] >> 21) * (1.0f / 2048.0f);
  else return float(words[lane] >> 24) * (1.0f / 256.0f);
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

// randint draws one 32-bit word per value when the range fits in 32 bits, two otherwise.
EMBER_HOST_DEVICE inline int randint_per_block(uint64_t range) { return range <= (uint64_t(1) << 32) ? 4 : 2; }

template <class T>
EMBER_HOST_DEVICE inline ComputeType<T> randint(const std::array<uint32_t, 4>& words, int lane, int64_t low,
                                                uint64_t range) {
  uint64_t bits = range <= (uint64_t(1) << 32) ? uint64_t(words[lane])
                                               : (uint64_t(words[2 * lane]) << 32) | words[2 * lane + 1];
  // An integer's conversion to the compute type is convert<T>'s (core/convert.h),
  // which device code cannot call for 16-bit T.
  return ComputeType<T>(int64_t(uint64_t(low) + bits % range));
}

}  // namespace random_detail
}  // namespace ember
