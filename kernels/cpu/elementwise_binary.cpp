// CPU binary element-wise kernels. The dense and broadcast-scalar cases get
// their own loops so the compiler vectorises them; any other stride pattern
// takes the strided loop. Rows are split across threads above kParallelGrain.
#include "core/arithmetic.h"
#include "core/ops/elementwise_kernels.h"
#include "kernels/cpu/binary_loop.h"
#include "kernels/cpu/families.h"

namespace ember::cpu {
namespace {

template <class T> void add(const ElementwiseLoop& loop) { binary_loop<T, T, T>(loop, [](T a, T b) { return arith::add(a, b); }); }
template <class T> void sub(const ElementwiseLoop& loop) { binary_loop<T, T, T>(loop, [](T a, T b) { return arith::sub(a, b); }); }
template <class T> void mul(const ElementwiseLoop& loop) { binary_loop<T, T, T>(loop, [](T a, T b) { return arith::mul(a, b); }); }
template <class T> void div(const ElementwiseLoop& loop) { binary_loop<T, T, T>(loop, [](T a, T b) { return arith::div(a, b); }); }

}  // namespace

void register_elementwise_binary_kernels() {
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      add_op, DeviceType::cpu, [](auto tag) { return &add<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      sub_op, DeviceType::cpu, [](auto tag) { return &sub<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      mul_op, DeviceType::cpu, [](auto tag) { return &mul<decltype(tag)>; });
  register_for<float, double, Half, BFloat16>(div_op, DeviceType::cpu, [](auto tag) { return &div<decltype(tag)>; });
}

}  // namespace ember::cpu
