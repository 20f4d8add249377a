// CPU addcmul: out = input + value * tensor1 * tensor2 in one pass over four
// operands, so it moves 4 arrays where a * b + c moves 5 (and allocates a
// temporary). Dense rows get their own vectorised loop; other strides the
// strided one. Oracle: kernels/reference/elementwise.cpp; tests: tests/core/test_addcmul.cpp.
#include <cstdint>

#include "core/arithmetic.h"
#include "core/ops/elementwise_kernels.h"
#include "kernels/cpu/families.h"

namespace ember::cpu {
namespace {

// The same expression as the reference, in the compute type: integers wrap,
// 16-bit floats round once.
template <class T>
T addcmul_one(T input, T tensor1, T tensor2, ComputeType<T> scale) {
  using C = ComputeType<T>;
  return T(arith::add(C(input), arith::mul(arith::mul(scale, C(tensor1)), C(tensor2))));
}

template <class T>
void addcmul(const ElementwiseLoop& loop, const Scalar& value) {
  const ComputeType<T> scale = value.to<ComputeType<T>>();
  parallel_rows(loop, [scale](char** p, const int64_t* s, int64_t n) {
    T* __restrict out = reinterpret_cast<T*>(p[0]);
    const T* input = reinterpret_cast<const T*>(p[1]);
    const T* tensor1 = reinterpret_cast<const T*>(p[2]);
    const T* tensor2 = reinterpret_cast<const T*>(p[3]);
    if (s[0] == 1 && s[1] == 1 && s[2] == 1 && s[3] == 1) {
      for (int64_t i = 0; i < n; ++i) out[i] = addcmul_one(input[i], tensor1[i], tensor2[i], scale);
    } else {
      for (int64_t i = 0; i < n; ++i)
        out[i * s[0]] = addcmul_one(input[i * s[1]], tensor1[i * s[2]], tensor2[i * s[3]], scale);
    }
  });
}

}  // namespace

void register_elementwise_addcmul_kernels() {
  register_for<float, double, Half, BFloat16, int32_t, int64_t>(
      addcmul_op, DeviceType::cpu, [](auto tag) { return &addcmul<decltype(tag)>; });
}

}  // namespace ember::cpu
