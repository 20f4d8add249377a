// What the CPU convolution (conv.cpp) and pooling (pool.cpp) kernels share:
// the f32 round trip of the 16-bit floats that oneDNN serves only in f32, and
// plain NCHW memory descriptors. Tests: tests/core/test_conv.cpp.
#pragma once

#include "core/convert.h"
#include "core/ops/conv.h"
#include "core/tensor.h"
#include "kernels/cpu/onednn.h"

namespace ember::cpu {

// A contiguous copy of `count` From elements as To (16-bit floats widened
// for a kernel that computes in f32).
template <class To, class From>
Tensor converted(const void* data, int64_t count) {
  Tensor out = make_tensor({count}, dtype_of<To>);
  const From* in = static_cast<const From*>(data);
  To* result = out.data_ptr<To>();
  for (int64_t i = 0; i < count; ++i) result[i] = convert<To>(in[i]);
  return out;
}

// Rounds an f32 result `wide` into the caller's `out` of To.
template <class To>
void convert_into(const Tensor& wide, void* out) {
  const float* in = wide.data_ptr<float>();
  To* result = static_cast<To*>(out);
  for (int64_t i = 0; i < wide.numel(); ++i) result[i] = To(in[i]);
}

inline dnnl::memory::desc nchw(int64_t n, int64_t c, const Pair& size, dnnl::memory::data_type type) {
  return dnnl::memory::desc({n, c, size[0], size[1]}, type, dnnl::memory::format_tag::nchw);
}

}  // namespace ember::cpu
