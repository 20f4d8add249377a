// Reference element-wise kernels: one element at a time through for_each_row,
// with the scalar functions of core/arithmetic.h.
#include "core/arithmetic.h"
#include "core/ops/elementwise_kernels.h"
#include "kernels/reference/families.h"

namespace ember::reference {
namespace {

template <class Out, class A, class B, class F>
void binary(const ElementwiseLoop& loop, F f) {
  for_each_row(loop, 0, loop.numel, [&](char** p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      A a = reinterpret_cast<const A*>(p[1])[i * s[1]];
      B b = reinterpret_cast<const B*>(p[2])[i * s[2]];
      reinterpret_cast<Out*>(p[0])[i * s[0]] = f(a, b);
    }
  });
}

template <class T> void add(const ElementwiseLoop& loop) { binary<T, T, T>(loop, [](T a, T b) { return arith::add(a, b); }); }
template <class T> void sub(const ElementwiseLoop& loop) { binary<T, T, T>(loop, [](T a, T b) { return arith::sub(a, b); }); }
template <class T> void mul(const ElementwiseLoop& loop) { binary<T, T, T>(loop, [](T a, T b) { return arith::mul(a, b); }); }
template <class T> void div(const ElementwiseLoop& loop) { binary<T, T, T>(loop, [](T a, T b) { return arith::div(a, b); }); }

}  // namespace

void register_elementwise_kernels() {
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      add_op, [](auto tag) { return &add<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t>(
      sub_op, [](auto tag) { return &sub<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      mul_op, [](auto tag) { return &mul<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16>(div_op, [](auto tag) { return &div<decltype(tag)>; });
}

}  // namespace ember::reference
