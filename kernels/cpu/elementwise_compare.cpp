// CPU comparison and logic kernels: eq ... ge, logical_and/or/not, isnan,
// isinf. All write bool; 16-bit floats compare as float, like the reference.
// Registered by elementwise.cpp; tested in tests/core/test_compare.cpp.
#include <cmath>
#include <functional>

#include "core/arithmetic.h"
#include "core/convert.h"
#include "core/ops/elementwise_kernels.h"
#include "kernels/cpu/binary_loop.h"
#include "kernels/cpu/families.h"

namespace ember::cpu {
namespace {

template <class T, class Compare>
void compare(const ElementwiseLoop& loop) {
  using C = ComputeType<T>;
  binary_loop<bool, T, T>(loop, [](T a, T b) { return Compare{}(C(a), C(b)); });
}
template <class T> void logical_and(const ElementwiseLoop& loop) {
  binary_loop<bool, T, T>(loop, [](T a, T b) { return convert<bool>(a) && convert<bool>(b); });
}
template <class T> void logical_or(const ElementwiseLoop& loop) {
  binary_loop<bool, T, T>(loop, [](T a, T b) { return convert<bool>(a) || convert<bool>(b); });
}
template <class T> void logical_not(const ElementwiseLoop& loop) {
  unary_loop<bool, T>(loop, [](T x) { return !convert<bool>(x); });
}
template <class T> void isnan(const ElementwiseLoop& loop) {
  unary_loop<bool, T>(loop, [](T x) { return arith::is_nan(x); });
}
template <class T> void isinf(const ElementwiseLoop& loop) {
  unary_loop<bool, T>(loop, [](T x) {
    if constexpr (std::is_integral_v<T>) return false;
    else return std::isinf(ComputeType<T>(x));
  });
}

template <class Compare>
void register_compare(Op<ElementwiseKernel>& op) {
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      op, DeviceType::cpu, [](auto tag) { return &compare<decltype(tag), Compare>; });
}

}  // namespace

void register_elementwise_compare_kernels() {
  register_compare<std::equal_to<>>(eq_op);
  register_compare<std::not_equal_to<>>(ne_op);
  register_compare<std::less<>>(lt_op);
  register_compare<std::less_equal<>>(le_op);
  register_compare<std::greater<>>(gt_op);
  register_compare<std::greater_equal<>>(ge_op);
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      logical_and_op, DeviceType::cpu, [](auto tag) { return &logical_and<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      logical_or_op, DeviceType::cpu, [](auto tag) { return &logical_or<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      logical_not_op, DeviceType::cpu, [](auto tag) { return &logical_not<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      isnan_op, DeviceType::cpu, [](auto tag) { return &isnan<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      isinf_op, DeviceType::cpu, [](auto tag) { return &isinf<decltype(tag)>; });
}

}  // namespace ember::cpu
