// CPU copy and fill. Same-dtype dense copies are memcpy in parallel chunks;
// transposing ones go tile by tile (copy_tiled.cpp); other strided ones and
// fill move the stored bits; conversions are a typed loop the
// compiler vectorises when strides are 1 (to and from the 16-bit floats at
// AVX2 where the CPU has it).
#include <cstring>

#include "core/convert.h"
#include "core/ops/elementwise_kernels.h"
#include "kernels/cpu/convert_run.h"
#include "kernels/cpu/copy_tiled.h"
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
  if (loop.dtypes[1] == loop.dtypes[0]) {  // strided, same dtype: move the bits
    if (copy_tiled(loop, sizeof(Out))) return;
    using Bits = StoredBits<Out>;
    parallel_rows(loop, [](char** p, const int64_t* s, int64_t n) {
      Bits* out = reinterpret_cast<Bits*>(p[0]);
      const Bits* in = reinterpret_cast<const Bits*>(p[1]);
      if (s[0] == 1 && s[1] == -1) {  // flip's reversed run (Note [Flip as a reversed-stride copy]): vectorises
        for (int64_t i = 0; i < n; ++i) out[i] = in[-i];
        return;
      }
      for (int64_t i = 0; i < n; ++i) out[i * s[0]] = in[i * s[1]];
    });
    return;
  }
  visit_dtype(loop.dtypes[1], [&]<class In>() {
    parallel_rows(loop, [](char** p, const int64_t* s, int64_t n) {
      Out* out = reinterpret_cast<Out*>(p[0]);
      const In* in = reinterpret_cast<const In*>(p[1]);
      if (s[0] == 1 && s[1] == 1) {
        convert_run(in, out, n);
      } else {
        for (int64_t i = 0; i < n; ++i) out[i * s[0]] = convert<Out>(in[i * s[1]]);
      }
    });
  });
}

template <class Out>
void fill(const ElementwiseLoop& loop, const Scalar& value) {
  using Bits = StoredBits<Out>;
  const Bits fill = std::bit_cast<Bits>(value.to<Out>());
  parallel_rows(loop, [fill](char** p, const int64_t* s, int64_t n) {
    const Bits v = fill;  // a local: read through the closure it would be reloaded after every store
    Bits* out = reinterpret_cast<Bits*>(p[0]);
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
