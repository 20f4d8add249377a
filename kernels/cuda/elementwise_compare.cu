// CUDA comparison and logic kernels: eq ... ge, logical_and/or/not, isnan,
// isinf. All write bool; 16-bit floats compare as float and any nonzero value
// (nan included) is true, as in kernels/reference/elementwise.cpp. Registered
// for the dtypes the CPU backend registers. Tests: tests/cuda/test_cuda_elementwise.cpp.
#include <cmath>
#include <functional>

#include "core/arithmetic.h"
#include "core/ops/elementwise_kernels.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/families.h"

namespace ember::cuda {
namespace {

// The std comparison objects are constexpr, so device code may call them.
template <class Compare>
struct Comparison {
  template <class C> __device__ bool operator()(C a, C b) const { return Compare{}(a, b); }
};
struct LogicalAnd {
  template <class C> __device__ bool operator()(C a, C b) const { return a != C(0) && b != C(0); }
};
struct LogicalOr {
  template <class C> __device__ bool operator()(C a, C b) const { return a != C(0) || b != C(0); }
};
struct LogicalNot {
  template <class C> __device__ bool operator()(C x) const { return x == C(0); }
};
struct IsNan {
  template <class C> __device__ bool operator()(C x) const { return arith::is_nan(x); }
};
struct IsInf {
  template <class C> __device__ bool operator()(C x) const {
    if constexpr (std::is_integral_v<C>) return false;
    else return std::isinf(x);
  }
};

template <class T, class F>
void binary(const ElementwiseLoop& loop) {
  launch_elementwise<bool, T, T>(loop, F{}, "comparison");
}
template <class T, class F>
void unary(const ElementwiseLoop& loop) {
  launch_elementwise<bool, T>(loop, F{}, "predicate");
}

template <class F>
void register_binary(Op<ElementwiseKernel>& op) {
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      op, DeviceType::cuda, [](auto tag) { return &binary<decltype(tag), F>; });
}
template <class F>
void register_unary(Op<ElementwiseKernel>& op) {
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      op, DeviceType::cuda, [](auto tag) { return &unary<decltype(tag), F>; });
}

}  // namespace

void register_elementwise_compare_kernels() {
  register_binary<Comparison<std::equal_to<>>>(eq_op);
  register_binary<Comparison<std::not_equal_to<>>>(ne_op);
  register_binary<Comparison<std::less<>>>(lt_op);
  register_binary<Comparison<std::less_equal<>>>(le_op);
  register_binary<Comparison<std::greater<>>>(gt_op);
  register_binary<Comparison<std::greater_equal<>>>(ge_op);
  register_binary<LogicalAnd>(logical_and_op);
  register_binary<LogicalOr>(logical_or_op);
  register_unary<LogicalNot>(logical_not_op);
  register_unary<IsNan>(isnan_op);
  register_unary<IsInf>(isinf_op);
}

}  // namespace ember::cuda
