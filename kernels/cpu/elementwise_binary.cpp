// CPU binary element-wise kernels (arithmetic, maximum/minimum, pow, where).
// The dense and broadcast-scalar cases get their own loops so the compiler
// vectorises them; any other stride pattern takes the strided loop. Rows are
// split across threads above kParallelGrain. Tests: tests/core/test_{binary,compare,unary}.cpp.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/arithmetic.h"
#include "core/ops/elementwise_kernels.h"
#include "kernels/cpu/binary_loop.h"
#include "kernels/cpu/families.h"

namespace ember::cpu {
namespace {

// Generic lambdas: binary_loop may call them on f16 elements widened to f32
// (ComputesInF32, binary_loop.h), where they compute the same value unrounded.
template <class T> void add(const ElementwiseLoop& loop) { binary_loop<T, T, T>(loop, [](auto a, auto b) { return arith::add(a, b); }); }
template <class T> void sub(const ElementwiseLoop& loop) { binary_loop<T, T, T>(loop, [](auto a, auto b) { return arith::sub(a, b); }); }
template <class T> void mul(const ElementwiseLoop& loop) { binary_loop<T, T, T>(loop, [](auto a, auto b) { return arith::mul(a, b); }); }
template <class T> void div(const ElementwiseLoop& loop) { binary_loop<T, T, T>(loop, [](auto a, auto b) { return arith::div(a, b); }); }
template <class T> void maximum(const ElementwiseLoop& loop) {
  binary_loop<T, T, T>(loop, [](T a, T b) { return arith::maximum(a, b); });
}
template <class T> void minimum(const ElementwiseLoop& loop) {
  binary_loop<T, T, T>(loop, [](T a, T b) { return arith::minimum(a, b); });
}

template <class T> void fmod(const ElementwiseLoop& loop) {
  binary_loop<T, T, T>(loop, [](T a, T b) { return arith::fmod(a, b); });
}
template <class T> void remainder(const ElementwiseLoop& loop) {
  binary_loop<T, T, T>(loop, [](T a, T b) { return arith::remainder(a, b); });
}
template <class T> void floor_divide(const ElementwiseLoop& loop) {
  binary_loop<T, T, T>(loop, [](T a, T b) { return arith::floor_divide(a, b); });
}

template <class T> void pow(const ElementwiseLoop& loop) {
  binary_loop<T, T, T>(loop, [](T a, T b) {
    if constexpr (std::is_integral_v<T>) return arith::power(a, int64_t(b));
    else return T(std::pow(ComputeType<T>(a), ComputeType<T>(b)));
  });
}

// where selects stored bits, so it runs on the unsigned integer of T's size:
// no conversion, and one loop body serves dtypes of equal size.
template <class T> void where(const ElementwiseLoop& loop) {
  using Bits = StoredBits<T>;
  parallel_rows(loop, [](char** p, const int64_t* s, int64_t n) {
    Bits* out = reinterpret_cast<Bits*>(p[0]);
    const bool* condition = reinterpret_cast<const bool*>(p[1]);
    const Bits* a = reinterpret_cast<const Bits*>(p[2]);
    const Bits* b = reinterpret_cast<const Bits*>(p[3]);
    if (s[0] == 1 && s[1] == 1 && s[2] == 1 && s[3] == 1) {
      for (int64_t i = 0; i < n; ++i) out[i] = condition[i] ? a[i] : b[i];
    } else if (s[0] == 1 && s[1] == 1 && s[2] == 1 && s[3] == 0) {
      const Bits fill = *b;
      for (int64_t i = 0; i < n; ++i) out[i] = condition[i] ? a[i] : fill;
    } else {
      for (int64_t i = 0; i < n; ++i) out[i * s[0]] = condition[i * s[1]] ? a[i * s[2]] : b[i * s[3]];
    }
  });
}

}  // namespace

void register_elementwise_binary_kernels() {
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      add_op, DeviceType::cpu, [](auto tag) { return &add<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      sub_op, DeviceType::cpu, [](auto tag) { return &sub<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      mul_op, DeviceType::cpu, [](auto tag) { return &mul<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(div_op, DeviceType::cpu, [](auto tag) { return &div<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      fmod_op, DeviceType::cpu, [](auto tag) { return &fmod<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      remainder_op, DeviceType::cpu, [](auto tag) { return &remainder<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      floor_divide_op, DeviceType::cpu, [](auto tag) { return &floor_divide<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      maximum_op, DeviceType::cpu, [](auto tag) { return &maximum<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      minimum_op, DeviceType::cpu, [](auto tag) { return &minimum<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      pow_op, DeviceType::cpu, [](auto tag) { return &pow<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      where_op, DeviceType::cpu, [](auto tag) { return &where<decltype(tag)>; });
}

}  // namespace ember::cpu
