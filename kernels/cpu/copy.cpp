// CPU copy and fill. Same-dtype dense copies are memcpy in parallel chunks;
// everything else is a typed loop the compiler vectorises when strides are 1.
#include <cstring>

#include "core/convert.h"
#include "core/ops/elementwise_kernels.h"
#include "kernels/cpu/families.h"

namespace ember::cpu {
namespace {

template <class Out>
void copy(const ElementwiseLoop& loop) {
  if (loop.dtypes[1] == loop.dtypes[0] && loop.contiguous()) {
    char* out = loop.data[0];
    const char* in = loop.data[1];
    parallel_for(0, loop.numel, kParallelGrain, [&](int64_t begin, int64_t end) {
      std::memcpy(out + begin * sizeof(Out), in + begin * sizeof(Out), size_t(end - begin) * sizeof(Out));
    });
    return;
  }
  visit_dtype(loop.dtypes[1], [&]<class In>() {
    parallel_rows(loop, [](char** p, const int64_t* s, int64_t n) {
      Out* out = reinterpret_cast<Out*>(p[0]);
      const In* in = reinterpret_cast<const In*>(p[1]);
      if (s[0] == 1 && s[1] == 1) {
        for (int64_t i = 0; i < n; ++i) out[i] = convert<Out>(in[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) out[i * s[0]] = convert<Out>(in[i * s[1]]);
      }
    });
  });
}

template <class Out>
void fill(const ElementwiseLoop& loop, const Scalar& value) {
  const Out v = value.to<Out>();
  parallel_rows(loop, [&](char** p, const int64_t* s, int64_t n) {
    Out* out = reinterpret_cast<Out*>(p[0]);
    if (s[0] == 1) {
      for (int64_t i = 0; i < n; ++i) out[i] = v;
    } else {
      for (int64_t i = 0; i < n; ++i) out[i * s[0]] = v;
    }
  });
}

}  // namespace

void register_copy_kernels() {
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      copy_op, DeviceType::cpu, [](auto tag) { return &copy<decltype(tag)>; });
  register_for<float, double, Half, BFloat16, int32_t, int64_t, bool>(
      fill_op, DeviceType::cpu, [](auto tag) { return &fill<decltype(tag)>; });
}

}  // namespace ember::cpu
