// Reference copy and fill: one element at a time, converting through the
// destination's compute type.
#include "core/convert.h"
#include "core/ops/elementwise_kernels.h"
#include "kernels/reference/families.h"

namespace ember::reference {
namespace {

template <class Out>
void copy(const ElementwiseLoop& loop) {
  visit_dtype(loop.dtypes[1], [&]<class In>() {
    for_each_row(loop, 0, loop.numel, [](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        reinterpret_cast<Out*>(p[0])[i * s[0]] = convert<Out>(reinterpret_cast<const In*>(p[1])[i * s[1]]);
      }
    });
  });
}

template <class Out>
void fill(const ElementwiseLoop& loop, const Scalar& value) {
  Out v = value.to<Out>();
  for_each_row(loop, 0, loop.numel, [&](char** p, const int64_t* s, int64_t n) {
    for (int64_t i = 0; i < n; ++i) reinterpret_cast<Out*>(p[0])[i * s[0]] = v;
  });
}

}  // namespace

void register_copy_kernels() {
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      copy_op, [](auto tag) { return &copy<decltype(tag)>; });
  register_reference_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      fill_op, [](auto tag) { return &fill<decltype(tag)>; });
}

}  // namespace ember::reference
