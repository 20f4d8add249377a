// CUDA binary element-wise kernels: arithmetic, maximum/minimum, pow, where,
// addcmul and masked_fill, each the expression of its reference kernel
// (kernels/reference/elementwise.cpp, indexing.cpp) in the compute type, with
// core/arithmetic.h's functions (integers wrap, nan propagates through
// maximum/minimum). Registered for the dtypes the CPU backend registers.
// Tests: tests/cuda/test_cuda_elementwise.cpp.
#include <bit>
#include <cmath>

#include "core/arithmetic.h"
#include "core/ops/elementwise_kernels.h"
#include "core/ops/indexing_kernels.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/families.h"

namespace ember::cuda {
namespace {

struct Add {
  static constexpr const char* name = "add";
  template <class C> __device__ C operator()(C a, C b) const { return arith::add(a, b); }
};
struct Sub {
  static constexpr const char* name = "sub";
  template <class C> __device__ C operator()(C a, C b) const { return arith::sub(a, b); }
};
struct Mul {
  static constexpr const char* name = "mul";
  template <class C> __device__ C operator()(C a, C b) const { return arith::mul(a, b); }
};
struct Div {
  static constexpr const char* name = "div";
  template <class C> __device__ C operator()(C a, C b) const { return arith::div(a, b); }
};
struct Maximum {
  static constexpr const char* name = "maximum";
  template <class C> __device__ C operator()(C a, C b) const { return arith::maximum(a, b); }
};
struct Minimum {
  static constexpr const char* name = "minimum";
  template <class C> __device__ C operator()(C a, C b) const { return arith::minimum(a, b); }
};
// Integer exponents by repeated squaring (negative ones give 0, or +-1 for bases +-1).
struct Fmod {
  static constexpr const char* name = "fmod";
  template <class C> __device__ C operator()(C a, C b) const { return arith::fmod(a, b); }
};
struct Remainder {
  static constexpr const char* name = "remainder";
  template <class C> __device__ C operator()(C a, C b) const { return arith::remainder(a, b); }
};
struct FloorDivide {
  static constexpr const char* name = "floor_divide";
  template <class C> __device__ C operator()(C a, C b) const { return arith::floor_divide(a, b); }
};
struct Pow {
  static constexpr const char* name = "pow";
  template <class C> __device__ C operator()(C a, C b) const {
    if constexpr (std::is_integral_v<C>) return arith::power(a, int64_t(b));
    else return std::pow(a, b);
  }
};

template <class T, class F>
void binary(const ElementwiseLoop& loop) {
  launch_elementwise<T, T, T>(loop, F{}, F::name);
}

// where and masked_fill select stored values: they run on the unsigned
// integer of T's size, so dtypes of one size share a kernel.
struct Select {
  template <class B> __device__ B operator()(bool condition, B a, B b) const { return condition ? a : b; }
};
template <class T>
void where(const ElementwiseLoop& loop) {
  using Bits = StoredBits<T>;
  launch_elementwise<Bits, bool, Bits, Bits>(loop, Select{}, "where");
}

template <class B>
struct MaskedFill {
  B value;
  __device__ B operator()(B input, bool mask) const { return mask ? value : input; }
};
template <class T>
void masked_fill(const ElementwiseLoop& loop, const Scalar& value) {
  using Bits = StoredBits<T>;
  launch_elementwise<Bits, Bits, bool>(loop, MaskedFill<Bits>{std::bit_cast<Bits>(value.to<T>())}, "masked_fill");
}

// input + value * tensor1 * tensor2 in the reference's order of operations.
template <class C>
struct Addcmul {
  C scale;
  __device__ C operator()(C input, C tensor1, C tensor2) const {
    return arith::add(input, arith::mul(arith::mul(scale, tensor1), tensor2));
  }
};
template <class T>
void addcmul(const ElementwiseLoop& loop, const Scalar& value) {
  using C = ComputeType<T>;
  launch_elementwise<T, T, T, T>(loop, Addcmul<C>{value.to<C>()}, "addcmul");
}

}  // namespace

void register_elementwise_binary_kernels() {
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      add_op, DeviceType::cuda, [](auto tag) { return &binary<decltype(tag), Add>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      sub_op, DeviceType::cuda, [](auto tag) { return &binary<decltype(tag), Sub>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      mul_op, DeviceType::cuda, [](auto tag) { return &binary<decltype(tag), Mul>; });
  register_for<float, double, Half, BFloat16>(
      div_op, DeviceType::cuda, [](auto tag) { return &binary<decltype(tag), Div>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      maximum_op, DeviceType::cuda, [](auto tag) { return &binary<decltype(tag), Maximum>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      minimum_op, DeviceType::cuda, [](auto tag) { return &binary<decltype(tag), Minimum>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      pow_op, DeviceType::cuda, [](auto tag) { return &binary<decltype(tag), Pow>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      fmod_op, DeviceType::cuda, [](auto tag) { return &binary<decltype(tag), Fmod>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      remainder_op, DeviceType::cuda, [](auto tag) { return &binary<decltype(tag), Remainder>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      floor_divide_op, DeviceType::cuda, [](auto tag) { return &binary<decltype(tag), FloorDivide>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      where_op, DeviceType::cuda, [](auto tag) { return &where<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      addcmul_op, DeviceType::cuda, [](auto tag) { return &addcmul<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      masked_fill_op, DeviceType::cuda, [](auto tag) { return &masked_fill<decltype(tag)>; });
}

}  // namespace ember::cuda
