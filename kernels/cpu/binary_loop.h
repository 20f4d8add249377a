// The loop shapes shared by CPU element-wise kernels: dense rows, a broadcast
// scalar on either side, and the general strided row. Dense and scalar rows of
// 16-bit floats run a copy of the loop compiled for AVX2 where the CPU has it:
// each element is widened to f32 and rounded back, work the baseline's SSE2
// does at half the width (convert_run.h).
#pragma once

#include "core/cpu_features.h"
#include "core/elementwise_loop.h"
#include "kernels/cpu/convert_run.h"
#include "kernels/cpu/target_isa.h"

namespace ember::cpu {

// out[i] = f(a[i], b[i]), or with a broadcast scalar (step 0) on one side,
// read once: out may alias the inputs.
template <int kAStep, int kBStep, class Out, class A, class B, class F>
[[gnu::always_inline]] inline void dense_binary(Out* out, const A* a, const B* b, int64_t n, F& f) {
  if constexpr (kBStep == 0) {
    const B scalar = *b;
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], scalar);
  } else if constexpr (kAStep == 0) {
    const A scalar = *a;
    for (int64_t i = 0; i < n; ++i) out[i] = f(scalar, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
  }
}
template <int kAStep, int kBStep, class Out, class A, class B, class F>
EMBER_TARGET_AVX2 void dense_binary_avx2(Out* out, const A* a, const B* b, int64_t n, F& f) {
  dense_binary<kAStep, kBStep>(out, a, b, n, f);
}
template <int kAStep, int kBStep, class Out, class A, class B, class F>
void dense_binary_run(Out* out, const A* a, const B* b, int64_t n, F& f) {
  if constexpr (is_16_bit_float<Out> || is_16_bit_float<A> || is_16_bit_float<B>) {
    if (cpu_has_avx2()) return dense_binary_avx2<kAStep, kBStep>(out, a, b, n, f);
  }
  dense_binary<kAStep, kBStep>(out, a, b, n, f);
}

template <class Out, class A, class B, class F>
void binary_loop(const ElementwiseLoop& loop, F f) {
  parallel_rows(loop, [&](char** p, const int64_t* s, int64_t n) {
    Out* out = reinterpret_cast<Out*>(p[0]);
    const A* a = reinterpret_cast<const A*>(p[1]);
    const B* b = reinterpret_cast<const B*>(p[2]);
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      dense_binary_run<1, 1>(out, a, b, n, f);
    } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {
      dense_binary_run<1, 0>(out, a, b, n, f);
    } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {
      dense_binary_run<0, 1>(out, a, b, n, f);
    } else {
      for (int64_t i = 0; i < n; ++i) out[i * s[0]] = f(a[i * s[1]], b[i * s[2]]);
    }
  });
}

template <class Out, class In, class F>
void unary_loop(const ElementwiseLoop& loop, F f) {
  parallel_rows(loop, [&](char** p, const int64_t* s, int64_t n) {
    Out* out = reinterpret_cast<Out*>(p[0]);
    const In* in = reinterpret_cast<const In*>(p[1]);
    if (s[0] == 1 && s[1] == 1) {
      for (int64_t i = 0; i < n; ++i) out[i] = f(in[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) out[i * s[0]] = f(in[i * s[1]]);
    }
  });
}

}  // namespace ember::cpu
